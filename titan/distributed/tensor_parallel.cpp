#include "titan/distributed/tensor_parallel.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "titan/autograd/function.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/models/common/layer_spec.h"
#include "titan/models/common/vocab_shard.h"
#include "titan/nn/hooks.h"
#include "titan/ops/matmul.h"
#include "titan/optim/grad_clip.h"

namespace titan::distributed {

namespace {

using Clock = std::chrono::steady_clock;

struct CommTimer {
  TpStats& s;
  Clock::time_point t0 = Clock::now();
  explicit CommTimer(TpStats& st) : s(st) {}
  ~CommTimer() {
    s.comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ++s.collectives;
  }
};

Tensor contiguous_detached(const Tensor& t) {
  autograd::NoGradGuard ng;
  Tensor d = t.detach();
  return d.is_contiguous() ? d : d.contiguous();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// ---- TpComm

void TpComm::all_reduce_sum(Tensor& t) {
  const int P = size();
  if (P == 1) return;
  CommTimer timer(stats);
  g_.all_reduce(t, ReduceOp::sum);
  stats.bytes += 2 * (P - 1) * t.numel() * 4 / P;
}

void TpComm::all_reduce_max(Tensor& t) {
  const int P = size();
  if (P == 1) return;
  CommTimer timer(stats);
  g_.all_reduce(t, ReduceOp::max);
  stats.bytes += 2 * (P - 1) * t.numel() * 4 / P;
}

Tensor TpComm::all_gather_rows(const Tensor& t) {
  const int P = size();
  CommTimer timer(stats);
  Tensor out = g_.all_gather(contiguous_detached(t));
  stats.bytes += (P - 1) * t.numel() * 4;
  return out;
}

Tensor TpComm::reduce_scatter_rows(const Tensor& t) {
  const int P = size();
  CommTimer timer(stats);
  Tensor out = g_.reduce_scatter(contiguous_detached(t), ReduceOp::sum);
  stats.bytes += (P - 1) * t.numel() * 4 / P;
  return out;
}

// ---- differentiable collectives

Tensor copy_to_tp(const Tensor& x, TpComm& c) {
  Tensor out = x.detach();
  if (autograd::needs_grad({&x}))
    autograd::record_fn("CopyToTensorParallel", {x}, {out}, [&c](const std::vector<Tensor>& g) {
      Tensor s = g[0].clone();
      c.all_reduce_sum(s);
      return std::vector<Tensor>{s};
    });
  return out;
}

Tensor reduce_from_tp(const Tensor& x, TpComm& c) {
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = x.clone();
  }
  c.all_reduce_sum(out);
  if (autograd::needs_grad({&x}))
    autograd::record_fn("ReduceFromTensorParallel", {x}, {out},
                        [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor gather_from_sp(const Tensor& x, TpComm& c) {
  Tensor out = c.all_gather_rows(x);
  if (autograd::needs_grad({&x}))
    autograd::record_fn("GatherFromSequenceParallel", {x}, {out}, [&c](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{c.reduce_scatter_rows(g[0])};
    });
  return out;
}

Tensor scatter_to_sp(const Tensor& x, TpComm& c) {
  Tensor out = c.reduce_scatter_rows(x);
  if (autograd::needs_grad({&x}))
    autograd::record_fn("ScatterToSequenceParallel", {x}, {out}, [&c](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{c.all_gather_rows(g[0])};
    });
  return out;
}

// ---- vocabulary-parallel cross-entropy

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                    int64_t vocab_size, TpComm& c, int64_t ignore_index) {
  TITAN_CHECK(logits.dim() == 2 && logits.dtype() == DType::f32,
              "vocab_parallel_cross_entropy: logits must be (T, V/P) f32, got {}", shape_str(logits.shape()));
  const int64_t T = logits.size(0), Vl = logits.size(1);
  TITAN_CHECK(targets.numel() == T, "vocab_parallel_cross_entropy: {} targets for {} rows", targets.numel(), T);
  const std::vector<int64_t> tgt = targets.to_vector<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK(tgt[t] == ignore_index || (tgt[t] >= 0 && tgt[t] < vocab_size),
                "vocab_parallel_cross_entropy: target {} at row {} is outside [0, {})", tgt[t], t, vocab_size);
  Tensor lc = contiguous_detached(logits);
  const float* pl = lc.data<float>();
  // Local column of each row's target, -1 when another rank holds it (or ignored).
  std::vector<int64_t> local(static_cast<size_t>(T), -1);
  for (int64_t t = 0; t < T; ++t)
    if (tgt[t] != ignore_index && tgt[t] >= vocab_start && tgt[t] < vocab_start + Vl) local[t] = tgt[t] - vocab_start;
  Tensor mx = Tensor::empty({T});
  float* pm = mx.data<float>();
  parallel_for_grain(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t v = 0; v < Vl; ++v) m = std::max(m, pl[t * Vl + v]);
      pm[t] = m;
    }
  });
  c.all_reduce_max(mx);
  // Row 0..T-1: Σ exp(l − m) of this rank's columns; rows T..2T-1: the target's logit
  // (0 where another rank holds it, so the sum over ranks is that logit exactly).
  Tensor st = Tensor::empty({2 * T});
  float* ps = st.data<float>();
  parallel_for_grain(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      double s = 0;
      for (int64_t v = 0; v < Vl; ++v) s += std::exp(static_cast<double>(pl[t * Vl + v]) - pm[t]);
      ps[t] = static_cast<float>(s);
      ps[T + t] = local[t] >= 0 ? pl[t * Vl + local[t]] : 0.0f;
    }
  });
  c.all_reduce_sum(st);
  double total = 0;
  for (int64_t t = 0; t < T; ++t)
    if (tgt[t] != ignore_index)
      total += std::log(static_cast<double>(ps[t])) + static_cast<double>(pm[t]) - static_cast<double>(ps[T + t]);
  Tensor out = Tensor::from_vector(std::vector<float>{static_cast<float>(total)}, {});
  if (autograd::needs_grad({&logits})) {
    autograd::record_fn(
        "VocabParallelCrossEntropy", {logits}, {out},
        [lc, mx, st, local, tgt, ignore_index, T, Vl](const std::vector<Tensor>& g) {
          const float gs = g[0].item<float>();
          Tensor d = Tensor::empty({T, Vl});
          float* pd = d.data<float>();
          const float *pl = lc.data<float>(), *pm = mx.data<float>(), *ps = st.data<float>();
          parallel_for_grain(T, 8, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
              float* row = pd + t * Vl;
              if (tgt[t] == ignore_index) {
                std::memset(row, 0, static_cast<size_t>(Vl) * 4);
                continue;
              }
              const double inv = 1.0 / static_cast<double>(ps[t]);
              for (int64_t v = 0; v < Vl; ++v)
                row[v] = gs * static_cast<float>(std::exp(static_cast<double>(pl[t * Vl + v]) - pm[t]) * inv);
              if (local[t] >= 0) row[local[t]] -= gs;
            }
          });
          return std::vector<Tensor>{d};
        });
  }
  return out;
}

