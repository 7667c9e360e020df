// RMSNorm / LayerNorm row kernels (per ISA). See titan/kernels/cpu/norm.h.
#include <cmath>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/reduce.h"
#include "titan/kernels/cpu/norm.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {

// Σ_j a_j · b_j over a row of n (b null: Σ a_j²) with the fixed lane scheme.
inline float row_dot(const float* a, const float* b, int64_t n) {
  return hsum(reduce4(
      n, zero(),
      [&](vf acc, int64_t i, int c) {
        vf va = load_c(a + i, c, 0.0f);
        return fmadd(va, b ? load_c(b + i, c, 0.0f) : va, acc);
      },
      comb_add));
}

// g = dout ⊙ w (w null: dout) for the c lanes at column i.
TITAN_SIMD_INLINE vf grad_in(const float* dout, const float* w, int64_t i, int c) {
  vf g = load_c(dout + i, c, 0.0f);
  return w ? mul(g, load_c(w + i, c, 0.0f)) : g;
}

// out (D) (+)= Σ_k part[k] (nchunks, D), summed in chunk order, parallel over columns.
void reduce_partials(float* out, const float* part, int64_t nchunks, int64_t D, bool accumulate) {
  const int64_t nvec = (D + W - 1) / W;
  parallel_for_grain(nvec, 64, [&](int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      const int64_t i = v * W;
      const int c = static_cast<int>(std::min<int64_t>(W, D - i));
      vf s = load_c(part + i, c, 0.0f);
      for (int64_t k = 1; k < nchunks; ++k) s = add(s, load_c(part + k * D + i, c, 0.0f));
      if (accumulate) s = add(load_c(out + i, c, 0.0f), s);
      store_c(out + i, s, c);
    }
  });
}

inline int64_t num_chunks(int64_t T) { return (T + kNormRowChunk - 1) / kNormRowChunk; }

}  // namespace

void rms_norm_fwd(float* out, float* rstd, const float* x, const float* w, int64_t T, int64_t D,
                  float eps) {
  parallel_for_grain(T, row_grain(D), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* xr = x + t * D;
      float* yr = out + t * D;
      const float ms = row_dot(xr, nullptr, D) / static_cast<float>(D);
      const float r = 1.0f / std::sqrt(ms + eps);
      if (rstd) rstd[t] = r;
      const vf rv = set1(r);
      for_vectors(D, [&](int64_t i, int c) {
        vf y = mul(load_c(xr + i, c, 0.0f), rv);
        if (w) y = mul(load_c(w + i, c, 0.0f), y);
        store_c(yr + i, y, c);
      });
    }
  });
}

void rms_norm_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                  const float* rstd, int64_t T, int64_t D, bool accumulate_dw) {
  const int64_t nch = num_chunks(T);
  std::vector<float> part(dw ? static_cast<size_t>(nch * D) : 0);
  parallel_for(nch, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      float* p = dw ? part.data() + k * D : nullptr;
      if (p) for_vectors(D, [&](int64_t i, int c) { store_c(p + i, zero(), c); });
      const int64_t t1 = std::min(T, (k + 1) * kNormRowChunk);
      for (int64_t t = k * kNormRowChunk; t < t1; ++t) {
        const float* xr = x + t * D;
        const float* gr = dout + t * D;
        float* dr = dx + t * D;
        const float r = rstd[t];
        const float dot = hsum(reduce4(
            D, zero(),
            [&](vf a, int64_t i, int c) { return fmadd(grad_in(gr, w, i, c), load_c(xr + i, c, 0.0f), a); },
            comb_add));
        const float cx = r * r * r * dot / static_cast<float>(D);
        const vf rv = set1(r), cv = set1(cx);
        for_vectors(D, [&](int64_t i, int c) {
          const vf xv = load_c(xr + i, c, 0.0f);
          if (p) store_c(p + i, fmadd(load_c(gr + i, c, 0.0f), mul(xv, rv), load_c(p + i, c, 0.0f)), c);
          store_c(dr + i, fnmadd(cv, xv, mul(rv, grad_in(gr, w, i, c))), c);
        });
      }
    }
  });
  if (dw) {
    if (nch == 0) {
      if (!accumulate_dw) for_vectors(D, [&](int64_t i, int c) { store_c(dw + i, zero(), c); });
      return;
    }
    reduce_partials(dw, part.data(), nch, D, accumulate_dw);
  }
}

