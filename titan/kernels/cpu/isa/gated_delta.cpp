// Chunked gated delta rule, forward and backward (per ISA). See titan/kernels/cpu/gated_delta.h.
//
// One (sequence, head) pair is one task. Within a task the forward is a loop over tokens
// calling fwd_row (the row t of the chunked form, from the rows < t of its chunk held in
// a Slot) and close_chunk at each full chunk; the generator's decode step calls the same
// two functions on the sequence's state slot, which is what makes its bits the trainer's.
#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gated_delta.h"
#include "titan/kernels/cpu/isa/reduce.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {

constexpr int64_t C = kGatedDeltaChunk;

// Σ_i a[i]·b[i] with the fixed lane scheme of reduce.h.
inline float dot(const float* a, const float* b, int64_t n) {
  return hsum(reduce4(
      n, zero(),
      [&](vf acc, int64_t i, int c) { return fmadd(load_c(a + i, c, 0.0f), load_c(b + i, c, 0.0f), acc); },
      comb_add));
}

// Σ_d a[d]·b[d]·exp(ga[d] − gb[d]) (the per-channel decayed dot), fixed lane scheme.
inline float dot_decayed(const float* a, const float* b, const float* ga, const float* gb, int64_t n) {
  return hsum(reduce4(
      n, zero(),
      [&](vf acc, int64_t i, int c) {
        const vf e = vexp(sub(load_c(ga + i, c, 0.0f), load_c(gb + i, c, 0.0f)));
        return fmadd(mul(load_c(a + i, c, 0.0f), load_c(b + i, c, 0.0f)), e, acc);
      },
      comb_add));
}

// out[0, V) = init' ± Σ_{r<n} coef[r·cs] · M[r·ld + (0, V)], r ascending, one FMA chain
// per element (init' = init_scale · init when scale_init, init, or 0 when init is null).
// Four vectors at a time hide the FMA latency; the chain of an element does not depend
// on the blocking. out may alias init (each block reads its init before it writes).
template <bool Sub>
void combine(float* out, const float* init, bool scale_init, float init_scale, const float* coef,
             int64_t cs, const float* M, int64_t ld, int64_t n, int64_t V) {
  auto start = [&](int64_t at, int c) -> vf {
    if (!init) return zero();
    const vf x = load_c(init + at, c, 0.0f);
    return scale_init ? mul(set1(init_scale), x) : x;
  };
  auto step = [](vf cr, vf m, vf a) { return Sub ? fnmadd(cr, m, a) : fmadd(cr, m, a); };
  int64_t i = 0;
  for (; i + 4 * W <= V; i += 4 * W) {
    vf a0 = start(i, W), a1 = start(i + W, W), a2 = start(i + 2 * W, W), a3 = start(i + 3 * W, W);
    for (int64_t r = 0; r < n; ++r) {
      const vf cr = set1(coef[r * cs]);
      const float* m = M + r * ld + i;
      a0 = step(cr, load(m), a0);
      a1 = step(cr, load(m + W), a1);
      a2 = step(cr, load(m + 2 * W), a2);
      a3 = step(cr, load(m + 3 * W), a3);
    }
    store(out + i, a0);
    store(out + i + W, a1);
    store(out + i + 2 * W, a2);
    store(out + i + 3 * W, a3);
  }
  for (; i < V; i += W) {
    const int c = static_cast<int>(std::min<int64_t>(W, V - i));
    vf a = start(i, c);
    for (int64_t r = 0; r < n; ++r) a = step(set1(coef[r * cs]), load_c(M + r * ld + i, c, 0.0f), a);
    store_c(out + i, a, c);
  }
}

// Row-blocked combine: for rows t in [0, rows), out[t·ldo + (0, V)] = init_t' ±
// Σ_{r<n} coef[t·rs + r·cs] · M[r·ld + (0, V)], r ascending, one FMA chain per element
// (init_t' = row_scale[t] · init_t when row_scale is not null, init_t, or 0 when init is
// null): the bits of `rows` calls of combine, with six rows sharing each load of M (a
// register block of 6 rows x 2 vectors), so M streams from L1 once per six rows. out may
// alias init with the same stride (a block reads its init before it writes).
template <bool Sub>
void combine_rows(int64_t rows, float* out, int64_t ldo, const float* init, int64_t ldi,
                  const float* row_scale, const float* coef, int64_t rs, int64_t cs,
                  const float* M, int64_t ld, int64_t n, int64_t V) {
  constexpr int R = 6;
  const int64_t blocked = rows - rows % R;
  auto start = [&](int64_t t, int64_t at) -> vf {
    if (!init) return zero();
    const vf x = load(init + t * ldi + at);
    return row_scale ? mul(set1(row_scale[t]), x) : x;
  };
  auto step = [](vf cr, vf m, vf a) { return Sub ? fnmadd(cr, m, a) : fmadd(cr, m, a); };
  int64_t i = 0;
  for (; i + 2 * W <= V; i += 2 * W) {
    for (int64_t t = 0; t < blocked; t += R) {
      vf a[R][2];
      for (int u = 0; u < R; ++u) {
        a[u][0] = start(t + u, i);
        a[u][1] = start(t + u, i + W);
      }
      const float* cb = coef + t * rs;
      for (int64_t r = 0; r < n; ++r) {
        const float* m = M + r * ld + i;
        const vf m0 = load(m), m1 = load(m + W);
        for (int u = 0; u < R; ++u) {
          const vf cr = set1(cb[u * rs + r * cs]);
          a[u][0] = step(cr, m0, a[u][0]);
          a[u][1] = step(cr, m1, a[u][1]);
        }
      }
      for (int u = 0; u < R; ++u) {
        store(out + (t + u) * ldo + i, a[u][0]);
        store(out + (t + u) * ldo + i + W, a[u][1]);
      }
    }
  }
  // The rest, one row at a time: the columns past the blocked rows' vector pairs, and
  // every column of the last rows % R rows.
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t from = t < blocked ? i : 0;
    if (from < V)
      combine<Sub>(out + t * ldo + from, init ? init + t * ldi + from : nullptr, row_scale != nullptr,
                   row_scale ? row_scale[t] : 0.0f, coef + t * rs, cs, M + from, ld, n, V - from);
  }
}