// ---- TensorParallel

// Entering (after a norm) or leaving (after the mixer, the feed-forward or the
// embedding) the tensor-parallel region.
class TensorParallel::Hook final : public nn::ForwardHook {
 public:
  enum class Kind { enter, leave, embedding };
  Hook(TensorParallel& tp, Kind kind) : tp_(tp), kind_(kind) {}
  void pre_forward(const nn::Module&) override {}
  Tensor post_forward(const nn::Module&, Tensor out) override {
    TpComm& c = tp_.comm_;
    if (kind_ == Kind::embedding) tp_.sp_now_ = tp_.sp_ && out.size(0) % c.size() == 0;
    if (kind_ == Kind::enter) return tp_.sp_now_ ? gather_from_sp(out, c) : copy_to_tp(out, c);
    return tp_.sp_now_ ? scatter_to_sp(out, c) : reduce_from_tp(out, c);
  }

 private:
  TensorParallel& tp_;
  Kind kind_;
};

void TensorParallel::check_model(const models::TransformerConfig& full, int tp, bool sequence_parallel,
                                 int64_t seq_len) {
  if (tp == 1) return;
  const std::vector<models::LayerSpec> specs = models::layer_specs(full);
  for (size_t l = 0; l < specs.size(); ++l) {
    TITAN_CHECK(specs[l].mixer == models::MixerKind::gqa,
                "parallelism.tensor_parallel_degree={}: layer {} is a {} layer; tensor parallelism supports gqa "
                "attention layers only",
                tp, l, models::mixer_kind_name(specs[l].mixer));
    // A MoE layer is replicated over tp (its experts sharded by expert parallelism, if any):
    // every tp rank runs it on the same, replicated, rows.
    TITAN_CHECK(specs[l].ffn == models::FfnKind::dense || !sequence_parallel,
                "parallelism.enable_sequence_parallel=true: layer {} has a {} feed-forward; sequence parallelism "
                "supports dense feed-forwards only (set it false: tensor parallelism then replicates MoE layers)",
                l, models::ffn_kind_name(specs[l].ffn));
  }
  TITAN_CHECK(full.pre_norms && !full.post_norms && !full.attention_sinks && full.final_logit_softcapping == 0,
              "parallelism.tensor_parallel_degree={}: post-norms, blocks without pre-norms, attention sinks and "
              "final_logit_softcapping are not supported with tensor parallelism", tp);
  TITAN_CHECK(!full.attention_bias,
              "parallelism.tensor_parallel_degree={}: attention_bias is not supported with tensor parallelism (the "
              "row-parallel o_proj's bias is not sharded)", tp);
  TITAN_CHECK(!sequence_parallel || seq_len % tp == 0,
              "parallelism.enable_sequence_parallel=true: training.seq_len={} must be a multiple of "
              "parallelism.tensor_parallel_degree={} (each tp rank holds seq_len / tp rows of every sequence)",
              seq_len, tp);
}

