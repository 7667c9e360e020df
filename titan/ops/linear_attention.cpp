// Linear-attention ops over kernels/cpu/gated_delta.h (see linear_attention.h).
#include "titan/ops/linear_attention.h"

#include <cmath>

#include "titan/kernels/cpu/gated_delta.h"
#include "titan/ops/activation.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/norm.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

// cu_seqlens as int64 values, checked against T.
std::vector<int64_t> seqlens(const char* op, const Tensor& cu, int64_t T) {
  check_index(op, "cu_seqlens", cu);
  check_dim(op, "cu_seqlens", cu, 1);
  TITAN_CHECK(cu.numel() >= 1, "{}: 'cu_seqlens' is empty (expected N + 1 offsets)", op);
  std::vector<int64_t> v = index_values(cu);
  TITAN_CHECK(v.front() == 0 && v.back() == T,
              "{}: 'cu_seqlens' must go from 0 to T = {}, got {} .. {}", op, T, v.front(), v.back());
  for (size_t i = 1; i < v.size(); ++i)
    TITAN_CHECK(v[i] >= v[i - 1], "{}: 'cu_seqlens' decreases at index {} ({} < {})", op, i, v[i],
                v[i - 1]);
  return v;
}

struct GdnDims {
  int64_t T, Hk, H, K, V;
  bool per_channel;
};

GdnDims check_gdn(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& g, const Tensor& beta, int gate_rank) {
  for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"g", &g}, {"beta", &beta}})
    check_dtype(op, name, *t, DType::f32);
  check_dim(op, "q", q, 3);
  check_dim(op, "v", v, 3);
  GdnDims d{q.size(0), q.size(1), v.size(1), q.size(2), v.size(2), false};
  TITAN_CHECK(k.shape() == q.shape(), "{}: 'k' has shape {}, expected q's {}", op,
              shape_str(k.shape()), shape_str(q.shape()));
  TITAN_CHECK(v.size(0) == d.T, "{}: 'v' has {} tokens, q has {}", op, v.size(0), d.T);
  TITAN_CHECK(d.Hk >= 1 && d.H % d.Hk == 0,
              "{}: value heads {} must be a multiple of the q/k heads {}", op, d.H, d.Hk);
  TITAN_CHECK(beta.shape() == (Shape{d.T, d.H}), "{}: 'beta' has shape {}, expected [{}, {}]", op,
              shape_str(beta.shape()), d.T, d.H);
  if (gate_rank == 0) gate_rank = static_cast<int>(g.dim());
  d.per_channel = gate_rank == 3;
  const Shape gs = d.per_channel ? Shape{d.T, d.H, d.K} : Shape{d.T, d.H};
  TITAN_CHECK(g.shape() == gs, "{}: 'g' has shape {}, expected {}", op, shape_str(g.shape()),
              shape_str(gs));
  return d;
}

// q/k of Hk heads widened to H heads (head h reads h / (H / Hk)); differentiable.
Tensor widen_heads(const Tensor& x, int64_t H) {
  const int64_t T = x.size(0), Hk = x.size(1), K = x.size(2);
  if (Hk == H) return x;
  return x.unsqueeze(2).expand({T, Hk, H / Hk, K}).reshape({T, H, K});
}

float resolve_scale(const char* op, double scale, int64_t K) {
  TITAN_CHECK(std::isfinite(scale) && scale >= 0, "{}: scale must be finite and >= 0, got {}", op,
              scale);
  return static_cast<float>(scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : scale);
}