// Row-blocked combine over a row-dependent index range: for rows t in [0, rows),
// out[t·ldo + (0, V)] = (accumulate ? out_t : 0) + Σ_{j ∈ [lo(t), hi(t))} coef[t·rs + j·cs] ·
// M[j·ld + (0, V)], j ascending, one FMA chain per element: the bits of one combine call
// per row. A block of six rows runs the range the six share as one register block (each
// load of M feeds six rows) and the rest of each row's range alone, before or after it,
// so every element still sees its terms in ascending j.
template <class Lo, class Hi>
void combine_ranges(int64_t rows, float* out, int64_t ldo, bool accumulate, const float* coef,
                    int64_t rs, int64_t cs, const float* M, int64_t ld, Lo lo, Hi hi, int64_t V) {
  constexpr int R = 6;
  const int64_t blocked = rows - rows % R;
  int64_t i = 0;
  for (; i + 2 * W <= V; i += 2 * W) {
    for (int64_t t = 0; t < blocked; t += R) {
      vf a[R][2];
      int64_t clo = 0, chi = INT64_MAX;
      for (int u = 0; u < R; ++u) {
        a[u][0] = accumulate ? load(out + (t + u) * ldo + i) : zero();
        a[u][1] = accumulate ? load(out + (t + u) * ldo + i + W) : zero();
        clo = std::max(clo, lo(t + u));
        chi = std::min(chi, hi(t + u));
      }
      chi = std::max(chi, clo);
      for (int u = 0; u < R; ++u) {
        const float* cb = coef + (t + u) * rs;
        const int64_t e = std::min(clo, hi(t + u));
        for (int64_t j = lo(t + u); j < e; ++j) {
          const vf cr = set1(cb[j * cs]);
          a[u][0] = fmadd(cr, load(M + j * ld + i), a[u][0]);
          a[u][1] = fmadd(cr, load(M + j * ld + i + W), a[u][1]);
        }
      }
      for (int64_t j = clo; j < chi; ++j) {
        const vf m0 = load(M + j * ld + i), m1 = load(M + j * ld + i + W);
        for (int u = 0; u < R; ++u) {
          const vf cr = set1(coef[(t + u) * rs + j * cs]);
          a[u][0] = fmadd(cr, m0, a[u][0]);
          a[u][1] = fmadd(cr, m1, a[u][1]);
        }
      }
      for (int u = 0; u < R; ++u) {
        const float* cb = coef + (t + u) * rs;
        for (int64_t j = chi; j < hi(t + u); ++j) {
          const vf cr = set1(cb[j * cs]);
          a[u][0] = fmadd(cr, load(M + j * ld + i), a[u][0]);
          a[u][1] = fmadd(cr, load(M + j * ld + i + W), a[u][1]);
        }
        store(out + (t + u) * ldo + i, a[u][0]);
        store(out + (t + u) * ldo + i + W, a[u][1]);
      }
    }
  }
  // The rest, one row at a time, as in combine_rows.
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t from = t < blocked ? i : 0;
    if (from >= V) continue;
    float* ot = out + t * ldo + from;
    const int64_t l = lo(t), n = std::max<int64_t>(0, hi(t) - l);
    combine<false>(ot, accumulate ? ot : nullptr, false, 0.0f, coef + t * rs + l * cs, cs,
                   M + l * ld + from, ld, n, V - from);
  }
}

inline void fill_zero(float* p, int64_t n) { std::memset(p, 0, sizeof(float) * n); }

// A head's chunk state: S (K, V) at the chunk start, and the rows k (C, K), G (C, Gd),
// u (C, V) of the chunk's tokens so far.
struct Slot {
  float* S;
  float* kb;
  float* Gb;
  float* ub;
};

// Where sequence n's slot lives in the state tensor, and its optional snapshot.
struct SlotIndex {
  const int64_t* slot = nullptr;       // (N) or null: row n
  const int64_t* snap_slot = nullptr;  // (N) or null; < 0: no snapshot for n
  const int64_t* snap_pos = nullptr;   // (N) absolute position of the snapshot
};

