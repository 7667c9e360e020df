// Public attention entry points: argument checks (one-line titan::Error naming the
// function, the argument, expected vs actual), default scale, then the per-ISA
// drivers (titan/kernels/cpu/isa/attention_{fwd,bwd}.cpp) chosen by TITAN_DISPATCH.
#include "titan/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(void, attn_cache_write_i32,
                  (float* k_cache, float* v_cache, const float* k, const float* v,
                   const int32_t* slots, int64_t T, int Hkv, int Dh, int B))
TITAN_DECLARE_ISA(void, attn_cache_write_i64,
                  (float* k_cache, float* v_cache, const float* k, const float* v,
                   const int64_t* slots, int64_t T, int Hkv, int Dh, int B))
TITAN_DECLARE_ISA(void, attn_paged_fwd,
                  (float* out, float* lse, const float* q, const float* k_cache,
                   const float* v_cache, const int32_t* block_tables,
                   const int32_t* seq_of_token, const int32_t* pos_of_token, int64_t T, int H,
                   int Hkv, int Dh, int num_seqs, int max_blocks_per_seq,
                   const titan::kernels::cpu::AttentionParams& p))
TITAN_DECLARE_ISA(void, attn_varlen_fwd,
                  (float* out, float* lse, const float* q, const float* k, const float* v,
                   const int32_t* cu_seqlens, int S, int64_t T, int H, int Hkv, int Dh,
                   const titan::kernels::cpu::AttentionParams& p))
TITAN_DECLARE_ISA(void, attn_varlen_bwd,
                  (float* dq, float* dk, float* dv, float* dsinks, const float* dout,
                   const float* out, const float* lse, const float* q, const float* k,
                   const float* v, const int32_t* cu_seqlens, int S, int64_t T, int H, int Hkv,
                   int Dh, const titan::kernels::cpu::AttentionParams& p))

