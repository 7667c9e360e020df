// Attention backward (one ISA), FlashAttention-2 style with the saved lse:
//   s = scale * q.k (soft-capped, masked), p = exp(s - lse), D_i = dO_i . O_i,
//   dp = dO . v, ds = p (dp - D) [* (1 - tanh^2) with soft-cap] * scale,
//   dv_j += p_ij dO_i, dk_j += ds_ij q_i, dq_i += ds_ij k_j.
// One task per (sequence, KV head) owns the dk/dv rows of that head and the dq rows of
// its query heads; it visits KV blocks ascending and, per block, query positions
// ascending (heads ascending within a position), so every gradient element is summed
// in one fixed order whatever the thread count. Scratch is O(sequence length).
#if defined(TITAN_ISA_AVX512)
// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized on _mm512_undefined_*.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cstring>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/kernels/cpu/isa/attention_tile.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {

namespace {
using namespace simd;

struct BwdArgs {
  float *dq, *dk, *dv;
  const float *dout, *lse, *q, *k, *v, *D;
  int H, Hkv;
};

// ds = p * (dp - D) [* (1 - th^2)] * scale over B lanes (in place on dp).
void make_ds(float* ds, const float* p, const float* th, float Di, const attn::Cfg& c) {
  const vf vD = set1(Di), one = set1(1.0f), vs = set1(c.scale);
  for (int j = 0; j < c.B; j += W) {
    vf x = mul(load(p + j), sub(load(ds + j), vD));
    if (th) {
      const vf t = load(th + j);
      x = mul(x, fnmadd(t, t, one));
    }
    store(ds + j, mul(x, vs));
  }
}

void bwd_task(const BwdArgs& a, int64_t t0, int L, int hkv, const attn::Cfg& c) {
  const int Dh = c.Dh, B = c.B, H = a.H, Hkv = a.Hkv, G = H / Hkv;
  const int64_t ldk = int64_t{Hkv} * Dh;
  const int nb = (L + B - 1) / B;
  // K and V of the task's head as [block][Dh][B] (for the score and dP products) and K
  // as contiguous rows [L][Dh] (for dq; rows of (T, Hkv, Dh) are strided).
  thread_local std::vector<float> kt, vt, kr, dkb, dvb;
  kt.assign(static_cast<size_t>(nb) * Dh * B, 0.0f);
  vt.assign(static_cast<size_t>(nb) * Dh * B, 0.0f);
  kr.resize(static_cast<size_t>(L) * Dh);
  dkb.resize(static_cast<size_t>(B) * Dh);
  dvb.resize(static_cast<size_t>(B) * Dh);
  for (int j = 0; j < L; ++j) {
    const float* ks = a.k + (t0 + j) * ldk + hkv * Dh;
    const float* vs = a.v + (t0 + j) * ldk + hkv * Dh;
    float* kd = kt.data() + static_cast<size_t>(j / B) * Dh * B + j % B;
    float* vd = vt.data() + static_cast<size_t>(j / B) * Dh * B + j % B;
    for (int d = 0; d < Dh; ++d) {
      kd[d * B] = ks[d];
      vd[d * B] = vs[d];
    }
    std::memcpy(kr.data() + static_cast<size_t>(j) * Dh, ks, sizeof(float) * Dh);
  }
  // The task's q, dO and dq rows, contiguous as [L][G][Dh] (in (T, H, Dh) they are
  // often 4 KiB apart, i.e. all in one L1 set).
  thread_local std::vector<float> qc, doc, dqc;
  const size_t nrow = static_cast<size_t>(L) * G * Dh;
  qc.resize(nrow);
  doc.resize(nrow);
  dqc.assign(nrow, 0.0f);
  for (int i = 0; i < L; ++i) {
    const int64_t src = ((t0 + i) * H + hkv * G) * Dh;
    std::memcpy(qc.data() + static_cast<size_t>(i) * G * Dh, a.q + src, sizeof(float) * G * Dh);
    std::memcpy(doc.data() + static_cast<size_t>(i) * G * Dh, a.dout + src, sizeof(float) * G * Dh);
  }

  constexpr int kTileRows = 32;  // query rows per tile (16 and 32 measured alike)
  static_assert(kTileRows <= attn::kMaxRows);
  const int Gc = std::min(G, kTileRows);
  const int P = std::max(1, kTileRows / Gc);
  const int Rmax = P * Gc;
  // Per tile row r: scores S, tanh TH, probabilities Pm, ds DS (B lanes each); per key
  // j: Pt, DSt (the transposes, Rmax each).
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(Rmax) * B * 6);
  float* const S0 = buf.data();
  float* const TH0 = S0 + Rmax * B;
  float* const Pm0 = TH0 + Rmax * B;
  float* const DS0 = Pm0 + Rmax * B;
  float* const Pt0 = DS0 + Rmax * B;
  float* const DSt0 = Pt0 + Rmax * B;
  auto S = [&](int r) { return S0 + r * B; };
  auto TH = [&](int r) { return TH0 + r * B; };
  auto Pm = [&](int r) { return Pm0 + r * B; };
  auto DS = [&](int r) { return DS0 + r * B; };
  auto Pt = [&](int j) { return Pt0 + j * Rmax; };
  auto DSt = [&](int j) { return DSt0 + j * Rmax; };
  float one[attn::kMaxB];
  std::fill(one, one + attn::kMaxB, 1.0f);
  const float* kx[attn::kMaxB];
  float* dkx[attn::kMaxB];
  float* dvx[attn::kMaxB];
  const float* ptx[attn::kMaxB];
  const float* dstx[attn::kMaxB];
  int zlo[attn::kMaxB], zhi[attn::kMaxB];