inline int64_t head_floats(int64_t K, int64_t V, int64_t Gd) { return K * V + C * (K + Gd + V); }

inline Slot slot_at(float* base, int64_t K, int64_t V, int64_t Gd) {
  return Slot{base, base + K * V, base + K * V + C * K, base + K * V + C * (K + Gd)};
}

// Per-task scratch of fwd_row.
struct RowScratch {
  std::vector<float> qs, kg, qg, p, y, r, coef;
  RowScratch(int64_t K, int64_t V)
      : qs(K), kg(K), qg(K), p(V), y(V), r(V), coef(C + 1) {}
};

// Row j0 of the current chunk (j0 tokens already in it): writes G, k, u of the row into
// the slot and o (V); p_out (V) gets S_0ᵀ(exp(G)⊙k) when not null. See gated_delta.h.
template <bool PC>
void fwd_row(const Slot& s, int64_t j0, const float* q, const float* k, const float* v,
             const float* g, float beta, float scale, float* o, float* p_out, RowScratch& w,
             int64_t K, int64_t V) {
  const int64_t Gd = PC ? K : 1;
  float* Gt = s.Gb + j0 * Gd;
  if constexpr (PC) {
    for_vectors(K, [&](int64_t i, int c) {
      vf x = load_c(g + i, c, 0.0f);
      if (j0 > 0) x = add(load_c(Gt - Gd + i, c, 0.0f), x);
      store_c(Gt + i, x, c);
    });
  } else {
    Gt[0] = j0 > 0 ? Gt[-1] + g[0] : g[0];
  }
  float* kt = s.kb + j0 * K;
  std::memcpy(kt, k, sizeof(float) * K);
  const vf eg_scalar = PC ? zero() : vexp(set1(Gt[0]));
  for_vectors(K, [&](int64_t i, int c) {
    const vf qs = mul(set1(scale), load_c(q + i, c, 0.0f));
    const vf e = PC ? vexp(load_c(Gt + i, c, 0.0f)) : eg_scalar;
    store_c(w.qs.data() + i, qs, c);
    store_c(w.kg.data() + i, mul(e, load_c(kt + i, c, 0.0f)), c);
    store_c(w.qg.data() + i, mul(e, qs), c);
  });
  combine<false>(w.p.data(), nullptr, false, 0.0f, w.kg.data(), 1, s.S, V, K, V);
  combine<false>(w.y.data(), nullptr, false, 0.0f, w.qg.data(), 1, s.S, V, K, V);
  if (p_out) std::memcpy(p_out, w.p.data(), sizeof(float) * V);
  const vf bv = set1(beta);
  for_vectors(V, [&](int64_t i, int c) {
    store_c(w.r.data() + i, mul(bv, sub(load_c(v + i, c, 0.0f), load_c(w.p.data() + i, c, 0.0f))), c);
  });
  // a_tj (j < j0) into coef[0, j0); then c_tj (j <= j0) into coef after the solve.
  float* cf = w.coef.data();
  for (int64_t j = 0; j < j0; ++j) {
    const float* kj = s.kb + j * K;
    if constexpr (PC) {
      cf[j] = beta * dot_decayed(kt, kj, Gt, s.Gb + j * Gd, K);
    } else {
      cf[j] = beta * (sexp(Gt[0] - s.Gb[j]) * dot(kt, kj, K));
    }
  }
  float* ut = s.ub + j0 * V;
  combine<true>(ut, w.r.data(), false, 0.0f, cf, 1, s.ub, V, j0, V);
  for (int64_t j = 0; j <= j0; ++j) {
    const float* kj = s.kb + j * K;
    if constexpr (PC) {
      cf[j] = dot_decayed(w.qs.data(), kj, Gt, s.Gb + j * Gd, K);
    } else {
      cf[j] = sexp(Gt[0] - s.Gb[j]) * dot(w.qs.data(), kj, K);
    }
  }
  combine<false>(o, w.y.data(), false, 0.0f, cf, 1, s.ub, V, j0 + 1, V);
}

// S ← diag(exp(G_{C−1})) S + Σ_j (exp(G_{C−1} − G_j) ⊙ k_j) u_jᵀ at a full chunk.
// wbuf: (C, K) scratch.
template <bool PC>
void close_chunk(const Slot& s, float* wbuf, int64_t K, int64_t V) {
  const int64_t Gd = PC ? K : 1;
  const float* GL = s.Gb + (C - 1) * Gd;
  for (int64_t j = 0; j < C; ++j) {
    const float* kj = s.kb + j * K;
    const float* Gj = s.Gb + j * Gd;
    const vf es = PC ? zero() : vexp(set1(GL[0] - Gj[0]));
    for_vectors(K, [&](int64_t i, int c) {
      const vf e = PC ? vexp(sub(load_c(GL + i, c, 0.0f), load_c(Gj + i, c, 0.0f))) : es;
      store_c(wbuf + j * K + i, mul(e, load_c(kj + i, c, 0.0f)), c);
    });
  }
  const float eL = PC ? 0.0f : sexp(GL[0]);
  for (int64_t d = 0; d < K; ++d) {
    const float sc = PC ? sexp(GL[d]) : eL;
    float* row = s.S + d * V;
    combine<false>(row, row, true, sc, wbuf + d, K, s.ub, V, C, V);
  }
}