void layer_norm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int64_t T, int64_t D, float eps) {
  parallel_for_grain(T, row_grain(D), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* xr = x + t * D;
      float* yr = out + t * D;
      const float mu = hsum(reduce4(
                           D, zero(),
                           [&](vf a, int64_t i, int c) { return add(a, load_c(xr + i, c, 0.0f)); },
                           comb_add)) /
                       static_cast<float>(D);
      const vf mv = set1(mu);
      // Masked lanes load mu itself, so they contribute (mu - mu)² = 0.
      const float var = hsum(reduce4(
                            D, zero(),
                            [&](vf a, int64_t i, int c) {
                              vf d = sub(load_c(xr + i, c, mu), mv);
                              return fmadd(d, d, a);
                            },
                            comb_add)) /
                        static_cast<float>(D);
      const float r = 1.0f / std::sqrt(var + eps);
      if (mean) mean[t] = mu;
      if (rstd) rstd[t] = r;
      const vf rv = set1(r);
      for_vectors(D, [&](int64_t i, int c) {
        vf y = mul(sub(load_c(xr + i, c, 0.0f), mv), rv);
        if (w && b) y = fmadd(y, load_c(w + i, c, 0.0f), load_c(b + i, c, 0.0f));
        else if (w) y = mul(y, load_c(w + i, c, 0.0f));
        else if (b) y = add(y, load_c(b + i, c, 0.0f));
        store_c(yr + i, y, c);
      });
    }
  });
}

void layer_norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x,
                    const float* w, const float* mean, const float* rstd, int64_t T, int64_t D,
                    bool accumulate) {
  const int64_t nch = num_chunks(T);
  std::vector<float> pw(dw ? static_cast<size_t>(nch * D) : 0);
  std::vector<float> pb(db ? static_cast<size_t>(nch * D) : 0);
  parallel_for(nch, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      float* qw = dw ? pw.data() + k * D : nullptr;
      float* qb = db ? pb.data() + k * D : nullptr;
      for_vectors(D, [&](int64_t i, int c) {
        if (qw) store_c(qw + i, zero(), c);
        if (qb) store_c(qb + i, zero(), c);
      });
      const int64_t t1 = std::min(T, (k + 1) * kNormRowChunk);
      for (int64_t t = k * kNormRowChunk; t < t1; ++t) {
        const float* xr = x + t * D;
        const float* gr = dout + t * D;
        float* dr = dx + t * D;
        const vf mv = set1(mean[t]), rv = set1(rstd[t]);
        auto xhat = [&](int64_t i, int c) { return mul(sub(load_c(xr + i, c, 0.0f), mv), rv); };
        // Masked lanes: g = 0, so both sums get exact zeros there.
        const float sg = hsum(reduce4(
            D, zero(), [&](vf a, int64_t i, int c) { return add(a, grad_in(gr, w, i, c)); },
            comb_add));
        const float sgx = hsum(reduce4(
            D, zero(),
            [&](vf a, int64_t i, int c) { return fmadd(grad_in(gr, w, i, c), xhat(i, c), a); },
            comb_add));
        const vf av = set1(sg / static_cast<float>(D)), bv = set1(sgx / static_cast<float>(D));
        for_vectors(D, [&](int64_t i, int c) {
          const vf xh = xhat(i, c);
          const vf go = load_c(gr + i, c, 0.0f);
          if (qw) store_c(qw + i, fmadd(go, xh, load_c(qw + i, c, 0.0f)), c);
          if (qb) store_c(qb + i, add(load_c(qb + i, c, 0.0f), go), c);
          store_c(dr + i, mul(rv, fnmadd(xh, bv, sub(grad_in(gr, w, i, c), av))), c);
        });
      }
    }
  });
  for (auto [out, part] : {std::pair{dw, &pw}, std::pair{db, &pb}}) {
    if (!out) continue;
    if (nch == 0) {
      if (!accumulate) for_vectors(D, [&](int64_t i, int c) { store_c(out + i, zero(), c); });
      continue;
    }
    reduce_partials(out, part->data(), nch, D, accumulate);
  }
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