  for (int b = 0; b < nb; ++b) {
    const int kb0 = b * B, nk = std::min(B, L - kb0);
    std::fill(dkb.begin(), dkb.end(), 0.0f);
    std::fill(dvb.begin(), dvb.end(), 0.0f);
    for (int j = 0; j < nk; ++j) {
      kx[j] = kr.data() + static_cast<size_t>(kb0 + j) * Dh;
      dkx[j] = dkb.data() + j * Dh;
      dvx[j] = dvb.data() + j * Dh;
      ptx[j] = Pt(j);
      dstx[j] = DSt(j);
    }
    const float* ktb = kt.data() + static_cast<size_t>(b) * Dh * B;
    const float* vtb = vt.data() + static_cast<size_t>(b) * Dh * B;
    const int qend = attn::last_seeing(kb0 + nk - 1, c.window, c.chunk, L);
    for (int p0 = kb0; p0 <= qend; p0 += P) {
      const int np = std::min(P, qend - p0 + 1);
      for (int g0 = 0; g0 < G; g0 += Gc) {
        const int ng = std::min(Gc, G - g0);
        const float *qx[attn::kMaxRows], *dox[attn::kMaxRows];
        float *dqx[attn::kMaxRows], *sx[attn::kMaxRows], *dsx[attn::kMaxRows];
        const float* dsc[attn::kMaxRows];
        int jlo[attn::kMaxRows], jhi[attn::kMaxRows];
        int R = 0;
        for (int i = 0; i < np; ++i) {
          const int pp = p0 + i;
          for (int g = g0; g < g0 + ng; ++g, ++R) {
            const size_t crow = (static_cast<size_t>(pp) * G + g) * Dh;
            qx[R] = qc.data() + crow;
            dox[R] = doc.data() + crow;
            dqx[R] = dqc.data() + crow;
            sx[R] = S(R);
            dsx[R] = DS(R);
            dsc[R] = DS(R);
            jlo[R] = std::max(attn::first_visible(pp, c.window, c.chunk), kb0) - kb0;
            jhi[R] = std::min(pp, kb0 + nk - 1) - kb0;
          }
        }
        attn::block_dots(sx, qx, R, ktb, Dh, B, c.scale);
        attn::block_dots(dsx, dox, R, vtb, Dh, B, 1.0f);
        int r = 0;
        for (int i = 0; i < np; ++i) {
          for (int g = g0; g < g0 + ng; ++g, ++r) {
            const int64_t row = (t0 + p0 + i) * H + hkv * G + g;
            float* th = c.softcap > 0.0f ? TH(r) : nullptr;
            attn::cap_mask(S(r), th, jlo[r], jhi[r], c);
            attn::exp_shift(Pm(r), S(r), a.lse[row], B);
            make_ds(DS(r), Pm(r), th, a.D[row], c);
          }
        }
        for (int j = 0; j < nk; ++j) {
          for (int rr = 0; rr < R; ++rr) {
            Pt(j)[rr] = Pm(rr)[j];
            DSt(j)[rr] = DS(rr)[j];
          }
          zlo[j] = 0;
          zhi[j] = R - 1;
        }
        attn::axpy_rows(dvx, one, ptx, zlo, zhi, nk, dox, Dh);
        attn::axpy_rows(dkx, one, dstx, zlo, zhi, nk, qx, Dh);
        attn::axpy_rows(dqx, one, dsc, jlo, jhi, R, kx, Dh);
      }
    }
    for (int j = 0; j < nk; ++j) {
      std::memcpy(a.dk + (t0 + kb0 + j) * ldk + hkv * Dh, dkx[j], sizeof(float) * Dh);
      std::memcpy(a.dv + (t0 + kb0 + j) * ldk + hkv * Dh, dvx[j], sizeof(float) * Dh);
    }
  }
  for (int i = 0; i < L; ++i)
    std::memcpy(a.dq + ((t0 + i) * H + hkv * G) * Dh, dqc.data() + static_cast<size_t>(i) * G * Dh,
                sizeof(float) * G * Dh);
}

}  // namespace