template <bool PC>
void fwd_task(int64_t n, int64_t h, float* o, float* chunk_states, float* state,
              const float* q, const float* k, const float* v, const float* g, const float* beta,
              const int64_t* cu, const int64_t* start_pos, const SlotIndex& si,
              const int64_t* chunk_off, int64_t H, int64_t K, int64_t V, float scale,
              std::vector<float>& local, RowScratch& w, std::vector<float>& wbuf) {
  const int64_t Gd = PC ? K : 1;
  const int64_t hf = head_floats(K, V, Gd);
  float* base;
  if (state) {
    base = state + (si.slot ? si.slot[n] : n) * H * hf + h * hf;
  } else {
    local.assign(hf, 0.0f);
    base = local.data();
  }
  const Slot s = slot_at(base, K, V, Gd);
  const int64_t p0 = start_pos ? start_pos[n] : 0;
  // The snapshot: this head's slot as it stands before the token at snap_pos[n].
  const int64_t snap_at = si.snap_slot && si.snap_slot[n] >= 0 ? si.snap_pos[n] - p0 : -1;
  float* snap = snap_at >= 0 ? state + si.snap_slot[n] * H * hf + h * hf : nullptr;
  int64_t j0 = p0 % C;
  int64_t chunk = 0;
  for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
    if (snap && t - cu[n] == snap_at) std::memcpy(snap, base, sizeof(float) * hf);
    if (chunk_states && j0 == 0)
      std::memcpy(chunk_states + ((chunk_off[n] + chunk++) * H + h) * K * V, s.S, sizeof(float) * K * V);
    const int64_t r = t * H + h;
    fwd_row<PC>(s, j0, q + r * K, k + r * K, v + r * V, g + r * Gd, beta[r], scale, o + r * V,
                nullptr, w, K, V);
    if (++j0 == C) {
      close_chunk<PC>(s, wbuf.data(), K, V);
      j0 = 0;
    }
  }
  if (snap && cu[n + 1] - cu[n] == snap_at) std::memcpy(snap, base, sizeof(float) * hf);
}

// Backward scratch of one task.
struct BwdScratch {
  std::vector<float> slot, P, KG, QS, QG, BKG, KD, E, Ak, Cm, du, dudir, dqs, dkk, dG, db, Y, Z,
      dS, dS0, ST, MA, MC, tmp, cf, rowsc, dOc;
  BwdScratch(int64_t K, int64_t V, int64_t Gd)
      : slot(head_floats(K, V, Gd)), P(C * V), KG(C * K), QS(C * K), QG(C * K), BKG(C * K), KD(C * K),
        E(C * C), Ak(C * C), Cm(C * C), du(C * V), dudir(C * V), dqs(C * K), dkk(C * K),
        dG(C * Gd), db(C), Y(C * K), Z(C * K), dS(K * V), dS0(K * V), ST(K * V), MA(C * C), MC(C * C),
        tmp(std::max(K, V)), cf(C), rowsc(K), dOc(C * V) {}
};

// out (cols, rows) = in (rows, cols)ᵀ, in tiles of 16 x 16 (a row-at-a-time transpose
// writes with a stride of `rows` floats and thrashes the cache sets at rows = 128).
inline void transpose(float* out, const float* in, int64_t rows, int64_t cols) {
  constexpr int64_t B = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t c0 = 0; c0 < cols; c0 += B) {
      const int64_t r1 = std::min(rows, r0 + B), c1 = std::min(cols, c0 + B);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
    }
}

