// scaled_dot_product_attention_varlen over kernels/cpu/attention.h + composed twin.
#include "titan/ops/attention.h"

#include <cmath>
#include <limits>

#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/join.h"
#include "titan/ops/matmul.h"
#include "titan/ops/op_util.h"
#include "titan/ops/softmax.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention_varlen";

struct Dims {
  int64_t T;
  int H, Hkv, Dh, S;
};

Dims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu,
                     const AttentionOptions& o, bool need_contiguous) {
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}}) {
    check_dtype(kOp, name, *t, DType::f32);
    TITAN_CHECK(t->dim() == 3, "{}: '{}' must be 3-d (T, heads, Dh), got shape {}", kOp, name,
                shape_str(t->shape()));
    if (need_contiguous) check_contiguous(kOp, name, *t);
  }
  const int64_t T = q.size(0), Dh = q.size(2);
  TITAN_CHECK(k.size(0) == T && k.size(2) == Dh,
              "{}: k has shape {}, expected (T = {}, Hkv, Dh = {}) for q {}", kOp,
              shape_str(k.shape()), T, Dh, shape_str(q.shape()));
  TITAN_CHECK(v.shape() == k.shape(), "{}: v has shape {} but k has shape {}", kOp,
              shape_str(v.shape()), shape_str(k.shape()));
  const int64_t H = q.size(1), Hkv = k.size(1);
  TITAN_CHECK(Hkv >= 1 && H % Hkv == 0, "{}: query heads H = {} must be a multiple of KV heads Hkv = {}",
              kOp, H, Hkv);
  TITAN_CHECK(Dh >= 8 && Dh <= 256 && Dh % 8 == 0,
              "{}: head dim Dh must be a multiple of 8 in [8, 256], got {}", kOp, Dh);
  check_index(kOp, "cu_seqlens", cu);
  TITAN_CHECK(cu.dim() == 1 && cu.numel() >= 1, "{}: 'cu_seqlens' must be 1-d (S + 1), got shape {}",
              kOp, shape_str(cu.shape()));
  if (o.sinks.defined()) {
    check_dtype(kOp, "sinks", o.sinks, DType::f32);
    TITAN_CHECK(o.sinks.shape() == Shape{H}, "{}: 'sinks' has shape {}, expected [{}]", kOp,
                shape_str(o.sinks.shape()), H);
  }
  return {T, static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(Dh),
          static_cast<int>(cu.numel() - 1)};
}

kc::AttentionParams params_of(const AttentionOptions& o, const Tensor& sinks) {
  kc::AttentionParams p;
  p.scale = static_cast<float>(o.scale);
  p.window = o.window;
  p.chunk = o.chunk;
  p.softcap = static_cast<float>(o.softcap);
  p.sinks = sinks.defined() ? sinks.data<float>() : nullptr;
  p.block_size = o.block_size;
  return p;
}

}  // namespace

Tensor scaled_dot_product_attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cu_seqlens, const AttentionOptions& opts) {
  const Dims d = check_attention(q, k, v, cu_seqlens, opts, true);
  Tensor cu = cu_seqlens.to(DType::i32).contiguous();
  Tensor sinks = opts.sinks.defined() ? contig(opts.sinks).detach() : Tensor();
  const kc::AttentionParams p = params_of(opts, sinks);
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({d.T, d.H});
  kc::attention_varlen_fwd(out.data<float>(), lse.data<float>(), q.data<float>(), k.data<float>(),
                           v.data<float>(), cu.data<int32_t>(), d.S, d.T, d.H, d.Hkv, d.Dh, p);
  if (needs_grad({&q, &k, &v, &opts.sinks})) {
    const bool gs = opts.sinks.defined() && opts.sinks.requires_grad();
    record_fn("ScaledDotProductAttentionVarlen", {q, k, v, opts.sinks}, {out},
              [q = q.detach(), k = k.detach(), v = v.detach(), cu, sinks, opts, out = out.detach(),
               lse, d, gs](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()),
                       dv = Tensor::empty(v.shape());
                Tensor ds = gs ? Tensor::empty({d.H}) : Tensor();
                kc::attention_varlen_bwd(dq.data<float>(), dk.data<float>(), dv.data<float>(),
                                         gs ? ds.data<float>() : nullptr, gc.data<float>(),
                                         out.data<float>(), lse.data<float>(), q.data<float>(),
                                         k.data<float>(), v.data<float>(), cu.data<int32_t>(), d.S,
                                         d.T, d.H, d.Hkv, d.Dh, params_of(opts, sinks));
                return std::vector<Tensor>{dq, dk, dv, ds};
              });
  }
  return out;
}

namespace composed {

Tensor scaled_dot_product_attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cu_seqlens, const AttentionOptions& opts) {
  const Dims d = check_attention(q, k, v, cu_seqlens, opts, false);
  const std::vector<int64_t> cu = cu_seqlens.to_vector<int64_t>();
  TITAN_CHECK(cu.front() == 0 && cu.back() == d.T, "{}: cu_seqlens must go from 0 to T = {}", kOp,
              d.T);
  const double sm_scale =
      opts.scale != 0.0 ? opts.scale : 1.0 / std::sqrt(static_cast<double>(d.Dh));
  // Query head h reads KV head h / (H / Hkv).
  std::vector<int64_t> kv_of(d.H);
  for (int h = 0; h < d.H; ++h) kv_of[h] = h / (d.H / d.Hkv);
  Tensor kv_index = Tensor::from_vector(kv_of, {d.H});
  std::vector<Tensor> outs;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t L = cu[s + 1] - cu[s];
    TITAN_CHECK(L >= 0, "{}: cu_seqlens decreases at {}", kOp, s);
    if (L == 0) continue;
    Tensor qs = q.narrow(0, cu[s], L).permute({1, 0, 2});                              // (H, L, Dh)
    Tensor ks = index_select(k.narrow(0, cu[s], L), 1, kv_index).permute({1, 2, 0});  // (H, Dh, L)
    Tensor vs = index_select(v.narrow(0, cu[s], L), 1, kv_index).permute({1, 0, 2});  // (H, L, Dh)
    Tensor sc = scale(matmul(qs, ks), sm_scale);
    if (opts.softcap != 0.0) sc = scale(tanh(scale(sc, 1.0 / opts.softcap)), opts.softcap);
    // Visible: j <= i and (no window or i − j < W).
    std::vector<uint8_t> vis(L * L);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j)
        vis[i * L + j] = j <= i && (opts.window == 0 || i - j < opts.window) &&
                         (opts.chunk == 0 || i / opts.chunk == j / opts.chunk);
    Tensor mask = Tensor::from_vector(vis, {L, L}, DType::u8).expand({d.H, L, L}).contiguous();
    sc = where(mask, sc, Tensor::full({}, -std::numeric_limits<double>::infinity()));
    Tensor p;
    if (opts.sinks.defined()) {  // the sink joins the softmax denominator only
      Tensor sk = opts.sinks.reshape({d.H, 1, 1}).expand({d.H, L, 1});
      p = titan::softmax(cat({sc, sk}, 2), -1).narrow(2, 0, L);
    } else {
      p = titan::softmax(sc, -1);
    }
    outs.push_back(matmul(p, vs.contiguous()).permute({1, 0, 2}));  // (L, H, Dh)
  }
  if (outs.empty()) return Tensor::zeros(q.shape());
  return cat(outs, 0);
}

}  // namespace composed

}  // namespace titan
