#include "titan/infer/sampling_params.h"

#include <cmath>

#include "titan/core/error.h"

namespace titan::infer {

void SamplingParams::validate() const {
  TITAN_CHECK(n >= 1 && n <= kMaxSamples, "SamplingParams.n must be in [1, {}], got {}", kMaxSamples, n);
  TITAN_CHECK(std::isfinite(temperature) && temperature >= 0,
              "SamplingParams.temperature must be finite and >= 0, got {}", temperature);
  TITAN_CHECK(std::isfinite(top_p) && top_p > 0 && top_p <= 1,
              "SamplingParams.top_p must be in (0, 1], got {}", top_p);
  TITAN_CHECK(top_k >= -1, "SamplingParams.top_k must be >= 0 (or -1 = off), got {}", top_k);
  TITAN_CHECK(std::isfinite(min_p) && min_p >= 0 && min_p <= 1,
              "SamplingParams.min_p must be in [0, 1], got {}", min_p);
  TITAN_CHECK(max_tokens >= 1, "SamplingParams.max_tokens must be >= 1, got {}", max_tokens);
  TITAN_CHECK(logprobs >= 0 && logprobs <= 20, "SamplingParams.logprobs must be in [0, 20], got {}",
              logprobs);
  for (size_t i = 0; i < stop.size(); ++i)
    TITAN_CHECK(!stop[i].empty(), "SamplingParams.stop[{}] is an empty string", i);
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
    case FinishReason::none: break;
  }
  return "";
}

}  // namespace titan::infer