template <bool PC>
void bwd_task(int64_t n, int64_t h, float* dq, float* dk, float* dv, float* dg, float* dbeta,
              const float* dout, const float* chunk_states, const float* q, const float* k,
              const float* v, const float* g, const float* beta, const int64_t* cu,
              const int64_t* chunk_off, int64_t H, int64_t K, int64_t V, float scale,
              BwdScratch& b) {
  const int64_t Gd = PC ? K : 1;
  const int64_t len = cu[n + 1] - cu[n];
  const int64_t nc = (len + C - 1) / C;
  bool has_dS = false;
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = cu[n] + c * C;
    const int64_t L = std::min(C, len - c * C);
    const float* S0 = chunk_states + ((chunk_off[n] + c) * H + h) * K * V;
    const Slot s = slot_at(b.slot.data(), K, V, Gd);
    auto row = [&](int64_t t) { return (t0 + t) * H + h; };
    // Recompute the chunk's forward rows G, k, p = S_0ᵀ(exp(G)⊙k) and u with fwd_row's
    // arithmetic (the same bits; the output o is not needed): G and exp(G)⊙k of every
    // row first, p as one row-blocked product, then the UT solve row by row once the
    // pair coefficients Ak below are known.
    float* Gb = s.Gb;
    float* kb = s.kb;
    float* ub = s.ub;
    for (int64_t j = 0; j < L; ++j) {
      const int64_t r = row(j);
      float* Gt = Gb + j * Gd;
      if constexpr (PC) {
        for_vectors(K, [&](int64_t i, int cc) {
          vf x = load_c(g + r * Gd + i, cc, 0.0f);
          if (j > 0) x = add(load_c(Gt - Gd + i, cc, 0.0f), x);
          store_c(Gt + i, x, cc);
        });
      } else {
        Gt[0] = j > 0 ? Gt[-1] + g[r] : g[r];
      }
      std::memcpy(kb + j * K, k + r * K, sizeof(float) * K);
      const vf eg_scalar = PC ? zero() : vexp(set1(Gt[0]));
      for_vectors(K, [&](int64_t i, int cc) {
        const vf e = PC ? vexp(load_c(Gt + i, cc, 0.0f)) : eg_scalar;
        store_c(b.KG.data() + j * K + i, mul(e, load_c(kb + j * K + i, cc, 0.0f)), cc);
      });
    }
    combine_rows<false>(L, b.P.data(), V, nullptr, 0, nullptr, b.KG.data(), K, 1, S0, V, K, V);
    const float* GL = Gb + (L - 1) * Gd;
    // q̂, exp(G)⊙q̂, β exp(G)⊙k, exp(G_L − G_j)⊙k.
    for (int64_t t = 0; t < L; ++t) {
      const int64_t r = row(t);
      const float bt = beta[r];
      const float* Gt = Gb + t * Gd;
      const vf es = PC ? zero() : vexp(set1(Gt[0]));
      const vf el = PC ? zero() : vexp(set1(GL[0] - Gt[0]));
      for_vectors(K, [&](int64_t i, int cc) {
        const vf qs = mul(set1(scale), load_c(q + r * K + i, cc, 0.0f));
        const vf e = PC ? vexp(load_c(Gt + i, cc, 0.0f)) : es;
        const vf e2 = PC ? vexp(sub(load_c(GL + i, cc, 0.0f), load_c(Gt + i, cc, 0.0f))) : el;
        const vf kt = load_c(kb + t * K + i, cc, 0.0f);
        store_c(b.QS.data() + t * K + i, qs, cc);
        store_c(b.QG.data() + t * K + i, mul(e, qs), cc);
        store_c(b.BKG.data() + t * K + i, mul(set1(bt), mul(e, kt)), cc);
        store_c(b.KD.data() + t * K + i, mul(e2, kt), cc);
      });
    }
    // Pair coefficients: Ak[t][j] = Σ_d E k_t k_j (j < t), Cm[t][j] = Σ_d E q̂_t k_j (j <= t).
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t j = 0; j <= t; ++j) {
        if constexpr (PC) {
          b.Ak[t * C + j] = j < t ? dot_decayed(kb + t * K, kb + j * K, Gb + t * K, Gb + j * K, K) : 0.0f;
          b.Cm[t * C + j] = dot_decayed(b.QS.data() + t * K, kb + j * K, Gb + t * K, Gb + j * K, K);
        } else {
          const float e = sexp(Gb[t] - Gb[j]);
          b.E[t * C + j] = e;
          b.Ak[t * C + j] = j < t ? e * dot(kb + t * K, kb + j * K, K) : 0.0f;
          b.Cm[t * C + j] = e * dot(b.QS.data() + t * K, kb + j * K, K);
        }
      }
    }
    // The UT solve of the forward: u_t = β_t (v_t − p_t) − Σ_{j<t} β_t Ak[t][j] u_j.
    for (int64_t t = 0; t < L; ++t) {
      const int64_t r = row(t);
      const float bt = beta[r];
      const vf bv = set1(bt);
      for_vectors(V, [&](int64_t i, int cc) {
        store_c(b.tmp.data() + i,
                mul(bv, sub(load_c(v + r * V + i, cc, 0.0f), load_c(b.P.data() + t * V + i, cc, 0.0f))),
                cc);
      });
      for (int64_t j = 0; j < t; ++j) b.cf[j] = bt * b.Ak[t * C + j];
      combine<true>(ub + t * V, b.tmp.data(), false, 0.0f, b.cf.data(), 1, ub, V, t, V);
    }
    // The chunk's dout rows, contiguous (in dout they lie H·V floats apart, a stride that
    // maps every row to the same cache sets).
    for (int64_t t = 0; t < L; ++t)
      std::memcpy(b.dOc.data() + t * V, dout + row(t) * V, sizeof(float) * V);
    const float* dO = b.dOc.data();
    const int64_t ldo = V;
    // du_dir_j = Σ_{t>=j} Cm[t][j] dO_t (+ dSᵀ kd_j).
    combine_ranges(L, b.dudir.data(), V, false, b.Cm.data(), 1, C, dO, ldo,
                   [](int64_t j) { return j; }, [L](int64_t) { return L; }, V);
    if (has_dS)
      combine_rows<false>(L, b.dudir.data(), V, b.dudir.data(), V, nullptr, b.KD.data(), K, 1,
                          b.dS.data(), V, K, V);
    // Back substitution: du_t = du_dir_t − Σ_{s>t} β_s Ak[s][t] du_s.
    for (int64_t t = L - 1; t >= 0; --t) {
      for (int64_t s2 = t + 1; s2 < L; ++s2) b.cf[s2 - t - 1] = beta[row(s2)] * b.Ak[s2 * C + t];
      combine<true>(b.du.data() + t * V, b.dudir.data() + t * V, false, 0.0f, b.cf.data(), 1,
                    b.du.data() + (t + 1) * V, V, L - 1 - t, V);
    }
    fill_zero(b.dqs.data(), L * K);
    fill_zero(b.dkk.data(), L * K);
    fill_zero(b.dG.data(), L * Gd);
    // r_t = β_t (v_t − p_t): dv, dβ.
    for (int64_t t = 0; t < L; ++t) {
      const int64_t r = row(t);
      const float* dut = b.du.data() + t * V;
      const vf bv = set1(beta[r]);
      for_vectors(V, [&](int64_t i, int cc) {
        const vf d = load_c(dut + i, cc, 0.0f);
        store_c(dv + r * V + i, mul(bv, d), cc);
        store_c(b.tmp.data() + i, sub(load_c(v + r * V + i, cc, 0.0f), load_c(b.P.data() + t * V + i, cc, 0.0f)), cc);
      });
      b.db[t] = dot(dut, b.tmp.data(), V);
    }
    if constexpr (!PC) {
      // Scalar gate: the pair gradients as coefficient matrices, then each dq/dk row as
      // one combination of k / q̂ rows (MA for a_tj = β_t Ak[t][j], MC for c_tj).
      for (int64_t t = 0; t < L; ++t) {
        const float bt = beta[row(t)];
        const float* dOt = dO + t * ldo;
        for (int64_t j = 0; j <= t; ++j) {
          if (j < t) {
            const float da = -dot(b.du.data() + t * V, ub + j * V, V);
            b.db[t] += da * b.Ak[t * C + j];
            const float ga = da * bt;
            b.MA[t * C + j] = ga * b.E[t * C + j];
            const float x = ga * b.Ak[t * C + j];
            b.dG[t] += x;
            b.dG[j] -= x;
          }
          const float dc = dot(dOt, ub + j * V, V);
          b.MC[t * C + j] = dc * b.E[t * C + j];
          if (j < t) {
            const float x = dc * b.Cm[t * C + j];
            b.dG[t] += x;
            b.dG[j] -= x;
          }
        }
      }
      // dq_t = Σ_{j<=t} MC[t][j] k_j; dk_t = Σ_{j<t} MA[t][j] k_j + Σ_{j>t} MA[j][t] k_j
      // + Σ_{j>=t} MC[j][t] q̂_j (in that order).
      auto zero_lo = [](int64_t) -> int64_t { return 0; };
      auto to_end = [L](int64_t) { return L; };
      combine_ranges(L, b.dqs.data(), K, false, b.MC.data(), C, 1, kb, K, zero_lo,
                     [](int64_t t) { return t + 1; }, K);
      combine_ranges(L, b.dkk.data(), K, false, b.MA.data(), C, 1, kb, K, zero_lo,
                     [](int64_t t) { return t; }, K);
      combine_ranges(L, b.dkk.data(), K, true, b.MA.data(), 1, C, kb, K,
                     [](int64_t t) { return t + 1; }, to_end, K);
      combine_ranges(L, b.dkk.data(), K, true, b.MC.data(), 1, C, b.QS.data(), K,
                     [](int64_t t) { return t; }, to_end, K);
    } else {
    // a_tj = β_t Ak[t][j], u_t −= a_tj u_j: da = −du_t·u_j.
    for (int64_t t = 0; t < L; ++t) {
      const float bt = beta[row(t)];
      for (int64_t j = 0; j < t; ++j) {
        const float da = -dot(b.du.data() + t * V, ub + j * V, V);
        b.db[t] += da * b.Ak[t * C + j];
        const float ga = da * bt;
        {
          const float* Gt = Gb + t * K;
          const float* Gj = Gb + j * K;
          float* dkt = b.dkk.data() + t * K;
          float* dkj = b.dkk.data() + j * K;
          float* dGt = b.dG.data() + t * K;
          float* dGj = b.dG.data() + j * K;
          const vf gv = set1(ga);
          for_vectors(K, [&](int64_t i, int cc) {
            const vf e = mul(gv, vexp(sub(load_c(Gt + i, cc, 0.0f), load_c(Gj + i, cc, 0.0f))));
            const vf kt = load_c(kb + t * K + i, cc, 0.0f), kj = load_c(kb + j * K + i, cc, 0.0f);
            store_c(dkt + i, fmadd(e, kj, load_c(dkt + i, cc, 0.0f)), cc);
            store_c(dkj + i, fmadd(e, kt, load_c(dkj + i, cc, 0.0f)), cc);
            const vf x = mul(e, mul(kt, kj));
            store_c(dGt + i, add(load_c(dGt + i, cc, 0.0f), x), cc);
            store_c(dGj + i, sub(load_c(dGj + i, cc, 0.0f), x), cc);
          });
        }
      }
    }
    // o_t += Σ_{j<=t} Cm[t][j] u_j: dc = dO_t·u_j.
    for (int64_t t = 0; t < L; ++t) {
      const float* dOt = dO + t * ldo;
      for (int64_t j = 0; j <= t; ++j) {
        const float dc = dot(dOt, ub + j * V, V);
        {
          const float* Gt = Gb + t * K;
          const float* Gj = Gb + j * K;
          float* dqt = b.dqs.data() + t * K;
          float* dkj = b.dkk.data() + j * K;
          float* dGt = b.dG.data() + t * K;
          float* dGj = b.dG.data() + j * K;
          const float* qt = b.QS.data() + t * K;
          const vf gv = set1(dc);
          for_vectors(K, [&](int64_t i, int cc) {
            const vf e = mul(gv, vexp(sub(load_c(Gt + i, cc, 0.0f), load_c(Gj + i, cc, 0.0f))));
            const vf qv = load_c(qt + i, cc, 0.0f), kj = load_c(kb + j * K + i, cc, 0.0f);
            store_c(dqt + i, fmadd(e, kj, load_c(dqt + i, cc, 0.0f)), cc);
            store_c(dkj + i, fmadd(e, qv, load_c(dkj + i, cc, 0.0f)), cc);
            if (j < t) {
              const vf x = mul(e, mul(qv, kj));
              store_c(dGt + i, add(load_c(dGt + i, cc, 0.0f), x), cc);
              store_c(dGj + i, sub(load_c(dGj + i, cc, 0.0f), x), cc);
            }
          });
        }
      }
    }
    }
    // Y_t = S_0 dO_t, Z_t = S_0 du_t (K each), as combinations of the rows of S_0ᵀ.
    transpose(b.ST.data(), S0, K, V);
    combine_rows<false>(L, b.Y.data(), K, nullptr, 0, nullptr, dO, ldo, 1, b.ST.data(), K, V, K);
    combine_rows<false>(L, b.Z.data(), K, nullptr, 0, nullptr, b.du.data(), V, 1, b.ST.data(), K,
                        V, K);
    // Inter-chunk read o_t += S_0ᵀ(e⊙q̂_t) and the state read in r_t.
    for (int64_t t = 0; t < L; ++t) {
      const int64_t r = row(t);
      const float bt = beta[r];
      const float* Gt = Gb + t * Gd;
      float* dqt = b.dqs.data() + t * K;
      float* dkt = b.dkk.data() + t * K;
      const float* Yt = b.Y.data() + t * K;
      const float* Zt = b.Z.data() + t * K;
      const vf es = PC ? zero() : vexp(set1(Gt[0]));
      const vf nb = set1(-bt);
      vf gacc = zero();
      for_vectors(K, [&](int64_t i, int cc) {
        const vf e = PC ? vexp(load_c(Gt + i, cc, 0.0f)) : es;
        const vf yv = load_c(Yt + i, cc, 0.0f);
        const vf zb = mul(nb, load_c(Zt + i, cc, 0.0f));  // d(e⊙k_t) from r_t
        store_c(dqt + i, fmadd(e, yv, load_c(dqt + i, cc, 0.0f)), cc);
        store_c(dkt + i, fmadd(e, zb, load_c(dkt + i, cc, 0.0f)), cc);
        const vf x = add(mul(load_c(b.QG.data() + t * K + i, cc, 0.0f), yv),
                         mul(mul(e, load_c(kb + t * K + i, cc, 0.0f)), zb));
        if constexpr (PC) {
          float* dGt = b.dG.data() + t * K;
          store_c(dGt + i, add(load_c(dGt + i, cc, 0.0f), x), cc);
        } else {
          gacc = add(gacc, x);
        }
      });
      if constexpr (!PC) b.dG[t] += hsum(gacc);
    }
    // The outgoing state S_L (full chunks that have a later chunk).
    if (has_dS) {
      if constexpr (PC) {
        for (int64_t d = 0; d < K; ++d)
          b.dG[(L - 1) * K + d] += sexp(GL[d]) * dot(S0 + d * V, b.dS.data() + d * V, V);
      } else {
        b.dG[L - 1] += sexp(GL[0]) * dot(S0, b.dS.data(), K * V);
      }
      transpose(b.ST.data(), b.dS.data(), K, V);
      // dS u_j for every j (into Y, free by now).
      combine_rows<false>(L, b.Y.data(), K, nullptr, 0, nullptr, ub, V, 1, b.ST.data(), K, V, K);
      for (int64_t j = 0; j < L; ++j) {
        const float* zj = b.Y.data() + j * K;
        const float* Gj = Gb + j * Gd;
        const vf el = PC ? zero() : vexp(set1(GL[0] - Gj[0]));
        vf gacc = zero();
        for_vectors(K, [&](int64_t i, int cc) {
          const vf e = PC ? vexp(sub(load_c(GL + i, cc, 0.0f), load_c(Gj + i, cc, 0.0f))) : el;
          const vf z = load_c(zj + i, cc, 0.0f);
          float* dkj = b.dkk.data() + j * K;
          store_c(dkj + i, fmadd(e, z, load_c(dkj + i, cc, 0.0f)), cc);
          const vf m = mul(load_c(b.KD.data() + j * K + i, cc, 0.0f), z);
          if constexpr (PC) {
            float* dGL = b.dG.data() + (L - 1) * K;
            float* dGj = b.dG.data() + j * K;
            store_c(dGL + i, add(load_c(dGL + i, cc, 0.0f), m), cc);
            store_c(dGj + i, sub(load_c(dGj + i, cc, 0.0f), m), cc);
          } else {
            gacc = add(gacc, m);
          }
        });
        if constexpr (!PC) {
          const float m = hsum(gacc);
          b.dG[L - 1] += m;
          b.dG[j] -= m;
        }
      }
    }
    // dS_0 = diag(exp(G_L)) dS + Σ_t (e⊙q̂_t) dO_tᵀ − Σ_t β_t (e⊙k_t) du_tᵀ.
    if (has_dS)
      for (int64_t d = 0; d < K; ++d) b.rowsc[d] = sexp(PC ? GL[d] : GL[0]);
    combine_rows<false>(K, b.dS0.data(), V, has_dS ? b.dS.data() : nullptr, V,
                        has_dS ? b.rowsc.data() : nullptr, b.QG.data(), 1, K, dO, ldo, L, V);
    combine_rows<true>(K, b.dS0.data(), V, b.dS0.data(), V, nullptr, b.BKG.data(), 1, K,
                       b.du.data(), V, L, V);
    std::swap(b.dS, b.dS0);
    has_dS = true;
    // dg = reverse cumulative sum of dG within the chunk; write dq, dk, dβ.
    for (int64_t t = L - 1; t >= 0; --t) {
      const int64_t r = row(t);
      if (t < L - 1)
        for (int64_t d = 0; d < Gd; ++d) b.dG[t * Gd + d] += b.dG[(t + 1) * Gd + d];
      std::memcpy(dg + r * Gd, b.dG.data() + t * Gd, sizeof(float) * Gd);
      const vf sv = set1(scale);
      for_vectors(K, [&](int64_t i, int cc) {
        store_c(dq + r * K + i, mul(sv, load_c(b.dqs.data() + t * K + i, cc, 0.0f)), cc);
      });
      std::memcpy(dk + r * K, b.dkk.data() + t * K, sizeof(float) * K);
      dbeta[r] = b.db[t];
    }
  }
}

