// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; TorchTitan's parallelize_llama)
// with optional sequence parallelism (Korthikanti et al. 2022) for decoders of gqa
// attention + dense SwiGLU layers (llama3, qwen3), and, without SP, MoE layers (qwen3_moe).
//
// Over the mesh's tp group of size P, rank r holds:
//   colwise  attention.wq/wk/wv (+ biases), feed_forward.w1/w3: output rows of heads
//            [r H/P, (r+1) H/P) (kv heads [r Hkv/P, ...)), FFN columns [r F/P, ...);
//   rowwise  attention.wo, feed_forward.w2: the matching input columns;
//   vocab    tok_embeddings and output (the LM head): vocabulary rows [r V/P, (r+1) V/P);
//   replicated: the norms (attention_norm, ffn_norm, norm, q_norm, k_norm), and every
//            MoE layer (router and experts; without SP only: each tp rank runs it on
//            the replicated rows, its experts sharded over ep under expert parallelism).
// The rank's model is a Decoder built with the local sizes (H/P, Hkv/P, F/P, V/P), so
// the mixer and feed-forward code run unchanged on their heads and columns.
//
// Forward (hooks on the block's parts, nn/hooks.h):
//   without SP: norm output -> f (identity; backward all-reduce) -> colwise ... rowwise
//               -> g (all-reduce; backward identity) -> residual add (replicated);
//   with SP:    the residual stream and the norms hold T/P rows of the sequence; norm
//               output -> all-gather rows (backward reduce-scatter) -> colwise ...
//               rowwise -> reduce-scatter rows (backward all-gather).
//   The embedding sums the ranks' vocabulary shards (all-reduce, or reduce-scatter with
//   SP); the LM head's logits stay vocabulary-sharded and the loss is the
//   vocabulary-parallel cross-entropy (TorchTitan's loss parallel): the row max, the
//   sum of exponentials and the target's logit are reduced over tp, never the logits.
//   A forward whose token count T is not a multiple of P (sampling) runs without SP.
//
// Bits. Every sum over tp ranks is ProcessGroup::all_reduce / reduce_scatter, i.e.
// reduce_pieces (reduction.h) in rank order: runs are bitwise equal run to run, and a
// TP-invariant mode replaces reduce_pieces alone. A TP > 1 run is not bitwise equal to
// TP = 1: a rowwise GEMM of K = F/P columns per rank, summed over ranks, adds the
// products in another order than one GEMM over K = F (and the loss's exp-sum likewise).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/distributed/device_mesh.h"
#include "titan/models/common/decoder.h"
#include "titan/optim/param_groups.h"

namespace titan::distributed {

struct TpStats {
  int64_t bytes = 0;  // bytes received by this rank's tp collectives (all-reduce counted 2 (P-1)/P × n)
  double comm_ms = 0;  // wall time inside them
  int64_t collectives = 0;
};

// The tp group's collectives, timed and counted (TpStats).
class TpComm {
 public:
  explicit TpComm(ProcessGroup& g) : g_(g) {}
  int size() const { return g_.size(); }
  int rank() const { return g_.rank(); }
  // In place, f32: the sum over the group in rank order (ProcessGroup::all_reduce, i.e.
  // reduce_pieces) — the one place the TP reduction order is fixed.
  void all_reduce_sum(Tensor& t);
  void all_reduce_max(Tensor& t);
  // (n, ...) per rank -> (P n, ...), rank order.
  Tensor all_gather_rows(const Tensor& t);
  // (P m, ...) -> (m, ...): this rank's rows summed over the group in rank order.
  Tensor reduce_scatter_rows(const Tensor& t);
  TpStats stats;

 private:
  ProcessGroup& g_;
};

// Differentiable tp collectives on (T, ...) f32 tensors.
// f: identity forward, all-reduce of the gradient backward (entering colwise layers).
Tensor copy_to_tp(const Tensor& x, TpComm& c);
// g: all-reduce forward, identity backward (leaving rowwise layers).
Tensor reduce_from_tp(const Tensor& x, TpComm& c);
// SP: (T/P, ...) -> (T, ...) all-gather forward, reduce-scatter backward.
Tensor gather_from_sp(const Tensor& x, TpComm& c);
// SP: (T, ...) partial sums -> (T/P, ...) reduce-scatter forward, all-gather backward.
Tensor scatter_to_sp(const Tensor& x, TpComm& c);

// Σ over rows t with targets[t] != ignore_index of cross-entropy(logits[t], targets[t]),
// from vocabulary-sharded logits (T, V/P) f32 holding columns [vocab_start, vocab_start
// + V/P); targets (T) i32/i64 in [0, V) (global ids). Returns a 0-d f32 (the same on
// every rank). Per row: m = max over tp of the local maxima, s = Σ_tp Σ_v exp(l − m)
// (double inside a rank), loss = log s + m − l[target] (Megatron's
// vocab_parallel_cross_entropy). Backward: dlogits = g (exp(l − m)/s − onehot).
// Collective over c. Errors: a target outside [0, V) other than ignore_index.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                    int64_t vocab_size, TpComm& c, int64_t ignore_index = -100);

class TensorParallel {
 public:
  enum class Placement { replicate, shard_rows, shard_cols };

