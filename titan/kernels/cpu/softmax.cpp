// Softmax-family entry points: argument validation and run-time ISA dispatch.
#include "titan/kernels/cpu/softmax.h"

#include <cmath>
#include <vector>

#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

TITAN_DECLARE_ISA(titan::kernels::cpu::VocabStats, vocab_chunk_stats,
                  (const float* x, int64_t n, float inv_temperature))
TITAN_DECLARE_ISA(titan::kernels::cpu::VocabStats, merge_chunk_stats,
                  (titan::kernels::cpu::VocabStats acc, titan::kernels::cpu::VocabStats chunk))
TITAN_DECLARE_ISA(titan::kernels::cpu::VocabStats, vocab_row_stats,
                  (const float* x, int64_t V, float inv_temperature))
TITAN_DECLARE_ISA(void, logprobs_from_logits,
                  (float* out_logprobs, float* out_lse, const float* logits,
                   const int64_t* targets, int64_t T, int64_t V, float inv_temperature))
TITAN_DECLARE_ISA(void, logsumexp_fwd, (float* out, const float* x, int64_t T, int64_t V))
TITAN_DECLARE_ISA(void, softmax_fwd, (float* out, const float* x, int64_t T, int64_t V))
TITAN_DECLARE_ISA(void, softmax_bwd,
                  (float* dx, const float* dout, const float* y, int64_t T, int64_t V))
TITAN_DECLARE_ISA(void, log_softmax_fwd,
                  (float* out, float* lse, const float* x, int64_t T, int64_t V))
TITAN_DECLARE_ISA(void, log_softmax_bwd,
                  (float* dx, const float* dout, const float* logp, int64_t T, int64_t V))

namespace titan::kernels::cpu {

namespace {
void check_rows(const char* fn, int64_t T, int64_t V) {
  TITAN_CHECK(T >= 0, "{}: T must be >= 0, got {}", fn, T);
  TITAN_CHECK(V >= 1, "{}: V must be >= 1, got {}", fn, V);
}
void check_ptr(const char* fn, const char* name, const void* p, int64_t T) {
  TITAN_CHECK(p != nullptr || T == 0, "{}: {} must not be null", fn, name);
}
void check_inv_temperature(const char* fn, float it) {
  TITAN_CHECK(std::isfinite(it) && it > 0.0f,
              "{}: inv_temperature must be finite and > 0, got {}", fn, it);
}
template <typename I>
void check_targets(const char* fn, const I* targets, int64_t T, int64_t V) {
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK(targets[t] >= 0 && static_cast<int64_t>(targets[t]) < V,
                "{}: targets[{}] = {} is outside [0, V = {})", fn, t,
                static_cast<int64_t>(targets[t]), V);
}
}  // namespace

VocabStats vocab_chunk_stats(const float* x, int64_t n, float inv_temperature) {
  TITAN_CHECK(n >= 1 && n <= kVocabChunk, "vocab_chunk_stats: n must be in [1, {}], got {}",
              kVocabChunk, n);
  check_ptr("vocab_chunk_stats", "x", x, n);
  check_inv_temperature("vocab_chunk_stats", inv_temperature);
  return TITAN_DISPATCH(vocab_chunk_stats, x, n, inv_temperature);
}

VocabStats merge_chunk_stats(VocabStats acc, VocabStats chunk) {
  return TITAN_DISPATCH(merge_chunk_stats, acc, chunk);
}

VocabStats vocab_row_stats(const float* x, int64_t V, float inv_temperature) {
  TITAN_CHECK(V >= 1, "vocab_row_stats: V must be >= 1, got {}", V);
  check_ptr("vocab_row_stats", "x", x, V);
  check_inv_temperature("vocab_row_stats", inv_temperature);
  return TITAN_DISPATCH(vocab_row_stats, x, V, inv_temperature);
}

float vocab_lse(VocabStats s) { return s.max + std::log(s.sum); }

float vocab_logprob(VocabStats s, float scaled_logit) {
  return (scaled_logit - s.max) - std::log(s.sum);
}

void logprobs_from_logits(float* out_logprobs, float* out_lse, const float* logits,
                          const int64_t* targets, int64_t T, int64_t V, float inv_temperature) {
  constexpr const char* fn = "logprobs_from_logits";
  check_rows(fn, T, V);
  check_ptr(fn, "out_logprobs", out_logprobs, T);
  check_ptr(fn, "logits", logits, T);
  check_ptr(fn, "targets", targets, T);
  check_inv_temperature(fn, inv_temperature);
  check_targets(fn, targets, T, V);
  TITAN_DISPATCH(logprobs_from_logits, out_logprobs, out_lse, logits, targets, T, V,
                 inv_temperature);
}

void logprobs_from_logits(float* out_logprobs, float* out_lse, const float* logits,
                          const int32_t* targets, int64_t T, int64_t V, float inv_temperature) {
  check_ptr("logprobs_from_logits", "targets", targets, T);
  const std::vector<int64_t> t64(targets, targets + (T > 0 ? T : 0));
  logprobs_from_logits(out_logprobs, out_lse, logits, t64.data(), T, V, inv_temperature);
}

void logsumexp_fwd(float* out, const float* x, int64_t T, int64_t V) {
  check_rows("logsumexp_fwd", T, V);
  check_ptr("logsumexp_fwd", "out", out, T);
  check_ptr("logsumexp_fwd", "x", x, T);
  TITAN_DISPATCH(logsumexp_fwd, out, x, T, V);
}

void softmax_fwd(float* out, const float* x, int64_t T, int64_t V) {
  check_rows("softmax_fwd", T, V);
  check_ptr("softmax_fwd", "out", out, T);
  check_ptr("softmax_fwd", "x", x, T);
  TITAN_DISPATCH(softmax_fwd, out, x, T, V);
}

void softmax_bwd(float* dx, const float* dout, const float* y, int64_t T, int64_t V) {
  check_rows("softmax_bwd", T, V);
  check_ptr("softmax_bwd", "dx", dx, T);
  check_ptr("softmax_bwd", "dout", dout, T);
  check_ptr("softmax_bwd", "y", y, T);
  TITAN_DISPATCH(softmax_bwd, dx, dout, y, T, V);
}

void log_softmax_fwd(float* out, float* lse, const float* x, int64_t T, int64_t V) {
  check_rows("log_softmax_fwd", T, V);
  check_ptr("log_softmax_fwd", "out", out, T);
  check_ptr("log_softmax_fwd", "x", x, T);
  TITAN_DISPATCH(log_softmax_fwd, out, lse, x, T, V);
}

void log_softmax_bwd(float* dx, const float* dout, const float* logp, int64_t T, int64_t V) {
  check_rows("log_softmax_bwd", T, V);
  check_ptr("log_softmax_bwd", "dx", dx, T);
  check_ptr("log_softmax_bwd", "dout", dout, T);
  check_ptr("log_softmax_bwd", "logp", logp, T);
  TITAN_DISPATCH(log_softmax_bwd, dx, dout, logp, T, V);
}

}  // namespace titan::kernels::cpu
