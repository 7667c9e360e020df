// The mixture-of-experts feed-forward (DESIGN.md §7): a router picks K of E routed
// experts per token, the experts run as one grouped GEMM over the tokens sorted by
// expert (dropless: no capacity limit, ops/grouped_matmul.h), and each token's K
// outputs are combined in ascending expert index, plus optional shared experts.
//
// Parameter names (TorchTitan): moe.router.gate.weight (E, D) (+ .bias (E) with router_bias); moe.experts.w1 (E, F, D),
// moe.experts.w2 (E, D, F), moe.experts.w3 (E, F, D) (F = moe_intermediate_size; the
// expert is w2(silu(w1 x) * w3 x)); moe.shared_experts.w1/w2/w3.weight (a SwiGLU of
// width n_shared_experts * F); buffer moe.expert_bias (E) with the sigmoid router
// (HF e_score_correction_bias).
//
// Routers (fp32, logits = gate(x) through the batch-invariant GEMM):
//   softmax (Qwen3-MoE, transformers Qwen3MoeTopKRouter): p = softmax(logits); the K
//     largest p; weights = those p, divided by their sum when norm_topk_prob.
//   softmax_topk (gpt-oss, transformers GptOssTopKRouter): the K largest logits (gate
//     with bias), weights = softmax over those K logits (norm_topk_prob has no effect).
//   sigmoid (DeepSeek-V3 / Kimi K2 "noaux_tc", transformers DeepseekV3TopkRouter):
//     s = sigmoid(logits), c = s + expert_bias; the E experts form n_group groups of
//     E / n_group; a group scores the sum of its two largest c; the topk_group best
//     groups are kept, the other experts' c set to -inf; the K largest c are chosen;
//     weights = their s (not c), divided by (sum + 1e-20) when norm_topk_prob;
//     then times routed_scaling_factor.
// Every ranking sends ties to the lower index (expert or group). The sigmoid router with
// n_group = 1 and a zero bias is Llama 4's (HF Llama4Router: top-k of the logits, weights
// sigmoid(logit), not renormalised): ranking sigmoid(logits) as TorchTitan does picks the
// same experts except where fp32 sigmoid ties two different logits (|logit| > ~17).
// score_before_experts (Llama 4): each chosen expert runs on weight * x and the outputs
// are summed unweighted (out = 0 + y_1 + y_2 + ...), instead of weighting the outputs. A token's chosen
// experts are kept in ascending expert index, which is the order its expert outputs
// are summed in (out = 0 + w_1 y_1 + w_2 y_2 + ...). Nothing a token computes depends on
// the other tokens of the batch, so its output has the same bits in any batch and with
// any thread count.
//
// Aux-loss-free balancing (DeepSeek-V3 §2.1.2, TorchTitan load_balance_coeff): during
// training forwards the layer counts the tokens routed to each expert; after each
// optimizer step update_expert_bias() adds
//     delta_e = coeff * sign(mean_load - load_e),  minus mean(delta)
// to expert_bias (not a parameter: the optimizer never sees it).
//
// Sequence-level aux loss (DeepSeek-V3 eqs. 17-20), router_aux_loss_coef = alpha > 0,
// trainer path only: per sequence of T tokens (batch.cu_seqlens)
//     L = alpha * sum_i f_i P_i,  f_i = E / (K T) * #{t : i chosen for t},
//     P_i = mean_t s'_{i,t},  s' = the scores normalised to sum 1 per token,
// averaged over the sequences of the batch. Its gradient (d L / d logits, f held
// constant) is attached to the layer's output by an identity node, as DeepSeek's
// reference does: the aux loss enters backward with weight 1 whatever the trainer's
// loss scaling. Its value is reported in the layer's stats.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "titan/models/common/layers.h"
#include "titan/models/ffn/dense.h"

namespace titan::models {

// One token's routing: K expert ids in ascending order and the (T, K) weights.
struct RouterOutput {
  Tensor weights;               // (T, K) f32, differentiable w.r.t. the gate weight and x
  std::vector<int32_t> experts; // T * K ids, ascending per token
  Tensor logits;                // (T, E) f32 router logits
  Tensor scores;                // (T, E) f32 softmax or sigmoid scores (no bias)
};

class Router : public nn::Module {
 public:
  Router(const TransformerConfig& cfg, int layer_id);
  // x (T, D) f32; expert_bias (E) f32 or undefined (softmax router). Math in the file
  // comment above.
  RouterOutput forward(const Tensor& x, const Tensor& expert_bias) const;
  void init_weights(const nn::InitContext& ctx) override;  // gate: InitRole::in_proj
  Linear* gate;