namespace titan::kernels::cpu {
namespace {

void check_block_size(const char* fn, int B) {
  TITAN_CHECK(B >= 16 && B <= 256 && B % 16 == 0,
              "{}: block_size must be a multiple of 16 in [16, 256], got {}", fn, B);
}

void check_heads(const char* fn, int64_t T, int Hkv, int Dh) {
  TITAN_CHECK(T >= 0, "{}: T must be >= 0, got {}", fn, T);
  TITAN_CHECK(Hkv >= 1, "{}: Hkv must be >= 1, got {}", fn, Hkv);
  TITAN_CHECK(Dh >= 8 && Dh <= 256 && Dh % 8 == 0,
              "{}: Dh must be a multiple of 8 in [8, 256], got {}", fn, Dh);
}

// Checks sizes and params; returns params with the default scale resolved.
AttentionParams check_common(const char* fn, int64_t T, int H, int Hkv, int Dh,
                             const AttentionParams& p) {
  check_heads(fn, T, Hkv, Dh);
  TITAN_CHECK(H >= 1, "{}: H must be >= 1, got {}", fn, H);
  TITAN_CHECK(H % Hkv == 0, "{}: H ({}) must be a multiple of Hkv ({})", fn, H, Hkv);
  check_block_size(fn, p.block_size);
  TITAN_CHECK(p.window >= 0, "{}: params.window must be >= 0 (0 = off), got {}", fn, p.window);
  TITAN_CHECK(p.chunk >= 0, "{}: params.chunk must be >= 0 (0 = off), got {}", fn, p.chunk);
  TITAN_CHECK(std::isfinite(p.softcap) && p.softcap >= 0.0f,
              "{}: params.softcap must be finite and >= 0 (0 = off), got {}", fn, p.softcap);
  TITAN_CHECK(std::isfinite(p.scale) && p.scale >= 0.0f,
              "{}: params.scale must be finite and >= 0 (0 = 1/sqrt(Dh)), got {}", fn, p.scale);
  AttentionParams r = p;
  if (r.scale == 0.0f) r.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  return r;
}

void check_cu_seqlens(const char* fn, const int32_t* cu, int S, int64_t T) {
  TITAN_CHECK(S >= 0, "{}: S must be >= 0, got {}", fn, S);
  TITAN_CHECK(cu != nullptr, "{}: cu_seqlens is null", fn);
  TITAN_CHECK(cu[0] == 0, "{}: cu_seqlens[0] must be 0, got {}", fn, cu[0]);
  for (int s = 0; s < S; ++s)
    TITAN_CHECK(cu[s + 1] >= cu[s],
                "{}: cu_seqlens must be non-decreasing, but cu_seqlens[{}] = {} < cu_seqlens[{}] = {}",
                fn, s + 1, cu[s + 1], s, cu[s]);
  TITAN_CHECK(cu[S] == T, "{}: cu_seqlens[S={}] must equal T = {}, got {}", fn, S, T, cu[S]);
}

void check_ptrs(const char* fn, int64_t T, std::initializer_list<std::pair<const char*, const void*>> ps) {
  if (T == 0) return;
  for (const auto& [name, ptr] : ps) TITAN_CHECK(ptr != nullptr, "{}: {} is null with T = {}", fn, name, T);
}

template <typename Idx>
void check_slots(const char* fn, const Idx* slots, int64_t T, int64_t num_blocks, int B) {
  const int64_t n = num_blocks * B;
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK(static_cast<int64_t>(slots[t]) < n,
                "{}: slot_mapping[{}] = {} is out of range [0, num_blocks * block_size = {})", fn,
                t, static_cast<int64_t>(slots[t]), n);
}

}  // namespace

void attention_varlen_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                          const int32_t* cu_seqlens, int S, int64_t T, int H, int Hkv, int Dh,
                          const AttentionParams& params) {
  const char* fn = "attention_varlen_fwd";
  const AttentionParams p = check_common(fn, T, H, Hkv, Dh, params);
  check_cu_seqlens(fn, cu_seqlens, S, T);
  check_ptrs(fn, T, {{"out", out}, {"lse", lse}, {"q", q}, {"k", k}, {"v", v}});
  if (T == 0) return;
  TITAN_DISPATCH(attn_varlen_fwd, out, lse, q, k, v, cu_seqlens, S, T, H, Hkv, Dh, p);
}

void attention_varlen_bwd(float* dq, float* dk, float* dv, float* dsinks, const float* dout,
                          const float* out, const float* lse, const float* q, const float* k,
                          const float* v, const int32_t* cu_seqlens, int S, int64_t T, int H,
                          int Hkv, int Dh, const AttentionParams& params) {
  const char* fn = "attention_varlen_bwd";
  const AttentionParams p = check_common(fn, T, H, Hkv, Dh, params);
  check_cu_seqlens(fn, cu_seqlens, S, T);
  check_ptrs(fn, T,
             {{"dq", dq}, {"dk", dk}, {"dv", dv}, {"dout", dout}, {"out", out}, {"lse", lse},
              {"q", q}, {"k", k}, {"v", v}});
  if (T == 0) {
    if (p.sinks && dsinks)
      for (int h = 0; h < H; ++h) dsinks[h] = 0.0f;
    return;
  }
  TITAN_DISPATCH(attn_varlen_bwd, dq, dk, dv, dsinks, dout, out, lse, q, k, v, cu_seqlens, S, T,
                 H, Hkv, Dh, p);
}

namespace {
// Argument checks shared by both slot-index widths of kv_cache_write.
template <typename Slot>
void check_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                       const Slot* slot_mapping, int64_t T, int Hkv, int Dh, int64_t num_blocks,
                       int block_size) {
  const char* fn = "kv_cache_write";
  check_heads(fn, T, Hkv, Dh);
  check_block_size(fn, block_size);
  TITAN_CHECK(num_blocks >= 1, "{}: num_blocks must be >= 1, got {}", fn, num_blocks);
  check_ptrs(fn, T,
             {{"k_cache", k_cache}, {"v_cache", v_cache}, {"k", k}, {"v", v},
              {"slot_mapping", slot_mapping}});
  check_slots(fn, slot_mapping, T, num_blocks, block_size);
}
}  // namespace