std::vector<int64_t> chunk_offsets(const int64_t* cu, int64_t N) {
  std::vector<int64_t> off(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) off[n + 1] = off[n] + (cu[n + 1] - cu[n] + C - 1) / C;
  return off;
}

}  // namespace

void gated_delta_fwd(float* o, float* chunk_states, float* state, const float* q, const float* k,
                     const float* v, const float* g, const float* beta, const int64_t* cu_seqlens,
                     const int64_t* start_pos, const int64_t* slot, const int64_t* snap_slot,
                     const int64_t* snap_pos, int64_t N, int64_t H, int64_t K, int64_t V,
                     bool per_channel, float scale) {
  const std::vector<int64_t> off = chunk_offsets(cu_seqlens, N);
  const SlotIndex si{slot, snap_slot, snap_pos};
  parallel_for(N * H, [&](int64_t a, int64_t e) {
    std::vector<float> local;
    RowScratch w(K, V);
    std::vector<float> wbuf(C * K);
    for (int64_t i = a; i < e; ++i) {
      if (per_channel)
        fwd_task<true>(i / H, i % H, o, chunk_states, state, q, k, v, g, beta, cu_seqlens,
                       start_pos, si, off.data(), H, K, V, scale, local, w, wbuf);
      else
        fwd_task<false>(i / H, i % H, o, chunk_states, state, q, k, v, g, beta, cu_seqlens,
                        start_pos, si, off.data(), H, K, V, scale, local, w, wbuf);
    }
  });
}

void gated_delta_bwd(float* dq, float* dk, float* dv, float* dg, float* dbeta, const float* dout,
                     const float* chunk_states, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, const int64_t* cu_seqlens, int64_t N,
                     int64_t H, int64_t K, int64_t V, bool per_channel, float scale) {
  const std::vector<int64_t> off = chunk_offsets(cu_seqlens, N);
  parallel_for(N * H, [&](int64_t a, int64_t e) {
    BwdScratch b(K, V, per_channel ? K : 1);
    for (int64_t i = a; i < e; ++i) {
      if (per_channel)
        bwd_task<true>(i / H, i % H, dq, dk, dv, dg, dbeta, dout, chunk_states, q, k, v, g, beta,
                       cu_seqlens, off.data(), H, K, V, scale, b);
      else
        bwd_task<false>(i / H, i % H, dq, dk, dv, dg, dbeta, dout, chunk_states, q, k, v, g, beta,
                        cu_seqlens, off.data(), H, K, V, scale, b);
    }
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
