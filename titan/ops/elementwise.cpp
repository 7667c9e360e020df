// Element-wise ops: one functor per op, one driver per family (unary, binary).
#include "titan/ops/elementwise.h"

#include <cmath>

#include "titan/kernels/cpu/vmath.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;

namespace {

// ---- functors: the per-element arithmetic, written once.
struct Add { float operator()(float a, float b) const { return a + b; } };
struct Sub { float operator()(float a, float b) const { return a - b; } };
struct Mul { float operator()(float a, float b) const { return a * b; } };
struct Div { float operator()(float a, float b) const { return a / b; } };
struct Neg { float operator()(float x) const { return -x; } };
struct Log { float operator()(float x) const { return std::log(x); } };
struct Sqrt { float operator()(float x) const { return std::sqrt(x); } };
struct Rsqrt { float operator()(float x) const { return 1.0f / std::sqrt(x); } };
struct Square { float operator()(float x) const { return x * x; } };
struct Abs { float operator()(float x) const { return std::fabs(x); } };
struct Sign {
  float operator()(float x) const { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
};
struct Pow {
  float p;
  float operator()(float x) const {
    if (p == 2.0f) return x * x;
    if (p == 0.5f) return std::sqrt(x);
    if (p == 1.0f) return x;
    return std::pow(x, p);
  }
};

bool is_scalar_like(const Tensor& t) { return t.numel() == 1; }

// Shape of the result of a binary op under the equal-shape-or-scalar rule.
Shape binary_shape(const char* op, const Tensor& a, const Tensor& b) {
  check_dtype(op, "a", a, DType::f32);
  check_dtype(op, "b", b, DType::f32);
  if (a.shape() == b.shape()) return a.shape();
  if (is_scalar_like(b) && (!is_scalar_like(a) || a.dim() >= b.dim())) return a.shape();
  if (is_scalar_like(a)) return b.shape();
  fail("{}: shape mismatch: a is {} and b is {} (no implicit broadcasting; use expand())", op,
       shape_str(a.shape()), shape_str(b.shape()));
}

template <typename F>
Tensor map_unary(const char* op, const Tensor& x, F f) {
  check_dtype(op, "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_elems(out.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = f(px[i]);
  });
  return out;
}

// out (shape) = f(a, b) where a or b may be a single-element scalar.
template <typename F>
void binary_into(float* po, const Tensor& a, const Tensor& b, int64_t n, F f) {
  Tensor ac = contig(a), bc = contig(b);
  const float* pa = ac.data<float>();
  const float* pb = bc.data<float>();
  const bool sa = ac.numel() == 1 && n != 1, sb = bc.numel() == 1 && n != 1;
  parallel_elems(n, [&](int64_t s, int64_t e) {
    if (sb) {
      const float v = pb[0];
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], v);
    } else if (sa) {
      const float v = pa[0];
      for (int64_t i = s; i < e; ++i) po[i] = f(v, pb[i]);
    } else {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
    }
  });
}

template <typename F>
Tensor map_binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  Shape s = binary_shape(op, a, b);
  Tensor out = Tensor::empty(s);
  binary_into(out.data<float>(), a, b, out.numel(), f);
  return out;
}

// Gradient g (output shape) reduced to an operand's shape (sum when it was a scalar).
Tensor reduce_to(const Tensor& g, const Shape& operand) {
  if (g.shape() == operand) return g;
  return sum(g).reshape(operand);
}

// Runs exp_f32 over [b, e) in fixed 1024-element pieces and applies the epilogue.
template <typename Pre, typename Post>
void exp_pipeline(float* po, const float* px, int64_t b, int64_t e, Pre pre, Post post) {
  constexpr int64_t kPiece = 1024;
  float tmp[kPiece];
  for (int64_t i0 = b; i0 < e; i0 += kPiece) {
    const int64_t m = std::min(kPiece, e - i0);
    for (int64_t j = 0; j < m; ++j) tmp[j] = pre(px[i0 + j]);
    kernels::cpu::exp_f32(tmp, tmp, m);
    for (int64_t j = 0; j < m; ++j) po[i0 + j] = post(px[i0 + j], tmp[j]);
  }
}

void check_inplace(const char* op, const Tensor& self) {
  check_dtype(op, "self", self, DType::f32);
  check_contiguous(op, "self", self);
  TITAN_CHECK(!(autograd::GradMode::enabled() && self.requires_grad()),
              "{}: in-place ops are not recorded by autograd; 'self' requires grad (use "
              "NoGradGuard, or the out-of-place op)",
              op);
}

}  // namespace

