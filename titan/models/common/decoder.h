// The shared decoder-only transformer: embeddings -> N layers -> norm -> head, each
// layer a (mixer, feed-forward) pair chosen by layer_specs(cfg) (DESIGN.md §7). One
// definition, called by the trainer and by the generator through ForwardBatch
// (DESIGN.md §1.1); the decoder loops over layers and knows no architecture.
// Parameter names follow TorchTitan (tok_embeddings, layers.{i}.attention.wq, ...,
// norm, output); each family's state-dict adapter maps them to Hugging Face names.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <string>
#include <vector>

#include "titan/models/common/block.h"
#include "titan/models/common/layer_spec.h"
#include "titan/models/common/layers.h"

namespace titan::models {

enum class ActivationCheckpoint { none, full };

// Parameter initialisation. family: TorchTitan's scheme for cfg.family (survey §4).
// gpt2: GPT-2 / nanoGPT (model.py _init_weights): normal(0, 0.02) for every matrix and
// the embedding (also when it is the tied LM head), residual output projections
// (wo, w2) normal(0, 0.02/sqrt(2 L)), norms 1, biases 0. With tied embeddings the
// family scheme for llama3 draws the shared matrix with the LM head's std D^-0.5, so
// a token's own logit starts near sqrt(D) and the step-0 loss far above ln V; gpt2
// starts near ln V.
enum class InitScheme { family, gpt2 };

class Decoder : public nn::Module {
 public:
  explicit Decoder(const TransformerConfig& cfg);

  // Final-normed hidden states (T, D) for the batch's tokens. Throws titan::Error on
  // bad metadata (token id out of range, position beyond the RoPE table, ...).
  Tensor forward(const ForwardBatch& batch) const;

  // The LM head weight (V, D): the embedding when tied. Throws once the head is
  // repacked (repack_for_decode); logits and logprobs serve both layouts.
  Tensor lm_head_weight() const;
  bool lm_head_repacked() const;
  // logits (T, V) = hidden (T, D) · lm_head_weightᵀ, through the batch-invariant GEMM;
  // with cfg.final_logit_softcapping = c > 0 (Gemma 2), c · tanh(logits / c). With
  // lm_head_bf16(): logits_bf16 / logits_panels_bf16 (titan/ops/lm_head_bf16.h: bf16
  // inputs, fp32 accumulation and logits), trainer and generator alike.
  Tensor logits(const Tensor& hidden) const;
  // True when logits and logprobs run the bf16 head: a bf16-compute model, or once
  // repacked, a head stored as bf16 panels.
  bool lm_head_bf16() const;
  // Bytes of the LM head in its current layout (what one logits row streams).
  int64_t lm_head_bytes() const;
  // The summed next-token cross-entropy of hidden (T, D) against targets (T) (-100 =
  // ignored), scalar: linear_cross_entropy (fused, expected_grad as there; compute_bf16():
  // linear_cross_entropy_bf16), with the final soft-cap cross_entropy(logits(hidden)).
  Tensor loss_sum(const Tensor& hidden, const Tensor& targets, double expected_grad = 0.0) const;
  // titan::logprobs(hidden, lm_head_weight(), targets, temperature), or logprobs_panels
  // on the repacked head: the same bits either way; with lm_head_bf16(), logprobs_bf16 /
  // logprobs_panels_bf16 (the same bits either way). hidden (T, D) f32, targets (T) in [0, V).
  // With the final soft-cap: log_softmax(logits(hidden) / temperature)[targets].
  Tensor logprobs(const Tensor& hidden, const Tensor& targets, double temperature = 1.0) const;

  // Initialises all parameters (by default as TorchTitan does for the family, survey
  // §4) from Philox keyed by seed: deterministic and independent of thread count.
  // InitScheme::family uses the family's nn::InitStyle (Family::init_style); each module
  // initialises its own parameters (Module::init_weights).
  void init_weights(uint64_t seed, InitScheme scheme = InitScheme::family);
  void init_weights(const nn::InitContext& ctx) override;

  // Per layer, what the generator caches (blocks of block_size tokens); the engine
  // allocates a ModelCache from it (allocate_cache).
  std::vector<LayerCacheSpec> cache_spec(int block_size) const;
  const std::vector<LayerSpec>& layer_specs() const { return specs_; }

  // Inference only (infer::prepare_for_inference: titan generate, the engine
  // benchmarks): repacks every layer's projection weights (attention wq/wk/wv/wo,
  // feed-forward w1/w2/w3) with PanelRepackable::repack_for_decode, so a decode step streams
  // them in address order (1.3-1.7x the weight bandwidth of the (out, in) layout at
  // batch 1 on the Zen3 machine, docs/benchmarks-history.md). Same logits bit for bit;
  // afterwards the model can no longer be trained, saved or synced (those throw on the
  // changed parameter shapes). The LM head is repacked too (the embedding when tied,
  // whose rows embedding_panels then gathers); an untied embedding keeps its layout.
  // With compute_bf16() the layer projections and the LM head get bf16 panels
  // (repack_linear_weight_bf16: half the bytes per decode token, the bits of bf16
  // compute); a tied head's panels sit beside the fp32 embedding the lookup reads.
  void repack_for_decode();

  // MoE layers (models/ffn/moe.h). After each optimizer step: every MoE layer's
  // aux-loss-free expert-bias update from the loads of the step's training forwards
  // (`sum_loads`: MoE::update_expert_bias's, for data parallelism).
  void update_expert_bias(const std::function<void(std::vector<int64_t>&)>& sum_loads = {});
  // The MoE layers' counters since the last call, then cleared; empty for a dense model.
  // moe_max_load: the largest max_e(load_e) / mean_e(load_e) over the layers;
  // moe_router_entropy: router entropy (nats) averaged over layers and tokens;
  // moe_aux_loss: the layers' sequence aux losses, averaged over the forwards, summed
  // over layers (present when router_aux_loss_coef > 0). DSA layers with
  // indexer_loss_coeff > 0: indexer_loss, the layers' indexer KL losses (each the token
  // mean of KL_t, averaged over the training forwards, without the coefficient) summed
  // over layers.
  std::map<std::string, double> take_moe_metrics();

  const TransformerConfig& config() const { return cfg_; }
  ActivationCheckpoint activation_checkpoint = ActivationCheckpoint::none;

  // bf16 compute (model.compute_dtype = bf16; titan/ops/bf16_compute.h): forward (and
  // an activation-checkpoint recompute) runs inside a Bf16ComputeScope; logits and
  // logprobs run the bf16 LM head (bf16 inputs, fp32 accumulation, fp32 logits and
  // logprobs), loss_sum its fused loss. Covered: layers with gqa attention and a dense
  // feed-forward; throws titan::Error (one line naming the first other layer) otherwise.
  void set_compute_bf16(bool on);
  bool compute_bf16() const { return bf16_; }

  Embedding* tok_embeddings;
  std::vector<TransformerBlock*> layers;
  RMSNorm* norm;
  Linear* output = nullptr;  // null when tied

 private:
  const Tensor& lm_head() const;  // the LM head weight in whichever layout it has
  TransformerConfig cfg_;
  bool bf16_ = false;
  Tensor head_bf16_;  // a tied head's bf16 panels (repack_for_decode of a bf16-compute model)
  std::vector<LayerSpec> specs_;
  std::shared_ptr<const RopeCache> rope_;
  std::shared_ptr<const RopeCache> rope_local_;  // sliding-window layers' table (cfg.rope_local_base_freq)
};

}  // namespace titan::models