Tensor delta_rule(const char* op, const Tensor& q0, const Tensor& k0, const Tensor& v,
                  const Tensor& g, const Tensor& beta, const Tensor& cu_seqlens, double scale,
                  int gate_rank) {
  const GdnDims d = check_gdn(op, q0, k0, v, g, beta, gate_rank);
  const std::vector<int64_t> cu = seqlens(op, cu_seqlens, d.T);
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  const float sc = resolve_scale(op, scale, d.K);
  Tensor q = widen_heads(q0, d.H), k = widen_heads(k0, d.H);
  Tensor qc = contig(q), kc_ = contig(k), vc = contig(v), gc = contig(g), bc = contig(beta);
  const bool grad = needs_grad({&q, &k, &v, &g, &beta});
  Tensor out = Tensor::empty({d.T, d.H, d.V});
  Tensor states = grad ? Tensor::empty({kc::gated_delta_num_chunks(cu.data(), N), d.H, d.K, d.V})
                       : Tensor();
  kc::gated_delta_fwd(out.data<float>(), grad ? states.data<float>() : nullptr, nullptr,
                      qc.data<float>(), kc_.data<float>(), vc.data<float>(), gc.data<float>(),
                      bc.data<float>(), cu.data(), nullptr, N, d.H, d.K, d.V, d.per_channel, sc);
  if (grad) {
    record_fn(d.per_channel ? "ChunkKda" : "ChunkGatedDeltaRule", {q, k, v, g, beta}, {out},
              [qc = qc.detach(), kc_ = kc_.detach(), vc = vc.detach(), gc = gc.detach(),
               bc = bc.detach(), states, cu, d, sc](const std::vector<Tensor>& gr) {
                Tensor go = contig(gr[0]);
                Tensor dq = Tensor::empty(qc.shape()), dk = Tensor::empty(kc_.shape());
                Tensor dv = Tensor::empty(vc.shape()), dg = Tensor::empty(gc.shape());
                Tensor db = Tensor::empty(bc.shape());
                const int64_t N = static_cast<int64_t>(cu.size()) - 1;
                kc::gated_delta_bwd(dq.data<float>(), dk.data<float>(), dv.data<float>(),
                                    dg.data<float>(), db.data<float>(), go.data<float>(),
                                    states.data<float>(), qc.data<float>(), kc_.data<float>(),
                                    vc.data<float>(), gc.data<float>(), bc.data<float>(),
                                    cu.data(), N, d.H, d.K, d.V, d.per_channel, sc);
                return std::vector<Tensor>{dq, dk, dv, dg, db};
              });
  }
  return out;
}

}  // namespace

Tensor chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& cu_seqlens, double scale) {
  return delta_rule("chunk_gated_delta_rule", q, k, v, g, beta, cu_seqlens, scale, 2);
}

Tensor chunk_kda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, const Tensor& cu_seqlens, double scale) {
  return delta_rule("chunk_kda", q, k, v, g, beta, cu_seqlens, scale, 3);
}

Tensor gated_delta_rule_cached(const Tensor& q0, const Tensor& k0, const Tensor& v, const Tensor& g,
                               const Tensor& beta, const Tensor& cu_seqlens,
                               const Tensor& start_pos, Tensor& state, double scale) {
  constexpr const char* op = "gated_delta_rule_cached";
  const GdnDims d = check_gdn(op, q0, k0, v, g, beta, 0);
  TITAN_CHECK(g.dim() == 2 || g.dim() == 3, "{}: 'g' must be (T, H) or (T, H, K)", op);
  const std::vector<int64_t> cu = seqlens(op, cu_seqlens, d.T);
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  check_index(op, "start_pos", start_pos);
  TITAN_CHECK(start_pos.numel() == N, "{}: 'start_pos' has {} entries for {} sequences", op,
              start_pos.numel(), N);
  const std::vector<int64_t> pos = index_values(start_pos);
  check_dtype(op, "state", state, DType::f32);
  const int64_t slot = kc::gated_delta_state_floats(d.H, d.K, d.V, d.per_channel);
  TITAN_CHECK(state.shape() == (Shape{N, slot}) && state.is_contiguous(),
              "{}: 'state' has shape {}, expected contiguous [{}, {}]", op,
              shape_str(state.shape()), N, slot);
  TITAN_CHECK(!needs_grad({&q0, &k0, &v, &g, &beta}),
              "{}: no backward (the generator's form); run it with grad mode off", op);
  const float sc = resolve_scale(op, scale, d.K);
  Tensor q = contig(widen_heads(q0, d.H)), k = contig(widen_heads(k0, d.H));
  Tensor vc = contig(v), gc = contig(g), bc = contig(beta);
  Tensor out = Tensor::empty({d.T, d.H, d.V});
  kc::gated_delta_fwd(out.data<float>(), nullptr, state.data<float>(), q.data<float>(),
                      k.data<float>(), vc.data<float>(), gc.data<float>(), bc.data<float>(),
                      cu.data(), pos.data(), N, d.H, d.K, d.V, d.per_channel, sc);
  return out;
}