void kv_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int32_t* slot_mapping, int64_t T, int Hkv, int Dh, int64_t num_blocks,
                    int block_size) {
  check_cache_write(k_cache, v_cache, k, v, slot_mapping, T, Hkv, Dh, num_blocks, block_size);
  TITAN_DISPATCH(attn_cache_write_i32, k_cache, v_cache, k, v, slot_mapping, T, Hkv, Dh,
                 block_size);
}

void kv_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int64_t* slot_mapping, int64_t T, int Hkv, int Dh, int64_t num_blocks,
                    int block_size) {
  check_cache_write(k_cache, v_cache, k, v, slot_mapping, T, Hkv, Dh, num_blocks, block_size);
  TITAN_DISPATCH(attn_cache_write_i64, k_cache, v_cache, k, v, slot_mapping, T, Hkv, Dh,
                 block_size);
}

void attention_paged_fwd(float* out, float* lse, const float* q, const float* k_cache,
                         const float* v_cache, const int32_t* block_tables,
                         const int32_t* seq_of_token, const int32_t* pos_of_token, int64_t T,
                         int H, int Hkv, int Dh, int num_seqs, int max_blocks_per_seq,
                         int64_t num_blocks, const AttentionParams& params) {
  const char* fn = "attention_paged_fwd";
  const AttentionParams p = check_common(fn, T, H, Hkv, Dh, params);
  check_ptrs(fn, T,
             {{"out", out}, {"q", q}, {"k_cache", k_cache}, {"v_cache", v_cache},
              {"block_tables", block_tables}, {"seq_of_token", seq_of_token},
              {"pos_of_token", pos_of_token}});
  if (T == 0) return;
  TITAN_CHECK(num_seqs >= 1, "{}: num_seqs must be >= 1, got {}", fn, num_seqs);
  TITAN_CHECK(max_blocks_per_seq >= 1, "{}: max_blocks_per_seq must be >= 1, got {}", fn,
              max_blocks_per_seq);
  TITAN_CHECK(num_blocks >= 1, "{}: num_blocks must be >= 1, got {}", fn, num_blocks);
  const int B = p.block_size;
  const int64_t max_pos = int64_t{max_blocks_per_seq} * B;
  // Per sequence, the range of logical blocks its tokens read.
  std::vector<int> bmin(num_seqs, max_blocks_per_seq), bmax(num_seqs, -1);
  for (int64_t t = 0; t < T; ++t) {
    const int s = seq_of_token[t], pos = pos_of_token[t];
    TITAN_CHECK(s >= 0 && s < num_seqs, "{}: seq_of_token[{}] = {} is out of range [0, num_seqs = {})",
                fn, t, s, num_seqs);
    TITAN_CHECK(pos >= 0 && pos < max_pos,
                "{}: pos_of_token[{}] = {} is beyond the block table (expected [0, "
                "max_blocks_per_seq * block_size = {}))",
                fn, t, pos, max_pos);
    int first = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
    if (p.chunk > 0) first = std::max(first, pos / p.chunk * p.chunk);
    first /= B;
    bmin[s] = std::min(bmin[s], first);
    bmax[s] = std::max(bmax[s], pos / B);
  }
  for (int s = 0; s < num_seqs; ++s)
    for (int b = bmin[s]; b <= bmax[s]; ++b) {
      const int32_t e = block_tables[int64_t{s} * max_blocks_per_seq + b];
      TITAN_CHECK(e >= 0 && e < num_blocks,
                  "{}: block_tables[{}][{}] = {} is out of range [0, num_blocks = {}) (read by a "
                  "token of sequence {})",
                  fn, s, b, e, num_blocks, s);
    }
  TITAN_DISPATCH(attn_paged_fwd, out, lse, q, k_cache, v_cache, block_tables, seq_of_token,
                 pos_of_token, T, H, Hkv, Dh, num_seqs, max_blocks_per_seq, p);
}

}  // namespace titan::kernels::cpu