TensorParallel::TensorParallel(const DeviceMesh& mesh, const models::TransformerConfig& full, bool sequence_parallel)
    : mesh_(mesh), comm_(mesh.group(MeshDim::tp)), full_(full), local_(full), sp_(sequence_parallel) {
  const int P = comm_.size();
  local_.num_attention_heads = full.num_attention_heads / P;
  local_.num_key_value_heads = full.num_key_value_heads / P;
  local_.intermediate_size = full.intermediate_size / P;
  local_.vocab_size = full.vocab_size / P;
}

TensorParallel::~TensorParallel() {
  for (const nn::Module* m : hooked_) nn::set_forward_hook(*m, nullptr);
  if (sharded_embedding_) models::set_vocab_shard(*sharded_embedding_, std::nullopt);
}

TensorParallel::Placement TensorParallel::placement(const std::string& name) const {
  for (const char* s : {".attention.wq.weight", ".attention.wq.bias", ".attention.wk.weight", ".attention.wk.bias",
                        ".attention.wv.weight", ".attention.wv.bias", ".feed_forward.w1.weight",
                        ".feed_forward.w3.weight"})
    if (ends_with(name, s)) return Placement::shard_rows;
  if (name == "tok_embeddings.weight" || name == "output.weight") return Placement::shard_rows;
  if (ends_with(name, ".attention.wo.weight") || ends_with(name, ".feed_forward.w2.weight"))
    return Placement::shard_cols;
  return Placement::replicate;
}

std::unique_ptr<models::Decoder> TensorParallel::build(const std::function<void(models::Decoder&)>& init) {
  const int P = comm_.size(), r = comm_.rank();
  auto local = std::make_unique<models::Decoder>(local_);
  {
    models::Decoder full(full_);
    init(full);
    autograd::NoGradGuard ng;
    auto fp = full.named_parameters();
    auto lp = local->named_parameters();
    TITAN_CHECK(fp.size() == lp.size(), "tensor parallel: the local model has {} parameters, the full one {}",
                lp.size(), fp.size());
    for (size_t i = 0; i < lp.size(); ++i) {
      const auto& [name, dst] = lp[i];
      const Tensor& src = fp[i].second;
      TITAN_CHECK(fp[i].first == name, "tensor parallel: parameter {} is '{}' in the full model, '{}' locally", i,
                  fp[i].first, name);
      Tensor piece;
      switch (placement(name)) {
        case Placement::replicate: piece = src; break;
        case Placement::shard_rows: piece = src.narrow(0, r * (src.size(0) / P), src.size(0) / P); break;
        case Placement::shard_cols: piece = src.narrow(1, r * (src.size(1) / P), src.size(1) / P); break;
      }
      TITAN_CHECK(piece.shape() == dst.shape(), "tensor parallel: '{}' piece {} does not fit the local {}", name,
                  shape_str(piece.shape()), shape_str(dst.shape()));
      Tensor d = dst;
      d.copy_(piece.contiguous());
    }
  }
  models::set_vocab_shard(*local->tok_embeddings, models::VocabShard{r * local_.vocab_size, full_.vocab_size});
  sharded_embedding_ = local->tok_embeddings;
  model_ = local.get();
  auto hook = [&](const nn::Module& m, Hook::Kind k) {
    nn::set_forward_hook(m, std::make_shared<Hook>(*this, k));
    hooked_.push_back(&m);
  };
  hook(*local->tok_embeddings, Hook::Kind::embedding);
  for (models::TransformerBlock* b : local->layers) {
    hook(*b->attention_norm, Hook::Kind::enter);
    hook(*b->mixer, Hook::Kind::leave);
    if (b->moe) continue;  // replicated over tp: no region to enter or leave
    hook(*b->ffn_norm, Hook::Kind::enter);
    hook(*b->ffn, Hook::Kind::leave);
  }
  return local;
}

int64_t TensorParallel::begin_forward(int64_t tokens) {
  sp_now_ = sp_ && tokens % comm_.size() == 0;
  return sp_now_ ? tokens / comm_.size() : tokens;
}