// ---- binary
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary("add", a, b, Add{});
  if (needs_grad({&a, &b})) {
    Shape sa = a.shape(), sb = b.shape();
    record_fn("Add", {a, b}, {out}, [sa, sb](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{reduce_to(g[0], sa), reduce_to(g[0], sb)};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary("sub", a, b, Sub{});
  if (needs_grad({&a, &b})) {
    Shape sa = a.shape(), sb = b.shape();
    const bool gb = b.requires_grad();
    record_fn("Sub", {a, b}, {out}, [sa, sb, gb](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{reduce_to(g[0], sa), gb ? reduce_to(neg(g[0]), sb) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary("mul", a, b, Mul{});
  if (needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    record_fn("Mul", {a, b}, {out}, [a = a.detach(), b = b.detach(), ga, gb](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{ga ? reduce_to(mul(g[0], b), a.shape()) : Tensor(),
                                 gb ? reduce_to(mul(g[0], a), b.shape()) : Tensor()};
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = map_binary("div", a, b, Div{});
  if (needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    record_fn("Div", {a, b}, {out},
              [b = b.detach(), out = out.detach(), sa = a.shape(), ga, gb](const std::vector<Tensor>& g) {
                Tensor gx = div(g[0], b);  // d/da = g / b ; d/db = -(g / b) * out
                return std::vector<Tensor>{ga ? reduce_to(gx, sa) : Tensor(),
                                           gb ? reduce_to(neg(mul(gx, out)), b.shape()) : Tensor()};
              });
  }
  return out;
}

Tensor add(const Tensor& x, double s) {
  const float v = static_cast<float>(s);
  Tensor out = map_unary("add", x, [v](float a) { return a + v; });
  if (needs_grad({&x}))
    record_fn("AddScalar", {x}, {out}, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

Tensor scale(const Tensor& x, double s) {
  const float v = static_cast<float>(s);
  Tensor out = map_unary("scale", x, [v](float a) { return a * v; });
  if (needs_grad({&x}))
    record_fn("Scale", {x}, {out}, [s](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{scale(g[0], s)};
    });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", "cond", cond);
  TITAN_CHECK(cond.dtype() == DType::boolean || cond.dtype() == DType::u8,
              "where: argument 'cond' must be bool or u8, got {}", dtype_name(cond.dtype()));
  check_dtype("where", "a", a, DType::f32);
  check_dtype("where", "b", b, DType::f32);
  for (auto [name, t] : {std::pair{"a", &a}, std::pair{"b", &b}})
    TITAN_CHECK(t->shape() == cond.shape() || t->numel() == 1,
                "where: argument '{}' has shape {} but cond has shape {} (no implicit "
                "broadcasting; use expand())",
                name, shape_str(t->shape()), shape_str(cond.shape()));
  Tensor cc = contig(cond), ac = contig(a), bc = contig(b);
  Tensor out = Tensor::empty(cond.shape());
  const uint8_t* pc = static_cast<const uint8_t*>(cc.data_ptr());
  const float* pa = ac.data<float>();
  const float* pb = bc.data<float>();
  float* po = out.data<float>();
  const int64_t sa = ac.shape() == cond.shape() ? 1 : 0, sb = bc.shape() == cond.shape() ? 1 : 0;
  parallel_elems(out.numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = pc[i] ? pa[i * sa] : pb[i * sb];
  });
  if (needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    record_fn("Where", {a, b}, {out},
              [cond = cc.detach(), sa = a.shape(), sb = b.shape(), ga, gb](const std::vector<Tensor>& g) {
                Tensor zero = Tensor::zeros({});
                return std::vector<Tensor>{
                    ga ? reduce_to(where(cond, g[0], zero), sa) : Tensor(),
                    gb ? reduce_to(where(cond, zero, g[0]), sb) : Tensor()};
              });
  }
  return out;
}

// ---- unary
Tensor neg(const Tensor& x) {
  Tensor out = map_unary("neg", x, Neg{});
  if (needs_grad({&x}))
    record_fn("Neg", {x}, {out}, [](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{neg(g[0])};
    });
  return out;
}

Tensor exp(const Tensor& x) {
  check_dtype("exp", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_elems(out.numel(), [&](int64_t b, int64_t e) {
    kernels::cpu::exp_f32(po + b, px + b, e - b);
  });
  if (needs_grad({&x}))
    record_fn("Exp", {x}, {out}, [out = out.detach()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{mul(g[0], out)};
    });
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = map_unary("log", x, Log{});
  if (needs_grad({&x}))
    record_fn("Log", {x}, {out}, [x = x.detach()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{div(g[0], x)};
    });
  return out;
}

Tensor tanh(const Tensor& x) {
  check_dtype("tanh", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_elems(out.numel(), [&](int64_t b, int64_t e) {
    exp_pipeline(po, px, b, e, [](float v) { return -2.0f * std::fmax(v, 0.0f - v); },
                 [](float v, float ex) {
                   const float t = (1.0f - ex) / (1.0f + ex);
                   return v < 0.0f ? 0.0f - t : t;
                 });
  });
  if (needs_grad({&x}))
    record_fn("Tanh", {x}, {out}, [out = out.detach()](const std::vector<Tensor>& g) {
      // d tanh = g * (1 - y^2)
      return std::vector<Tensor>{mul(g[0], add(neg(square(out)), 1.0))};
    });
  return out;
}

Tensor sigmoid(const Tensor& x) {
  check_dtype("sigmoid", "x", x, DType::f32);
  Tensor xc = contig(x);
  Tensor out = Tensor::empty(x.shape());
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_elems(out.numel(), [&](int64_t b, int64_t e) {
    exp_pipeline(po, px, b, e, [](float v) { return 0.0f - v; },
                 [](float, float ex) { return 1.0f / (1.0f + ex); });
  });
  if (needs_grad({&x}))
    record_fn("Sigmoid", {x}, {out}, [out = out.detach()](const std::vector<Tensor>& g) {
      // d sigmoid = g * y * (1 - y)
      return std::vector<Tensor>{mul(mul(g[0], out), add(neg(out), 1.0))};
    });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = map_unary("sqrt", x, Sqrt{});
  if (needs_grad({&x}))
    record_fn("Sqrt", {x}, {out}, [out = out.detach()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{div(g[0], scale(out, 2.0))};
    });
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = map_unary("rsqrt", x, Rsqrt{});
  if (needs_grad({&x}))
    record_fn("Rsqrt", {x}, {out}, [out = out.detach()](const std::vector<Tensor>& g) {
      // d x^{-1/2} = -1/2 x^{-3/2} = -1/2 y^3
      return std::vector<Tensor>{mul(g[0], scale(mul(square(out), out), -0.5))};
    });
  return out;
}

Tensor pow(const Tensor& x, double p) {
  Tensor out = map_unary("pow", x, Pow{static_cast<float>(p)});
  if (needs_grad({&x}))
    record_fn("Pow", {x}, {out}, [x = x.detach(), p](const std::vector<Tensor>& g) {
      if (p == 0.0) return std::vector<Tensor>{scale(g[0], 0.0)};
      return std::vector<Tensor>{mul(g[0], scale(pow(x, p - 1.0), p))};
    });
  return out;
}

Tensor square(const Tensor& x) {
  Tensor out = map_unary("square", x, Square{});
  if (needs_grad({&x}))
    record_fn("Square", {x}, {out}, [x = x.detach()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{mul(g[0], scale(x, 2.0))};
    });
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = map_unary("abs", x, Abs{});
  if (needs_grad({&x}))
    record_fn("Abs", {x}, {out}, [x = x.detach()](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{mul(g[0], map_unary("abs", x, Sign{}))};
    });
  return out;
}

// ---- in-place (not recorded)
const Tensor& add_(const Tensor& self, const Tensor& other, double alpha) {
  check_inplace("add_", self);
  TITAN_CHECK(binary_shape("add_", self, other) == self.shape(),
              "add_: 'other' of shape {} cannot be added into 'self' of shape {}",
              shape_str(other.shape()), shape_str(self.shape()));
  const float al = static_cast<float>(alpha);
  if (al == 1.0f)
    binary_into(self.data<float>(), self, other, self.numel(), Add{});
  else
    binary_into(self.data<float>(), self, other, self.numel(),
                [al](float a, float b) { return a + al * b; });
  return self;
}

const Tensor& mul_(const Tensor& self, const Tensor& other) {
  check_inplace("mul_", self);
  TITAN_CHECK(binary_shape("mul_", self, other) == self.shape(),
              "mul_: 'other' of shape {} cannot be multiplied into 'self' of shape {}",
              shape_str(other.shape()), shape_str(self.shape()));
  binary_into(self.data<float>(), self, other, self.numel(), Mul{});
  return self;
}

const Tensor& scale_(const Tensor& self, double s) {
  check_inplace("scale_", self);
  const float v = static_cast<float>(s);
  float* p = self.data<float>();
  parallel_elems(self.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] *= v;
  });
  return self;
}

}  // namespace titan
