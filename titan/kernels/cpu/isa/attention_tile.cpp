// The per-query-tile inner functions of the attention kernels (one ISA). Both the
// packed training path and the paged path call fwd_tile; backward reuses the pieces.
// Batch invariance: every score lane is one FMA chain over d ascending; masking is a
// blend to -inf; THE simd::vexp; block sums add the B/W vectors left to right then
// one fixed hsum; the value accumulation is acc*alpha followed by an FMA chain over
// the visible keys ascending. None of it depends on the other rows of a tile.
#if defined(TITAN_ISA_AVX512)
// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized on _mm512_undefined_*.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "titan/kernels/cpu/isa/attention_tile.h"

#include <array>
#include <cmath>
#include <limits>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS::attn {
using namespace simd;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

constexpr std::array<float, kMaxB> make_iota() {
  std::array<float, kMaxB> a{};
  for (int i = 0; i < kMaxB; ++i) a[i] = static_cast<float>(i);
  return a;
}
alignas(64) constexpr std::array<float, kMaxB> kIota = make_iota();

// tanh, the one used by the soft-cap (Cephes tanhf): |x| < 0.625: x + x^3 P(x^2);
// else sign(x) (1 - 2 / (exp(2|x|) + 1)) with simd::vexp. Max error ~2 ulp.
TITAN_SIMD_INLINE vf vtanh(vf x) {
  vf ax = abs_bits(x);
  vf z = mul(x, x);
  vf p = set1(-5.70498872745e-3f);
  p = fmadd(p, z, set1(2.06390887954e-2f));
  p = fmadd(p, z, set1(-5.37397155531e-2f));
  p = fmadd(p, z, set1(1.33314422036e-1f));
  p = fmadd(p, z, set1(-3.33332819422e-1f));
  vf small = fmadd(mul(p, z), x, x);
  vf e = vexp(add(ax, ax));
  vf big = sub(set1(1.0f), div(set1(2.0f), add(e, set1(1.0f))));
  big = copy_sign(big, x);
  return select_lt(ax, set1(0.625f), small, big);
}

#define TITAN_UNROLL _Pragma("GCC unroll 8")

// The score and value kernels below are lane-wise (one FMA chain per score or output
// lane), so they run on the native register (simd.h).
namespace nv = simd::native;

template <int NR, int NV>
inline void dots_kernel(float* const* s, const float* const* x, const float* kt, int Dh, int B,
                        int l0, nv::vf vscale) {
  using nv::W;
  nv::vf acc[NR][NV];
  TITAN_UNROLL for (int r = 0; r < NR; ++r) {
    TITAN_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = nv::zero();
  }
  const float* kp = kt + l0;
  for (int d = 0; d < Dh; ++d, kp += B) {
    nv::vf kv[NV];
    TITAN_UNROLL for (int v = 0; v < NV; ++v) kv[v] = nv::load(kp + v * W);
    TITAN_UNROLL for (int r = 0; r < NR; ++r) {
      const nv::vf xb = nv::set1(x[r][d]);
      TITAN_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = nv::fmadd(xb, kv[v], acc[r][v]);
    }
  }
  TITAN_UNROLL for (int r = 0; r < NR; ++r) {
    TITAN_UNROLL for (int v = 0; v < NV; ++v) nv::store(s[r] + l0 + v * W, nv::mul(acc[r][v], vscale));
  }
}

template <int NR>
inline void dots_rows(float* const* s, const float* const* x, const float* kt, int Dh, int B,
                      nv::vf vscale) {
  using nv::W;
  int l0 = 0;
  for (; l0 + 2 * W <= B; l0 += 2 * W) dots_kernel<NR, 2>(s, x, kt, Dh, B, l0, vscale);
  for (; l0 < B; l0 += W) dots_kernel<NR, 1>(s, x, kt, Dh, B, l0, vscale);
}