Tensor TensorParallel::loss(const Tensor& hidden, const Tensor& head, const Tensor& targets) {
  Tensor h = sp_now_ ? gather_from_sp(hidden, comm_) : copy_to_tp(hidden, comm_);
  Tensor logits = linear(h, head);
  return vocab_parallel_cross_entropy(logits, targets, comm_.rank() * local_.vocab_size, full_.vocab_size, comm_);
}

Tensor TensorParallel::full_sequence(const Tensor& hidden) {
  autograd::NoGradGuard ng;
  return sp_now_ ? comm_.all_gather_rows(hidden) : hidden;
}

Tensor TensorParallel::logits(const Tensor& hidden, const Tensor& head) {
  autograd::NoGradGuard ng;
  Tensor local = linear(hidden, head);  // (T, V/P)
  // Gather the vocabulary shards: rows of the transposed logits, rank order.
  Tensor full_t = comm_.all_gather_rows(local.transpose(0, 1).contiguous());  // (V, T)
  return full_t.transpose(0, 1).contiguous();
}

void TensorParallel::reduce_partial_grads() {
  autograd::NoGradGuard ng;
  for (auto& [name, p] : model_->named_parameters()) {
    if (placement(name) != Placement::replicate) continue;
    // Without SP a block's norms see the whole (replicated) sequence and every rank's
    // gradient is already the full one; q_norm/k_norm see only the rank's heads.
    const bool partial = sp_now_ || name.find(".attention.") != std::string::npos;
    Tensor g = p.grad();
    if (!partial || !g.defined()) continue;
    Tensor s = g.contiguous().clone();
    comm_.all_reduce_sum(s);
    p.set_grad(s);
  }
}

float TensorParallel::grad_norm(const std::vector<optim::ParamRef>& params, ProcessGroup* shard_group) {
  const size_t n = params.size();
  std::vector<double> sq(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    Tensor g = params[i].param.grad();
    if (!g.defined() || g.numel() == 0) continue;
    Tensor gc = g.contiguous();
    const float* pg = gc.data<float>();
    double s = 0;
    for (int64_t k = 0; k < gc.numel(); ++k) s += static_cast<double>(pg[k]) * pg[k];
    sq[i] = s;
  }
  // Σ over groups in rank order: gather every rank's vector, add left to right.
  auto sum_over = [&](ProcessGroup& grp, const std::function<bool(size_t)>& which) {
    const int R = grp.size();
    if (R == 1) return;
    std::vector<double> all(n * static_cast<size_t>(R));
    grp.all_gather_bytes(sq.data(), n * sizeof(double), all.data());
    for (size_t i = 0; i < n; ++i) {
      if (!which(i)) continue;
      double s = all[i];
      for (int q = 1; q < R; ++q) s += all[static_cast<size_t>(q) * n + i];
      sq[i] = s;
    }
  };
  if (shard_group) sum_over(*shard_group, [](size_t) { return true; });
  sum_over(mesh_.group(MeshDim::tp), [&](size_t i) { return placement(params[i].name) != Placement::replicate; });
  double total = 0;
  for (double v : sq) total += v;
  return static_cast<float>(std::sqrt(total));
}

float TensorParallel::clip_grad_norm_(const std::vector<optim::ParamRef>& params, ProcessGroup* shard_group,
                                      double max_norm) {
  const float total = grad_norm(params, shard_group);
  optim::scale_grads_for_norm_(params, total, max_norm);
  return total;
}

Tensor TensorParallel::gather(const std::string& name, const Tensor& piece) {
  autograd::NoGradGuard ng;
  switch (placement(name)) {
    case Placement::replicate: return piece.detach().clone();
    case Placement::shard_rows: return comm_.all_gather_rows(piece);
    case Placement::shard_cols: break;
  }
  return comm_.all_gather_rows(piece.detach().transpose(0, 1).contiguous()).transpose(0, 1).contiguous();
}

std::vector<std::pair<std::string, Tensor>> TensorParallel::full_parameters() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model_->named_parameters()) out.emplace_back(name, gather(name, p));
  return out;
}

std::vector<std::pair<std::string, Tensor>> TensorParallel::full_gradients() {
  std::vector<std::pair<std::string, Tensor>> out;
  // Every rank has a gradient for the same parameters (the same graph), so the
  // collectives match.
  for (auto& [name, p] : model_->named_parameters())
    out.emplace_back(name, p.grad().defined() ? gather(name, p.grad()) : Tensor());
  return out;
}

std::unique_ptr<models::Decoder> TensorParallel::gather_full_model() {
  auto full = std::make_unique<models::Decoder>(full_);
  auto values = full_parameters();
  autograd::NoGradGuard ng;
  auto fp = full->named_parameters();
  for (size_t i = 0; i < fp.size(); ++i) {
    Tensor d = fp[i].second;
    d.copy_(values[i].second);
  }
  return full;
}

}  // namespace titan::distributed