Tensor gated_delta_rule_slots(const Tensor& q0, const Tensor& k0, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& cu_seqlens, const Tensor& start_pos,
                              Tensor& state, const Tensor& slots, const Tensor& snapshot_slots,
                              const Tensor& snapshot_pos, double scale) {
  constexpr const char* op = "gated_delta_rule_slots";
  const GdnDims d = check_gdn(op, q0, k0, v, g, beta, 0);
  TITAN_CHECK(g.dim() == 2 || g.dim() == 3, "{}: 'g' must be (T, H) or (T, H, K)", op);
  const std::vector<int64_t> cu = seqlens(op, cu_seqlens, d.T);
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  auto values = [&](const char* name, const Tensor& t) {
    check_index(op, name, t);
    TITAN_CHECK(t.numel() == N, "{}: '{}' has {} entries for {} sequences", op, name, t.numel(), N);
    return index_values(t);
  };
  const std::vector<int64_t> pos = values("start_pos", start_pos), slot = values("slots", slots);
  const bool snap = snapshot_slots.defined();
  TITAN_CHECK(snap == snapshot_pos.defined(), "{}: 'snapshot_slots' and 'snapshot_pos' go together", op);
  const std::vector<int64_t> ss = snap ? values("snapshot_slots", snapshot_slots) : std::vector<int64_t>();
  const std::vector<int64_t> sp = snap ? values("snapshot_pos", snapshot_pos) : std::vector<int64_t>();
  check_dtype(op, "state", state, DType::f32);
  const int64_t floats = kc::gated_delta_state_floats(d.H, d.K, d.V, d.per_channel);
  TITAN_CHECK(state.dim() == 2 && state.size(1) == floats && state.is_contiguous(),
              "{}: 'state' has shape {}, expected contiguous [num_slots, {}]", op,
              shape_str(state.shape()), floats);
  TITAN_CHECK(!needs_grad({&q0, &k0, &v, &g, &beta}),
              "{}: no backward (the generator's form); run it with grad mode off", op);
  const float sc = resolve_scale(op, scale, d.K);
  Tensor q = contig(widen_heads(q0, d.H)), k = contig(widen_heads(k0, d.H));
  Tensor vc = contig(v), gc = contig(g), bc = contig(beta);
  Tensor out = Tensor::empty({d.T, d.H, d.V});
  kc::gated_delta_fwd_slots(out.data<float>(), state.data<float>(), state.size(0), slot.data(),
                            snap ? ss.data() : nullptr, snap ? sp.data() : nullptr, q.data<float>(),
                            k.data<float>(), vc.data<float>(), gc.data<float>(), bc.data<float>(),
                            cu.data(), pos.data(), N, d.H, d.K, d.V, d.per_channel, sc);
  return out;
}

namespace {
std::pair<int64_t, int64_t> check_conv(const char* op, const Tensor& x, const Tensor& w) {
  check_dtype(op, "x", x, DType::f32);
  check_dtype(op, "w", w, DType::f32);
  check_dim(op, "x", x, 2);
  check_dim(op, "w", w, 2);
  TITAN_CHECK(w.size(0) == x.size(1), "{}: 'w' has shape {}, expected [{}, W] for x {}", op,
              shape_str(w.shape()), x.size(1), shape_str(x.shape()));
  TITAN_CHECK(w.size(1) >= 1, "{}: conv kernel width must be >= 1, got {}", op, w.size(1));
  return {x.size(1), w.size(1)};
}
}  // namespace