// NR accumulator rows sharing one key range [jlo, jhi], lanes [d, Dh) of them: chunks
// of 4 vectors, then single vectors, then one masked tail. Per lane: a = acc*alpha, then an FMA
// chain over j ascending — the same whichever chunk the lane falls in.
template <int NR>
inline void axpy_kernel(float* const* acc, const float* alpha, const float* const* coef, int jlo,
                        int jhi, const float* const* x, int d, int Dh) {
  using nv::W;
  nv::vf va[NR];
  TITAN_UNROLL for (int r = 0; r < NR; ++r) va[r] = nv::set1(alpha[r]);
  for (; d + 4 * W <= Dh; d += 4 * W) {
    nv::vf a[NR][4];
    TITAN_UNROLL for (int r = 0; r < NR; ++r) {
      TITAN_UNROLL for (int i = 0; i < 4; ++i) a[r][i] = nv::mul(nv::load(acc[r] + d + i * W), va[r]);
    }
    for (int j = jlo; j <= jhi; ++j) {
      const float* xj = x[j] + d;
      nv::vf xv[4];
      TITAN_UNROLL for (int i = 0; i < 4; ++i) xv[i] = nv::load(xj + i * W);
      TITAN_UNROLL for (int r = 0; r < NR; ++r) {
        const nv::vf cb = nv::set1(coef[r][j]);
        TITAN_UNROLL for (int i = 0; i < 4; ++i) a[r][i] = nv::fmadd(cb, xv[i], a[r][i]);
      }
    }
    TITAN_UNROLL for (int r = 0; r < NR; ++r) {
      TITAN_UNROLL for (int i = 0; i < 4; ++i) nv::store(acc[r] + d + i * W, a[r][i]);
    }
  }
  for (; d + W <= Dh; d += W) {
    nv::vf a[NR];
    TITAN_UNROLL for (int r = 0; r < NR; ++r) a[r] = nv::mul(nv::load(acc[r] + d), va[r]);
    for (int j = jlo; j <= jhi; ++j) {
      const nv::vf xv = nv::load(x[j] + d);
      TITAN_UNROLL for (int r = 0; r < NR; ++r) a[r] = nv::fmadd(nv::set1(coef[r][j]), xv, a[r]);
    }
    TITAN_UNROLL for (int r = 0; r < NR; ++r) nv::store(acc[r] + d, a[r]);
  }
  if (d < Dh) {
    const int n = Dh - d;
    nv::vf a[NR];
    TITAN_UNROLL for (int r = 0; r < NR; ++r) a[r] = nv::mul(nv::load_n(acc[r] + d, n), va[r]);
    for (int j = jlo; j <= jhi; ++j) {
      const nv::vf xv = nv::load_n(x[j] + d, n);
      TITAN_UNROLL for (int r = 0; r < NR; ++r) a[r] = nv::fmadd(nv::set1(coef[r][j]), xv, a[r]);
    }
    TITAN_UNROLL for (int r = 0; r < NR; ++r) nv::store_n(acc[r] + d, a[r], n);
  }
}

// One block of the online softmax for one row, in two steps so that the rescale
// factors alpha = exp(m_old - m_new) of all rows of a tile go through one vexp per W
// rows (lane-wise, so each row's alpha has the same bits as alone).
// Step 1: the new running max; returns the shift mu used for the exponentials.
inline float block_max(const float* s, int B, float m, float& m_new) {
  vf mx = load(s);
  for (int v = W; v < B; v += W) mx = max(mx, load(s + v));
  m_new = std::max(m, hmax(mx));
  return (m_new == kNegInf) ? 0.0f : m_new;  // all -inf: avoid -inf - -inf
}
// Step 2: s becomes p = exp(s - mu); l = l * alpha + sum(p) (vectors left to right,
// then the fixed hsum).
inline void block_exp_sum(float* s, int B, float mu, float alpha, float& l) {
  const vf vmu = set1(mu);
  vf sum = vexp(sub(load(s), vmu));
  store(s, sum);
  for (int v = W; v < B; v += W) {
    const vf p = vexp(sub(load(s + v), vmu));
    store(s + v, p);
    sum = add(sum, p);
  }
  l = l * alpha + hsum(sum);
}

// y[i] = exp(x[i]) for i < n through THE vexp.
inline void exp_n(float* y, const float* x, int n) {
  int i = 0;
  for (; i + W <= n; i += W) store(y + i, vexp(load(x + i)));
  if (i < n) store_n(y + i, vexp(load_n(x + i, n - i)), n - i);
}

// Prefetches the next KV block (pages of the cache are not contiguous, so the
// hardware prefetchers lose the stream at every block boundary). No arithmetic.
inline void prefetch_block(const float* k, const float* v, int64_t v_stride, const Cfg& c) {
  const int64_t nk = int64_t{c.Dh} * c.B;
  for (int64_t i = 0; i < nk; i += 16) _mm_prefetch(reinterpret_cast<const char*>(k + i), _MM_HINT_T1);
  for (int j = 0; j < c.B; ++j)
    for (int d = 0; d < c.Dh; d += 16)
      _mm_prefetch(reinterpret_cast<const char*>(v + j * v_stride + d), _MM_HINT_T1);
}

}  // namespace

float exp1(float x) { return first(vexp(set1(x))); }

