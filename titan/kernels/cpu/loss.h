// Cross-entropy over the vocabulary, fused with the output projection (raw fp32).
//
// The fused kernels compute logits = hidden · weightᵀ kVocabChunk columns at a time
// (and kCeRowTile rows at a time) with gemm_f32 (gemm_f32_panels for a repacked weight,
// the same bits), so the full (T, V) logits are never materialised, and feed each
// chunk to the vocabulary log-sum-exp algorithm of softmax.h (vocab_chunk_stats +
// merge_chunk_stats, chunks in ascending order). Since
// gemm_f32 gives row m the same bits whatever M/N blocking, a row's loss, lse and
// logprob have the same bits as logprobs_from_logits on the full gemm_f32 logits, for
// any row count, row position or thread count (DESIGN.md §1.2).
//
// Per row t with scaled logits z = logits[t] · inv_temperature and y = targets[t]:
//   lse[t]  = logsumexp(z)
//   loss[t] = −log_softmax(z)[y] + z_loss_coef · lse[t]²     (0 when y == ignore_index)
// z-loss: PaLM (Chowdhery et al. 2022), log²Z regulariser. No reduction over rows.
#pragma once
#include <cstdint>

#include "titan/kernels/cpu/softmax.h"  // kVocabChunk, the vocabulary log-sum-exp algorithm

