// Softmax-family row kernels and the vocabulary log-sum-exp algorithm (per ISA).
// See titan/kernels/cpu/softmax.h for the contract.
#include <cmath>
#include <limits>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/reduce.h"
#include "titan/kernels/cpu/isa/vocab_lse.h"
#include "titan/kernels/cpu/softmax.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd;

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

VocabStats vocab_chunk_stats(const float* x, int64_t n, float inv_temperature) {
  const vf it = set1(inv_temperature);
  // Masked lanes hold -inf: neutral for max, and vexp(-inf - m) = 0 for the sum.
  const float m = hmax(reduce4(
      n, set1(kNegInf),
      [&](vf a, int64_t i, int c) { return max(a, mul(load_c(x + i, c, kNegInf), it)); },
      comb_max));
  if (m == kNegInf) return {kNegInf, 0.0f};
  const vf mv = set1(m);
  const float s = hsum(reduce4(
      n, zero(),
      [&](vf a, int64_t i, int c) {
        return add(a, vexp(sub(mul(load_c(x + i, c, kNegInf), it), mv)));
      },
      comb_add));
  return {m, s};
}

VocabStats merge_chunk_stats(VocabStats acc, VocabStats chunk) {
  const float m = acc.max > chunk.max ? acc.max : chunk.max;
  if (m == kNegInf) return {kNegInf, 0.0f};
  const float s = acc.sum * sexp(acc.max - m) + chunk.sum * sexp(chunk.max - m);
  return {m, s};
}

VocabStats vocab_row_stats(const float* x, int64_t V, float inv_temperature) {
  VocabStats st = vocab_chunk_stats(x, std::min(V, kVocabChunk), inv_temperature);
  for (int64_t c0 = kVocabChunk; c0 < V; c0 += kVocabChunk)
    st = TITAN_ISA_NS::merge_chunk_stats(st, vocab_chunk_stats(x + c0, std::min(V - c0, kVocabChunk),
                                                 inv_temperature));
  return st;
}

void logprobs_from_logits(float* out_logprobs, float* out_lse, const float* logits,
                          const int64_t* targets, int64_t T, int64_t V, float inv_temperature) {
  parallel_for_grain(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* x = logits + t * V;
      const VocabStats st = vocab_row_stats(x, V, inv_temperature);
      out_logprobs[t] = vocab_logprob(st, x[targets[t]] * inv_temperature);
      if (out_lse) out_lse[t] = vocab_lse(st);
    }
  });
}

void logsumexp_fwd(float* out, const float* x, int64_t T, int64_t V) {
  parallel_for_grain(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) out[t] = vocab_lse(vocab_row_stats(x + t * V, V, 1.0f));
  });
}

void softmax_fwd(float* out, const float* x, int64_t T, int64_t V) {
  parallel_for_grain(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* xr = x + t * V;
      float* yr = out + t * V;
      const VocabStats st = vocab_row_stats(xr, V, 1.0f);
      const vf mv = set1(st.max), inv = set1(1.0f / st.sum);
      for_vectors(V, [&](int64_t i, int c) {
        store_c(yr + i, mul(vexp(sub(load_c(xr + i, c, 0.0f), mv)), inv), c);
      });
    }
  });
}

void softmax_bwd(float* dx, const float* dout, const float* y, int64_t T, int64_t V) {
  parallel_for_grain(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* g = dout + t * V;
      const float* yr = y + t * V;
      float* d = dx + t * V;
      const float dot = hsum(reduce4(
          V, zero(),
          [&](vf a, int64_t i, int c) {
            return fmadd(load_c(g + i, c, 0.0f), load_c(yr + i, c, 0.0f), a);
          },
          comb_add));
      const vf dv = set1(dot);
      for_vectors(V, [&](int64_t i, int c) {
        store_c(d + i, mul(load_c(yr + i, c, 0.0f), sub(load_c(g + i, c, 0.0f), dv)), c);
      });
    }
  });
}

void log_softmax_fwd(float* out, float* lse, const float* x, int64_t T, int64_t V) {
  parallel_for_grain(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* xr = x + t * V;
      float* yr = out + t * V;
      const VocabStats st = vocab_row_stats(xr, V, 1.0f);
      if (lse) lse[t] = vocab_lse(st);
      // Lane-wise the same two roundings as vocab_logprob: (z - max) - log(sum).
      const vf mv = set1(st.max), ls = set1(std::log(st.sum));
      for_vectors(V, [&](int64_t i, int c) {
        store_c(yr + i, sub(sub(load_c(xr + i, c, 0.0f), mv), ls), c);
      });
    }
  });
}

void log_softmax_bwd(float* dx, const float* dout, const float* logp, int64_t T, int64_t V) {
  parallel_for_grain(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* g = dout + t * V;
      const float* lp = logp + t * V;
      float* d = dx + t * V;
      const float sum = hsum(reduce4(
          V, zero(), [&](vf a, int64_t i, int c) { return add(a, load_c(g + i, c, 0.0f)); },
          comb_add));
      const vf sv = set1(sum);
      for_vectors(V, [&](int64_t i, int c) {
        store_c(d + i, fnmadd(vexp(load_c(lp + i, c, 0.0f)), sv, load_c(g + i, c, 0.0f)), c);
      });
    }
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