float dot(const float* a, const float* b, int Dh) {
  vf acc = zero();
  int d = 0;
  for (; d + W <= Dh; d += W) acc = fmadd(load(a + d), load(b + d), acc);
  if (d < Dh) acc = fmadd(load_n(a + d, Dh - d), load_n(b + d, Dh - d), acc);
  return hsum(acc);
}

void block_dots(float* const* s, const float* const* x, int R, const float* kt, int Dh, int B,
                float scale) {
  const nv::vf vscale = nv::set1(scale);
  int r = 0;
  for (; r + 4 <= R; r += 4) dots_rows<4>(s + r, x + r, kt, Dh, B, vscale);
  switch (R - r) {
    case 3: dots_rows<3>(s + r, x + r, kt, Dh, B, vscale); break;
    case 2: dots_rows<2>(s + r, x + r, kt, Dh, B, vscale); break;
    case 1: dots_rows<1>(s + r, x + r, kt, Dh, B, vscale); break;
    default: break;
  }
}

void cap_mask(float* s, float* th, int jlo, int jhi, const Cfg& c) {
  const vf vlo = set1(static_cast<float>(jlo)), vhi = set1(static_cast<float>(jhi));
  const vf ninf = set1(kNegInf);
  const vf cap = set1(c.softcap), inv_cap = set1(c.inv_softcap);
  for (int v = 0; v < c.B; v += W) {
    vf x = load(s + v);
    if (c.softcap > 0.0f) {
      const vf t = vtanh(mul(x, inv_cap));
      if (th) store(th + v, t);
      x = mul(cap, t);
    }
    const vf idx = load(kIota.data() + v);
    x = select_lt(idx, vlo, ninf, x);
    x = select_lt(vhi, idx, ninf, x);
    store(s + v, x);
  }
}

void exp_shift(float* p, const float* s, float shift, int B) {
  const vf vs = set1(shift);
  for (int v = 0; v < B; v += W) store(p + v, vexp(sub(load(s + v), vs)));
}

// Four rows at once where their key ranges agree: 16 accumulators of 4 vectors each
// (AVX-512: 32 registers; attention_bench Dh 64, T 512, 2 threads, Zen5: forward 212 ->
// 249 GFLOP/s, backward 234 -> 271). AVX2's 16 registers hold only the two-row
// kernel's 8. Same bits: every lane is still acc*alpha, then the chain over j ascending.
constexpr bool kAxpy4 = nv::W == 16;

void axpy_rows(float* const* acc, const float* alpha, const float* const* coef, const int* jlo,
               const int* jhi, int R, const float* const* x, int Dh) {
  auto same_keys = [&](int a, int b) { return jlo[a] == jlo[b] && jhi[a] == jhi[b]; };
  // Lane chunks outer, rows inner: one chunk of the x rows stays in L1 for all rows.
  using nv::W;
  for (int d0 = 0; d0 < Dh; d0 += 4 * W) {
    const int d1 = Dh - d0 < 8 * W ? Dh : d0 + 4 * W;  // the last chunk takes the rest
    int r = 0;
    while (r < R) {
      if (kAxpy4 && r + 3 < R && same_keys(r, r + 1) && same_keys(r, r + 2) &&
          same_keys(r, r + 3)) {
        axpy_kernel<4>(acc + r, alpha + r, coef + r, jlo[r], jhi[r], x, d0, d1);
        r += 4;
      } else if (r + 1 < R && same_keys(r, r + 1)) {
        axpy_kernel<2>(acc + r, alpha + r, coef + r, jlo[r], jhi[r], x, d0, d1);
        r += 2;
      } else {
        axpy_kernel<1>(acc + r, alpha + r, coef + r, jlo[r], jhi[r], x, d0, d1);
        r += 1;
      }
    }
    if (d1 == Dh) break;
  }
}

