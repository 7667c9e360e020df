// Attention forward drivers (one ISA): KV-cache writes, the paged forward, and the
// packed (trainer) forward, which repacks each sequence's K/V into the paged layout
// (blocks aligned at position 0) and then runs the very same paged driver with an
// identity block table. Arguments were validated by titan/kernels/cpu/attention.cpp.
#if defined(TITAN_ISA_AVX512)
// GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized on _mm512_undefined_*.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cstring>
#include <limits>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/kernels/cpu/isa/attention_tile.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {

namespace {

template <typename Idx>
void cache_write(float* k_cache, float* v_cache, const float* k, const float* v, const Idx* slots,
                 int64_t T, int Hkv, int Dh, int B) {
  parallel_for(T, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t slot = static_cast<int64_t>(slots[t]);
      if (slot < 0) continue;
      const int64_t blk = slot / B, off = slot % B;
      for (int h = 0; h < Hkv; ++h) {
        const float* ks = k + (t * Hkv + h) * Dh;
        float* kd = k_cache + (blk * Hkv + h) * Dh * B + off;
        for (int d = 0; d < Dh; ++d) kd[static_cast<int64_t>(d) * B] = ks[d];
        std::memcpy(v_cache + ((blk * Hkv + h) * B + off) * Dh, v + (t * Hkv + h) * Dh,
                    sizeof(float) * Dh);
      }
    }
  });
}

attn::Cfg make_cfg(int Dh, const AttentionParams& p) {
  attn::Cfg c;
  c.Dh = Dh;
  c.B = p.block_size;
  c.scale = p.scale;
  c.window = p.window;
  c.chunk = p.chunk;
  c.softcap = p.softcap;
  c.inv_softcap = p.softcap > 0.0f ? 1.0f / p.softcap : 0.0f;
  return c;
}

// The one forward driver behind both public entry points. tables[s] points at the
// block table row of sequence s. Work units: a run of up to P consecutive positions
// of one sequence x one KV head x up to kTileRows of its query heads (P x heads <= kTileRows).
void paged_run(float* out, float* lse, const float* q, const float* k_cache,
               const float* v_cache, const int32_t* const* tables, const int32_t* seq,
               const int32_t* pos, int64_t T, int H, int Hkv, const float* sinks,
               const attn::Cfg& c) {
  const int Dh = c.Dh, B = c.B, G = H / Hkv;
  // Query rows per tile: enough rows share each pass over the K/V blocks that the
  // K/V traffic stays small next to the FMAs (64 measured best here, with 32 close).
  constexpr int kTileRows = 64;
  static_assert(kTileRows <= attn::kMaxRows);
  const int Gc = std::min(G, kTileRows);
  const int P = std::max(1, kTileRows / Gc);
  struct Unit {
    int64_t t0;
    int np, hkv, g0, ng;
  };
  std::vector<Unit> units;
  std::vector<double> costs;
  for (int64_t t = 0; t < T;) {
    int np = 1;
    while (np < P && t + np < T && seq[t + np] == seq[t] && pos[t + np] == pos[t + np - 1] + 1)
      ++np;
    const double keys = pos[t + np - 1] - attn::first_visible(pos[t], c.window, c.chunk) + 1 + B;
    for (int hkv = 0; hkv < Hkv; ++hkv)
      for (int g0 = 0; g0 < G; g0 += Gc) {
        const int ng = std::min(Gc, G - g0);
        units.push_back({t, np, hkv, g0, ng});
        costs.push_back(keys * np * ng * (Dh + 16));
      }
    t += np;
  }
  const float kNegInf = -std::numeric_limits<float>::infinity();
  attn::run_balanced(costs, [&](int64_t u) {
    thread_local std::vector<const float*> kp, vp;
    const Unit& un = units[u];
    const int32_t* table = tables[seq[un.t0]];
    attn::QRow rows[attn::kMaxRows];
    int R = 0;
    for (int i = 0; i < un.np; ++i) {
      const int64_t t = un.t0 + i;
      for (int g = un.g0; g < un.g0 + un.ng; ++g) {
        const int h = un.hkv * G + g;
        rows[R++] = {q + (t * H + h) * Dh, out + (t * H + h) * Dh, lse ? lse + t * H + h : nullptr,
                     pos[t], sinks ? sinks[h] : kNegInf};
      }
    }
    const int bmin = attn::first_visible(pos[un.t0], c.window, c.chunk) / B;
    const int bmax = pos[un.t0 + un.np - 1] / B;
    if (static_cast<int>(kp.size()) < bmax + 1) {
      kp.resize(bmax + 1);
      vp.resize(bmax + 1);
    }
    for (int b = bmin; b <= bmax; ++b) {
      const int64_t phys = table[b];
      kp[b] = k_cache + (phys * Hkv + un.hkv) * Dh * B;
      vp[b] = v_cache + (phys * Hkv + un.hkv) * B * Dh;
    }
    attn::fwd_tile(rows, R, kp.data(), vp.data(), Dh, c);
  });
}

}  // namespace