Tensor causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& cu_seqlens) {
  constexpr const char* op = "causal_conv1d";
  auto [C, W] = check_conv(op, x, w);
  const std::vector<int64_t> cu = seqlens(op, cu_seqlens, x.size(0));
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  Tensor xc = contig(x), wc = contig(w);
  Tensor out = Tensor::empty(x.shape());
  kc::causal_conv1d_fwd(out.data<float>(), nullptr, xc.data<float>(), wc.data<float>(), cu.data(),
                        N, C, W);
  if (needs_grad({&x, &w})) {
    record_fn("CausalConv1d", {x, w}, {out},
              [xc = xc.detach(), wc = wc.detach(), cu, C = C, W = W](const std::vector<Tensor>& g) {
                Tensor go = contig(g[0]);
                Tensor dx = Tensor::empty(xc.shape()), dw = Tensor::empty(wc.shape());
                kc::causal_conv1d_bwd(dx.data<float>(), dw.data<float>(), go.data<float>(),
                                      xc.data<float>(), wc.data<float>(), cu.data(),
                                      static_cast<int64_t>(cu.size()) - 1, C, W);
                return std::vector<Tensor>{dx, dw};
              });
  }
  return out;
}

Tensor causal_conv1d_cached(const Tensor& x, const Tensor& w, const Tensor& cu_seqlens,
                            Tensor& tail) {
  constexpr const char* op = "causal_conv1d_cached";
  auto [C, W] = check_conv(op, x, w);
  const std::vector<int64_t> cu = seqlens(op, cu_seqlens, x.size(0));
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  check_dtype(op, "tail", tail, DType::f32);
  TITAN_CHECK(tail.shape() == (Shape{N, W - 1, C}) && tail.is_contiguous(),
              "{}: 'tail' has shape {}, expected contiguous [{}, {}, {}]", op,
              shape_str(tail.shape()), N, W - 1, C);
  TITAN_CHECK(!needs_grad({&x, &w}), "{}: no backward (the generator's form); run it with grad "
              "mode off", op);
  Tensor xc = contig(x), wc = contig(w);
  Tensor out = Tensor::empty(x.shape());
  kc::causal_conv1d_fwd(out.data<float>(), tail.data<float>(), xc.data<float>(), wc.data<float>(),
                        cu.data(), N, C, W);
  return out;
}

Tensor rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, double eps) {
  constexpr const char* op = "rms_norm_gated";
  check_dtype(op, "z", z, DType::f32);
  TITAN_CHECK(z.shape() == x.shape(), "{}: 'z' has shape {}, expected x's {}", op,
              shape_str(z.shape()), shape_str(x.shape()));
  return mul(rms_norm(x, w, eps), silu(z));
}

Tensor softplus(const Tensor& x) {
  check_dtype("softplus", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const float* xp = xc.data<float>();
  float* op = out.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) op[i] = xp[i] > 20.0f ? xp[i] : std::log1p(std::exp(xp[i]));
  if (needs_grad({&x})) {
    record_fn("Softplus", {x}, {out}, [xc = xc.detach()](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty(xc.shape());
      const float* xp = xc.data<float>();
      const float* gp = gc.data<float>();
      float* dp = dx.data<float>();
      for (int64_t i = 0; i < xc.numel(); ++i) dp[i] = gp[i] / (1.0f + std::exp(-xp[i]));
      return std::vector<Tensor>{dx};
    });
  }
  return out;
}

Tensor l2_normalize(const Tensor& x, double eps) {
  constexpr const char* op = "l2_normalize";
  check_dtype(op, "x", x, DType::f32);
  TITAN_CHECK(x.dim() >= 1, "{}: 'x' must have at least one dim", op);
  TITAN_CHECK(std::isfinite(eps) && eps >= 0, "{}: eps must be finite and >= 0, got {}", op, eps);
  Tensor r = rsqrt(add(sum(square(x), -1, true), eps));
  return mul(x, r.expand(x.shape()));
}

}  // namespace titan
