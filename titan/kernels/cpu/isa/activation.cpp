// Element-wise activations (per ISA): one functor per function, one driver.
// See titan/kernels/cpu/activation.h.
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/vfn.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {

struct Silu {
  static vf fwd(vf x) { return mul(x, vsigmoid(x)); }
  // silu'(x) = σ(x) · (1 + x · (1 − σ(x)))
  static vf grad(vf x) {
    const vf s = vsigmoid(x), one = set1(1.0f);
    return mul(s, fmadd(x, sub(one, s), one));
  }
};

// GELU-tanh through 0.5·(1 + tanh u) = σ(2u) and 1 − tanh²u = 4·σ(2u)·(1 − σ(2u)): the
// same function, without the cancellation of 1 + tanh u near −1 (accurate tails).
struct GeluTanh {
  static constexpr float kA = 0.7978845608028654f;  // √(2/π)
  static constexpr float kB = 0.044715f;
  static vf sig2u(vf x) {  // σ(2u), u = √(2/π) · (x + 0.044715 · x³)
    const vf x3 = mul(mul(x, x), x);
    return vsigmoid(mul(set1(2.0f * kA), fmadd(set1(kB), x3, x)));
  }
  static vf fwd(vf x) { return mul(x, sig2u(x)); }
  // d/dx = σ(2u) + 2·x·σ(2u)·(1 − σ(2u))·du/dx,  du/dx = √(2/π)·(1 + 3·0.044715·x²)
  static vf grad(vf x) {
    const vf s = sig2u(x), one = set1(1.0f);
    const vf du = mul(set1(kA), fmadd(set1(3.0f * kB), mul(x, x), one));
    return fmadd(mul(mul(set1(2.0f), x), mul(s, sub(one, s))), du, s);
  }
};

struct Tanh {
  static vf fwd(vf x) { return vtanh(x); }
};

// Runs f(i, c) over [0, n) in blocks of kBlock elements split across threads; inside a
// block vectors are full except the array's last one (masked).
constexpr int64_t kBlock = 4096;
template <class F>
void drive(int64_t n, F f) {
  const int64_t nb = (n + kBlock - 1) / kBlock;
  parallel_for_grain(nb, 8, [&](int64_t b0, int64_t b1) {
    const int64_t e = std::min(n, b1 * kBlock);
    for (int64_t i = b0 * kBlock; i < e; i += W) f(i, static_cast<int>(std::min<int64_t>(W, e - i)));
  });
}

template <class Op>
void unary_fwd(float* out, const float* x, int64_t n) {
  drive(n, [&](int64_t i, int c) { store_c(out + i, Op::fwd(load_c(x + i, c, 0.0f)), c); });
}

template <class Op>
void unary_bwd(float* dx, const float* dout, const float* x, int64_t n) {
  drive(n, [&](int64_t i, int c) {
    store_c(dx + i, mul(load_c(dout + i, c, 0.0f), Op::grad(load_c(x + i, c, 0.0f))), c);
  });
}

}  // namespace

void silu_fwd(float* out, const float* x, int64_t n) { unary_fwd<Silu>(out, x, n); }
void silu_bwd(float* dx, const float* dout, const float* x, int64_t n) {
  unary_bwd<Silu>(dx, dout, x, n);
}
void gelu_tanh_fwd(float* out, const float* x, int64_t n) { unary_fwd<GeluTanh>(out, x, n); }
void gelu_tanh_bwd(float* dx, const float* dout, const float* x, int64_t n) {
  unary_bwd<GeluTanh>(dx, dout, x, n);
}

void tanh_fwd(float* out, const float* x, int64_t n) { unary_fwd<Tanh>(out, x, n); }
void tanh_bwd(float* dx, const float* dout, const float* out, int64_t n) {
  drive(n, [&](int64_t i, int c) {
    const vf y = load_c(out + i, c, 0.0f);
    store_c(dx + i, mul(load_c(dout + i, c, 0.0f), fnmadd(y, y, set1(1.0f))), c);
  });
}

void swiglu_fwd(float* out, const float* gate, const float* up, int64_t n) {
  drive(n, [&](int64_t i, int c) {
    store_c(out + i, mul(Silu::fwd(load_c(gate + i, c, 0.0f)), load_c(up + i, c, 0.0f)), c);
  });
}

void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                int64_t n) {
  drive(n, [&](int64_t i, int c) {
    const vf g = load_c(gate + i, c, 0.0f), u = load_c(up + i, c, 0.0f);
    const vf d = load_c(dout + i, c, 0.0f);
    store_c(dup + i, mul(d, Silu::fwd(g)), c);
    store_c(dgate + i, mul(mul(d, u), Silu::grad(g)), c);
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