void fwd_tile(const QRow* rows, int R, const float* const* kblk, const float* const* vblk,
              int64_t v_stride, const Cfg& c) {
  const int B = c.B, Dh = c.Dh;
  // Scores, accumulators and a contiguous copy of the q rows (rows of q in (T, H, Dh)
  // are often 4 KiB apart, which maps them all to one L1 set).
  thread_local std::vector<float> sbuf, abuf, qbuf;
  if (sbuf.size() < static_cast<size_t>(R) * B) sbuf.resize(static_cast<size_t>(R) * B);
  if (abuf.size() < static_cast<size_t>(R) * Dh) abuf.resize(static_cast<size_t>(R) * Dh);
  if (qbuf.size() < static_cast<size_t>(R) * Dh) qbuf.resize(static_cast<size_t>(R) * Dh);
  auto S = [&](int r) { return sbuf.data() + static_cast<size_t>(r) * B; };
  auto acc = [&](int r) { return abuf.data() + static_cast<size_t>(r) * Dh; };
  auto qc = [&](int r) { return qbuf.data() + static_cast<size_t>(r) * Dh; };
  float m[kMaxRows], l[kMaxRows];
  int lo[kMaxRows], bfirst[kMaxRows], blast[kMaxRows];
  int bmin = 0, bmax = -1;
  for (int r = 0; r < R; ++r) {
    const int p = rows[r].pos;
    lo[r] = first_visible(p, c.window, c.chunk);
    bfirst[r] = lo[r] / B;
    blast[r] = p / B;
    bmin = r == 0 ? bfirst[r] : std::min(bmin, bfirst[r]);
    bmax = std::max(bmax, blast[r]);
    // A sink is a virtual first key with logit `sink` and no value: m = sink, l = 1.
    m[r] = rows[r].sink;
    l[r] = rows[r].sink == kNegInf ? 0.0f : 1.0f;
    std::fill(acc(r), acc(r) + Dh, 0.0f);
    std::copy(rows[r].q, rows[r].q + Dh, qc(r));
  }
  const float* vrows[kMaxB];
  for (int b = bmin; b <= bmax; ++b) {
    const int kb0 = b * B;
    if (b + 2 <= bmax) prefetch_block(kblk[b + 2], vblk[b + 2], v_stride, c);
    int act[kMaxRows], na = 0;
    for (int r = 0; r < R; ++r)
      if (bfirst[r] <= b && b <= blast[r]) act[na++] = r;
    if (na == 0) continue;
    const float* xs[kMaxRows];
    float* ss[kMaxRows];
    float* as[kMaxRows];
    const float* ps[kMaxRows];
    float alpha[kMaxRows];
    int jlo[kMaxRows], jhi[kMaxRows];
    for (int i = 0; i < na; ++i) {
      xs[i] = qc(act[i]);
      ss[i] = S(act[i]);
    }
    block_dots(ss, xs, na, kblk[b], Dh, B, c.scale);
    int jmax = 0;
    float mu[kMaxRows], mnew[kMaxRows], dm[kMaxRows];
    for (int i = 0; i < na; ++i) {
      const int r = act[i];
      jlo[i] = std::max(lo[r], kb0) - kb0;
      jhi[i] = std::min(rows[r].pos, kb0 + B - 1) - kb0;
      jmax = std::max(jmax, jhi[i]);
      cap_mask(S(r), nullptr, jlo[i], jhi[i], c);
      mu[i] = block_max(S(r), B, m[r], mnew[i]);
      dm[i] = m[r] - mu[i];
    }
    exp_n(alpha, dm, na);
    for (int i = 0; i < na; ++i) {
      const int r = act[i];
      block_exp_sum(S(r), B, mu[i], alpha[i], l[r]);
      m[r] = mnew[i];
      as[i] = acc(r);
      ps[i] = S(r);
    }
    for (int j = 0; j <= jmax; ++j) vrows[j] = vblk[b] + j * v_stride;
    axpy_rows(as, alpha, ps, jlo, jhi, na, vrows, Dh);
  }
  for (int r = 0; r < R; ++r) {
    const vf vl = set1(l[r]);
    float* o = rows[r].out;
    int d = 0;
    for (; d + W <= Dh; d += W) store(o + d, div(load(acc(r) + d), vl));
    if (d < Dh) store_n(o + d, div(load_n(acc(r) + d, Dh - d), vl), Dh - d);
    if (rows[r].lse) *rows[r].lse = m[r] + std::log(l[r]);
  }
}

void run_balanced(const std::vector<double>& costs, const std::function<void(int64_t)>& fn) {
  const int64_t n = static_cast<int64_t>(costs.size());
  double total = 0.0;
  for (double c : costs) total += c;
  // Below ~100 us of work (a decode step of a few heads) waking threads costs more
  // than it saves; running inline does not change any bits.
  constexpr double kMinParallelCost = 2e5;
  const int nth = total < kMinParallelCost
                      ? 1
                      : static_cast<int>(std::min<int64_t>(num_threads(), std::max<int64_t>(n, 1)));
  if (nth <= 1) {
    for (int64_t u = 0; u < n; ++u) fn(u);
    return;
  }
  std::vector<int64_t> order(n);
  for (int64_t u = 0; u < n; ++u) order[u] = u;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<int64_t>> mine(nth);
  std::vector<double> load(nth, 0.0);
  for (int64_t u : order) {
    const int t = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    mine[t].push_back(u);
    load[t] += costs[u];
  }
  parallel_for(nth, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t u : mine[t]) fn(u);
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS::attn