void attn_varlen_bwd(float* dq, float* dk, float* dv, float* dsinks, const float* dout,
                     const float* out, const float* lse, const float* q, const float* k,
                     const float* v, const int32_t* cu_seqlens, int S, int64_t T, int H, int Hkv,
                     int Dh, const AttentionParams& p) {
  attn::Cfg c;
  c.Dh = Dh;
  c.B = p.block_size;
  c.scale = p.scale;
  c.window = p.window;
  c.chunk = p.chunk;
  c.softcap = p.softcap;
  c.inv_softcap = p.softcap > 0.0f ? 1.0f / p.softcap : 0.0f;
  std::vector<float> D(static_cast<size_t>(T) * H);
  parallel_for(T, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t)
      for (int h = 0; h < H; ++h)
        D[t * H + h] = attn::dot(dout + (t * H + h) * Dh, out + (t * H + h) * Dh, Dh);
  });
  BwdArgs a{dq, dk, dv, dout, lse, q, k, v, D.data(), H, Hkv};
  std::vector<double> costs;
  for (int s = 0; s < S; ++s) {
    const double L = cu_seqlens[s + 1] - cu_seqlens[s];
    double keys = p.window > 0 ? std::min<double>(L, p.window) : L;
    if (p.chunk > 0) keys = std::min<double>(keys, p.chunk);
    for (int hkv = 0; hkv < Hkv; ++hkv) costs.push_back(L * (keys + p.block_size) + 1.0);
  }
  attn::run_balanced(costs, [&](int64_t u) {
    const int s = static_cast<int>(u / Hkv), hkv = static_cast<int>(u % Hkv);
    const int L = cu_seqlens[s + 1] - cu_seqlens[s];
    if (L > 0) bwd_task(a, cu_seqlens[s], L, hkv, c);
  });
  if (p.sinks && dsinks) {
    // dL/dsink_h = -sum_i p_sink(i,h) D_ih, summed over tokens ascending (double).
    for (int h = 0; h < H; ++h) {
      double acc = 0.0;
      for (int64_t t = 0; t < T; ++t)
        acc += static_cast<double>(attn::exp1(p.sinks[h] - lse[t * H + h])) * D[t * H + h];
      dsinks[h] = static_cast<float>(-acc);
    }
  }
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