void attn_cache_write_i32(float* k_cache, float* v_cache, const float* k, const float* v,
                          const int32_t* slots, int64_t T, int Hkv, int Dh, int B) {
  cache_write(k_cache, v_cache, k, v, slots, T, Hkv, Dh, B);
}
void attn_cache_write_i64(float* k_cache, float* v_cache, const float* k, const float* v,
                          const int64_t* slots, int64_t T, int Hkv, int Dh, int B) {
  cache_write(k_cache, v_cache, k, v, slots, T, Hkv, Dh, B);
}

void attn_paged_fwd(float* out, float* lse, const float* q, const float* k_cache,
                    const float* v_cache, const int32_t* block_tables, const int32_t* seq_of_token,
                    const int32_t* pos_of_token, int64_t T, int H, int Hkv, int Dh, int num_seqs,
                    int max_blocks_per_seq, const AttentionParams& p) {
  std::vector<const int32_t*> tables(num_seqs);
  for (int s = 0; s < num_seqs; ++s) tables[s] = block_tables + int64_t{s} * max_blocks_per_seq;
  paged_run(out, lse, q, k_cache, v_cache, tables.data(), seq_of_token, pos_of_token, T, H, Hkv,
            p.sinks, make_cfg(Dh, p));
}

void attn_varlen_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                     const int32_t* cu_seqlens, int S, int64_t T, int H, int Hkv, int Dh,
                     const AttentionParams& p) {
  const int B = p.block_size;
  // Blocks of sequence s: [blk_off[s], blk_off[s+1]) of one contiguous "cache".
  std::vector<int64_t> blk_off(S + 1, 0);
  for (int s = 0; s < S; ++s)
    blk_off[s + 1] = blk_off[s] + (cu_seqlens[s + 1] - cu_seqlens[s] + B - 1) / B;
  const int64_t nblocks = blk_off[S];
  std::vector<float> k_cache(static_cast<size_t>(nblocks) * Hkv * Dh * B, 0.0f);
  std::vector<float> v_cache(static_cast<size_t>(nblocks) * Hkv * B * Dh, 0.0f);
  std::vector<int64_t> slots(T);
  std::vector<int32_t> seq(T), pos(T), table(nblocks);
  for (int s = 0; s < S; ++s)
    for (int64_t t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) {
      const int32_t i = static_cast<int32_t>(t - cu_seqlens[s]);
      seq[t] = s;
      pos[t] = i;
      slots[t] = (blk_off[s] + i / B) * B + i % B;
    }
  for (int64_t b = 0; b < nblocks; ++b) table[b] = static_cast<int32_t>(b);
  cache_write(k_cache.data(), v_cache.data(), k, v, slots.data(), T, Hkv, Dh, B);
  std::vector<const int32_t*> tables(S);
  for (int s = 0; s < S; ++s) tables[s] = table.data() + blk_off[s];
  paged_run(out, lse, q, k_cache.data(), v_cache.data(), tables.data(), seq.data(), pos.data(), T,
            H, Hkv, p.sinks, make_cfg(Dh, p));
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
