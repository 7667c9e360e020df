// RoPE ops over kernels/cpu/rope.h, with the composed twin.
#include "titan/ops/rope.h"

#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/join.h"
#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

void check_rope(const char* op, const char* arg, const Tensor& x, const Tensor& positions,
                const RopeCache& cache) {
  check_dtype(op, arg, x, DType::f32);
  TITAN_CHECK(x.dim() == 3, "{}: '{}' must be (T, H, Dh), got shape {}", op, arg,
              shape_str(x.shape()));
  check_index(op, "positions", positions);
  TITAN_CHECK(positions.shape() == Shape{x.size(0)}, "{}: 'positions' has shape {}, expected [{}] (one per token of '{}' {})",
              op, shape_str(positions.shape()), x.size(0), arg, shape_str(x.shape()));
  TITAN_CHECK(cache.cos.defined() && cache.sin.defined(), "{}: the RoPE cache is empty", op);
  TITAN_CHECK(cache.rotary_dim <= x.size(2), "{}: rotary dim {} exceeds head dim {} of '{}'", op,
              cache.rotary_dim, x.size(2), arg);
}

// Rotates contiguous x (T, Hx, Dh) into out; the kernel validates positions.
void rotate(float* out, const float* x, const Tensor& pos, const RopeCache& c, int64_t T,
            int64_t Hx, int64_t Dh, RopeStyle style, bool inverse) {
  const int64_t R = c.rotary_dim, P = c.max_positions();
  if (pos.dtype() == DType::i64)
    kc::rope_apply(out, x, pos.data<int64_t>(), c.cos.data<float>(), c.sin.data<float>(), T, Hx, Dh,
                   R, P, style, inverse);
  else
    kc::rope_apply(out, x, pos.data<int32_t>(), c.cos.data<float>(), c.sin.data<float>(), T, Hx, Dh,
                   R, P, style, inverse);
}

}  // namespace

RopeCache rope_cache(int64_t max_positions, int64_t rotary_dim, double theta,
                     const RopeScaling& scaling) {
  TITAN_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0,
              "rope_cache: rotary_dim must be even and >= 2, got {}", rotary_dim);
  TITAN_CHECK(max_positions >= 0, "rope_cache: max_positions must be >= 0, got {}", max_positions);
  RopeCache c;
  c.rotary_dim = rotary_dim;
  c.cos = Tensor::empty({max_positions, rotary_dim / 2});
  c.sin = Tensor::empty({max_positions, rotary_dim / 2});
  kc::rope_cache(c.cos.data<float>(), c.sin.data<float>(), max_positions, rotary_dim, theta, scaling);
  return c;
}

Tensor apply_rotary(const Tensor& x, const Tensor& positions, const RopeCache& cache,
                    RopeStyle style) {
  check_rope("apply_rotary", "x", x, positions, cache);
  Tensor xc = contig(x), pc = contig(positions);
  Tensor out = Tensor::empty(x.shape());
  const int64_t T = x.size(0), H = x.size(1), Dh = x.size(2);
  rotate(out.data<float>(), xc.data<float>(), pc, cache, T, H, Dh, style, false);
  if (needs_grad({&x}))
    record_fn("ApplyRotary", {x}, {out}, [pc, cache, style, T, H, Dh](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dx = Tensor::empty({T, H, Dh});
      rotate(dx.data<float>(), gc.data<float>(), pc, cache, T, H, Dh, style, true);
      return std::vector<Tensor>{dx};
    });
  return out;
}

std::pair<Tensor, Tensor> apply_rotary(const Tensor& q, const Tensor& k, const Tensor& positions,
                                       const RopeCache& cache, RopeStyle style) {
  check_rope("apply_rotary", "q", q, positions, cache);
  check_rope("apply_rotary", "k", k, positions, cache);
  TITAN_CHECK(q.size(2) == k.size(2), "apply_rotary: q has shape {} but k has shape {} (head dims differ)",
              shape_str(q.shape()), shape_str(k.shape()));
  Tensor qc = contig(q), kc_ = contig(k), pc = contig(positions);
  const int64_t T = q.size(0), H = q.size(1), Hkv = k.size(1), Dh = q.size(2);
  Tensor qo = Tensor::empty(q.shape()), ko = Tensor::empty(k.shape());
  const int64_t R = cache.rotary_dim, P = cache.max_positions();
  auto both = [&](float* qd, float* kd, const float* qs, const float* ks, bool inverse) {
    if (pc.dtype() == DType::i64)
      kc::rope_apply_qk(qd, kd, qs, ks, pc.data<int64_t>(), cache.cos.data<float>(),
                        cache.sin.data<float>(), T, H, Hkv, Dh, R, P, style, inverse);
    else
      kc::rope_apply_qk(qd, kd, qs, ks, pc.data<int32_t>(), cache.cos.data<float>(),
                        cache.sin.data<float>(), T, H, Hkv, Dh, R, P, style, inverse);
  };
  both(qo.data<float>(), ko.data<float>(), qc.data<float>(), kc_.data<float>(), false);
  if (needs_grad({&q, &k}))
    record_fn("ApplyRotaryQK", {q, k}, {qo, ko},
              [pc, cache, style, T, H, Hkv, Dh](const std::vector<Tensor>& g) {
                Tensor gq = contig(g[0]), gk = contig(g[1]);
                Tensor dq = Tensor::empty({T, H, Dh}), dk = Tensor::empty({T, Hkv, Dh});
                rotate(dq.data<float>(), gq.data<float>(), pc, cache, T, H, Dh, style, true);
                rotate(dk.data<float>(), gk.data<float>(), pc, cache, T, Hkv, Dh, style, true);
                return std::vector<Tensor>{dq, dk};
              });
  return {qo, ko};
}

namespace composed {

Tensor apply_rotary(const Tensor& x, const Tensor& positions, const RopeCache& cache,
                    RopeStyle style) {
  check_rope("apply_rotary", "x", x, positions, cache);
  const int64_t T = x.size(0), H = x.size(1), Dh = x.size(2), R = cache.rotary_dim, h = R / 2;
  const Shape hs{T, H, h};
  // (T, 1, R/2) rows of the cache, broadcast over heads.
  Tensor c = index_select(cache.cos, 0, positions).unsqueeze(1).expand(hs);
  Tensor s = index_select(cache.sin, 0, positions).unsqueeze(1).expand(hs);
  Tensor x1, x2;
  if (style == RopeStyle::rotate_half) {
    x1 = x.narrow(2, 0, h);
    x2 = x.narrow(2, h, h);
  } else {
    x1 = x.slice(2, 0, R, 2);
    x2 = x.slice(2, 1, R, 2);
  }
  Tensor o1 = sub(mul(x1, c), mul(x2, s));
  Tensor o2 = add(mul(x2, c), mul(x1, s));
  Tensor rot = style == RopeStyle::rotate_half ? cat({o1, o2}, 2)
                                               : stack({o1, o2}, 3).reshape({T, H, R});
  return R == Dh ? rot : cat({rot, x.narrow(2, R, Dh - R)}, 2);
}

}  // namespace composed

}  // namespace titan