 private:
  int64_t E_, K_, n_group_, topk_group_;
  bool sigmoid_, topk_softmax_, norm_topk_prob_;
  double routed_scaling_factor_;
  int layer_id_;
};

// The expert FFN of rows sorted by expert: xs (N, D), offsets G + 1 row offsets, w1
// (G, F, D), w2 (G, D, F), w3 (G, F, D) -> (N, D), row r of group g being
// w2_g(silu(w1_g x_r) * w3_g x_r) (grouped_linear: a row's bits depend on that row and its
// expert's weights only).
Tensor swiglu_experts(const Tensor& xs, const Tensor& w1, const Tensor& w2, const Tensor& w3,
                      const std::vector<int64_t>& offsets);

// Computes a layer's routed experts for rows sorted by expert: the hook through which
// expert parallelism (titan/distributed/expert_parallel.h) dispatches the rows to the
// ranks holding their experts. xs (N, D), offsets E + 1 -> (N, D), the rows of
// GroupedExperts::forward bit for bit.
class ExpertCompute {
 public:
  virtual ~ExpertCompute() = default;
  virtual Tensor forward(const Tensor& xs, const std::vector<int64_t>& offsets) = 0;
};

// The routed experts' weights, stacked: w1 (E, F, D), w2 (E, D, F), w3 (E, F, D)
// (E = num_experts, D = hidden_size, F = moe_intermediate_size); with expert_proj_bias
// also b1 (E, F), b2 (E, D), b3 (E, F).
class GroupedExperts : public nn::Module {
 public:
  GroupedExperts(const TransformerConfig& cfg, int layer_id);
  // xs (N, D) rows sorted by expert, offsets E + 1 row offsets -> (N, D), for each row
  // of expert e: w2_e act(w1_e x + b1_e, w3_e x + b3_e) + b2_e (grouped_linear; no b
  // without expert_proj_bias), act = swiglu or, with expert_act swiglu_oai, swiglu_oai
  // (ops/activation.h).
  Tensor forward(const Tensor& xs, const std::vector<int64_t>& offsets) const;
  // w1 in_proj, w2 out_proj, w3 up_proj (nn::InitRole), as the dense SwiGLU; biases 0.
  void init_weights(const nn::InitContext& ctx) override;
  Tensor w1, w2, w3;
  Tensor b1, b2, b3;  // undefined without expert_proj_bias
  // Whether forward is swiglu_experts (no biases, expert_act silu).
  bool plain_swiglu() const { return !oai_ && !b1.defined(); }

 private:
  bool oai_;
  double alpha_, limit_;
  int layer_id_;
};

// Counters a layer keeps over the training forwards since the last reset.
struct MoEStats {
  std::vector<int64_t> tokens_per_expert;  // (E) tokens routed to each expert
  int64_t tokens = 0;                      // tokens routed
  double entropy_sum = 0;                  // sum over tokens of the router entropy (nats)
  double aux_loss_sum = 0;                 // sum of the batches' sequence aux losses
  int64_t aux_batches = 0;                 // forwards that computed it
};

class MoE : public FeedForwardBase {
 public:
  MoE(const TransformerConfig& cfg, int layer_id);
  // x (T, D) -> (T, D). Stores the (T, K) i32 expert ids at
  // (*batch.routed_experts)[layer_id] when that sink is set. Counts stats while grad
  // mode is on (training forwards).
  Tensor forward(const Tensor& x, const ForwardBatch& batch, LayerCache* cache) const override;
  void init_weights(const nn::InitContext& ctx) override;  // expert_bias = 0
  void repack_for_decode() override;  // shared experts only (the grouped weights stay)

  // After an optimizer step: applies the aux-loss-free bias update from the loads
  // counted since the last call (no-op when load_balance_coeff is 0 or nothing was
  // routed), then clears those loads. `sum_loads`, when set, replaces the (E) loads by
  // their sum over the data-parallel ranks first (every rank then applies the same update).
  void update_expert_bias(const std::function<void(std::vector<int64_t>&)>& sum_loads = {});
  const MoEStats& stats() const { return stats_; }
  void reset_stats();

  Router* router;
  GroupedExperts* experts;
  FeedForward* shared_experts = nullptr;  // null when n_shared_experts = 0
  Tensor expert_bias;                     // (E) buffer; undefined with the softmax router
  // When set, the routed experts run through it instead of experts->forward.
  std::shared_ptr<ExpertCompute> expert_compute;

 private:
  int64_t E_, K_;
  double aux_coef_, load_balance_coeff_;
  bool score_before_experts_;
  int layer_id_;
  mutable MoEStats stats_;
  mutable std::vector<int64_t> pending_load_;  // loads for the next bias update
};

}  // namespace titan::models