namespace titan::kernels::cpu {

// Rows per logits tile of the fused kernels: scratch is kCeRowTile × kVocabChunk floats
// (16 MiB). Each tile's GEMM packs the vocabulary chunk of the weight again, so larger
// tiles pack it fewer times (1024 vs 256 rows: 4x fewer packs; the step time of the
// `small` model moved less than this VM's noise). Does not change any bit of loss/lse/logprobs/dhidden/dweight
// (rows are independent; dweight's K chain over rows continues across tiles).
inline constexpr int64_t kCeRowTile = 1024;

// Fused forward. loss_per_row (T), lse (T) (may be null), hidden (T, D), weight (V, D)
// (nn.Linear layout), targets (T) int64 or int32 in [0, V) or == ignore_index.
// Throws titan::Error on bad sizes, null pointers, a target outside [0, V) that is not
// ignore_index, z_loss_coef < 0 or not finite, inv_temperature not finite and > 0.
void cross_entropy_fwd(float* loss_per_row, float* lse, const float* hidden, const float* weight,
                       const int64_t* targets, int64_t T, int64_t D, int64_t V,
                       int64_t ignore_index, float z_loss_coef, float inv_temperature);
void cross_entropy_fwd(float* loss_per_row, float* lse, const float* hidden, const float* weight,
                       const int32_t* targets, int64_t T, int64_t D, int64_t V,
                       int64_t ignore_index, float z_loss_coef, float inv_temperature);

// Fused backward. Recomputes each logits chunk, forms
//   g = dloss[t] · τ⁻¹ · (softmax(z)·(1 + 2·z_loss_coef·lse[t]) − onehot(y))   (0 if ignored)
// and accumulates, chunk by chunk in ascending order:
//   dhidden (T, D) = Σ_c g_c · W_c          (overwritten; null to skip)
//   dweight (V, D) (+)= gᵀ · hidden         (accumulate_dweight: += else =; null to skip)
// dloss (T) = d(total)/d(loss_per_row[t]); lse (T) from cross_entropy_fwd. Deterministic:
// the row tiles and chunks are fixed, independent of the thread count.
void cross_entropy_bwd(float* dhidden, float* dweight, const float* dloss, const float* hidden,
                       const float* weight, const int64_t* targets, const float* lse, int64_t T,
                       int64_t D, int64_t V, int64_t ignore_index, float z_loss_coef,
                       float inv_temperature, bool accumulate_dweight);
void cross_entropy_bwd(float* dhidden, float* dweight, const float* dloss, const float* hidden,
                       const float* weight, const int32_t* targets, const float* lse, int64_t T,
                       int64_t D, int64_t V, int64_t ignore_index, float z_loss_coef,
                       float inv_temperature, bool accumulate_dweight);

// Fused forward AND backward in one pass over the logits, for a dloss (T) known before
// the forward (e.g. the trainer's 1 / tokens with a summed loss): the outputs of
// cross_entropy_fwd (loss_per_row, lse) and of cross_entropy_bwd (dhidden, dweight
// overwritten; either may be null), with the same bits, while the logits are computed
// once instead of twice (the backward above recomputes them: one of the LM head's four
// GEMMs, 1/4 of its FLOPs). A row tile (cross_entropy_fused_tile_rows rows) keeps its
// logits for the whole vocabulary until its lse is known: scratch of rows × V floats.
// The chains of dhidden (over chunks) and dweight (over rows, across tiles) keep their
// order, so the tile size changes no bit. Errors as cross_entropy_fwd / cross_entropy_bwd.
// Tile rows: kCeFusedScratchBytes / (4 V), rounded down to a multiple of
// kCeFusedRowQuantum when T exceeds it, but at least kCeFusedMinRows and at most
// min(T, kCeRowTile); >= 1. The tile's rows are the K of the dweight GEMM, so a row count just
// past a multiple of the GEMM's K chunk would leave a short last chunk whose C tiles cost a whole
// extra pass. Fewer rows reread and rewrite all of dweight (V × D) too often: at a Qwen3 vocabulary
// tiles of 512-1024 rows are the fastest (docs/benchmarks-history.md, Training). With more than
// one row tile, weight is first repacked
// into the GEMM's panel layouts (gemm_pack_panels for the logits, gemm_pack_panels_nn per
// vocabulary chunk for dhidden, if wanted), so that no tile packs it again: about V D floats per
// layout (V and D rounded up to the panel width), only while that is at most
// packed_weight_max_bytes (default kCePackedWeightMaxBytes; e.g. V = 32000, D = 512:
// 131 MB for both; a Qwen3 vocabulary at D = 1024, 1.2 GB, packs per tile).
// Same bits either way (gemm.h).
inline constexpr int64_t kCeFusedScratchBytes = int64_t{64} << 20;
inline constexpr int64_t kCeFusedMinRows = 512;
inline constexpr int64_t kCeFusedRowQuantum = 256;
inline constexpr int64_t kCePackedWeightMaxBytes = int64_t{512} << 20;
int64_t cross_entropy_fused_tile_rows(int64_t T, int64_t V);
void cross_entropy_fwd_bwd(float* loss_per_row, float* lse, float* dhidden, float* dweight,
                           const float* dloss, const float* hidden, const float* weight,
                           const int64_t* targets, int64_t T, int64_t D, int64_t V,
                           int64_t ignore_index, float z_loss_coef, float inv_temperature,
                           int64_t packed_weight_max_bytes = kCePackedWeightMaxBytes);

// Log-probabilities of targets from hidden states through the same chunk path:
// out_logprobs (T), out_lse (T) (may be null). Same bits as gemm_f32 full logits +
// logprobs_from_logits. targets in [0, V).
void logprobs_from_hidden(float* out_logprobs, float* out_lse, const float* hidden,
                          const float* weight, const int64_t* targets, int64_t T, int64_t D,
                          int64_t V, float inv_temperature);
void logprobs_from_hidden(float* out_logprobs, float* out_lse, const float* hidden,
                          const float* weight, const int32_t* targets, int64_t T, int64_t D,
                          int64_t V, float inv_temperature);
// The same with the weight in its panel layout (gemm_pack_panels of the (V, D) weight,
// gemm_panels_size(V, D) floats): the generator's LM head once repacked. Same bits as
// logprobs_from_hidden on the weight it was packed from.
void logprobs_from_hidden_panels(float* out_logprobs, float* out_lse, const float* hidden,
                                 const float* panels, const int64_t* targets, int64_t T, int64_t D,
                                 int64_t V, float inv_temperature);

// The composed twins over materialised logits (T, V): the reference for the fused
// kernels and the path for callers that already hold logits. Same formulas; the forward
// gives the same bits as cross_entropy_fwd on gemm_f32 logits.
void cross_entropy_logits_fwd(float* loss_per_row, float* lse, const float* logits,
                              const int64_t* targets, int64_t T, int64_t V, int64_t ignore_index,
                              float z_loss_coef, float inv_temperature);
// dlogits (T, V) = g above (overwritten).
void cross_entropy_logits_bwd(float* dlogits, const float* dloss, const float* logits,
                              const int64_t* targets, const float* lse, int64_t T, int64_t V,
                              int64_t ignore_index, float z_loss_coef, float inv_temperature);

}  // namespace titan::kernels::cpu