  // Refuses (titan::Error, one line) a model with a layer TP does not split: every layer
  // must be gqa attention (gdn, MLA layers name their kind) + a dense feed-forward, or a
  // MoE one without sequence_parallel;
  // with sequence_parallel, training.seq_len must be a multiple of tp (seq_len given).
  // Divisibility of heads, kv heads, FFN width and vocabulary: parallel_dims.h.
  static void check_model(const models::TransformerConfig& full, int tp, bool sequence_parallel, int64_t seq_len);

  TensorParallel(const DeviceMesh& mesh, const models::TransformerConfig& full, bool sequence_parallel);
  ~TensorParallel();
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  // The rank's model: a full Decoder initialised by init (the same values on every
  // rank, e.g. from one seed), sliced to this rank's pieces, with the tp hooks set.
  std::unique_ptr<models::Decoder> build(const std::function<void(models::Decoder&)>& init);

  const models::TransformerConfig& full_config() const { return full_; }
  bool sequence_parallel() const { return sp_; }
  Placement placement(const std::string& name) const;

  // Sets the layout of a forward of `tokens` tokens that does not start at the
  // embedding (a pipeline stage after the first): sequence parallel when enabled and
  // tokens is a multiple of tp, as the embedding's hook decides. Returns the rows of the
  // residual stream this rank holds (tokens / tp under SP, else tokens).
  int64_t begin_forward(int64_t tokens);

  // Σ cross-entropy over the valid targets (targets (T) i32, ignore -100) of the model's
  // final hidden states (as Decoder::forward returns them: T/P rows under SP) and its
  // local LM head (V/P, D). 0-d f32, differentiable, the same on every tp rank.
  Tensor loss(const Tensor& hidden, const Tensor& head, const Tensor& targets);
  // The final hidden states of the last forward with all T rows (gathered under SP; no
  // gradient).
  Tensor full_sequence(const Tensor& hidden);
  // Full logits (T, V) of full-sequence hidden states (T, D) (no gradient): each rank's
  // vocabulary columns, gathered over tp.
  Tensor logits(const Tensor& hidden, const Tensor& head);

  // After a backward: sums over tp the gradients of the replicated parameters that each
  // rank computed only in part (q_norm/k_norm always, every norm under SP), so that
  // every rank holds the full gradient. On the module's parameters (full under FSDP).
  void reduce_partial_grads();
  // √(Σ ‖grad‖²) over the optimizer's parameters (FSDP shards when shard_group is given,
  // summed over it), tp-sharded parameters summed over tp, replicated ones counted
  // once. Sums in double, rank order. Collective over tp (and shard_group).
  float grad_norm(const std::vector<optim::ParamRef>& params, ProcessGroup* shard_group);
  // clip_grad_norm_ with that norm; returns it.
  float clip_grad_norm_(const std::vector<optim::ParamRef>& params, ProcessGroup* shard_group, double max_norm);

  // The model's parameters gathered over tp to their full shapes, named as in the full
  // model (every rank gets them). Under FSDP, unshard the model first.
  std::vector<std::pair<std::string, Tensor>> full_parameters();
  // The same for the parameters' gradients (undefined where a parameter has none).
  std::vector<std::pair<std::string, Tensor>> full_gradients();
  // A full-size Decoder holding full_parameters().
  std::unique_ptr<models::Decoder> gather_full_model();

  TpStats& stats() { return comm_.stats; }

 private:
  class Hook;
  Tensor gather(const std::string& name, const Tensor& piece);  // a piece -> its full tensor
  const DeviceMesh& mesh_;
  TpComm comm_;
  models::TransformerConfig full_, local_;
  bool sp_;
  bool sp_now_ = false;  // the current forward's layout (set by the embedding's hook)
  models::Decoder* model_ = nullptr;
  std::vector<const nn::Module*> hooked_;
  const models::Embedding* sharded_embedding_ = nullptr;
};

}  // namespace titan::distributed
