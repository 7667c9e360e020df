// Fuzz target: the request lines of `titan generate --input` (infer::parse_request_jsonl)
// and the validation of the sampling values they give.
#include "tests/fuzz/fuzz_util.h"
#include "titan/infer/request_jsonl.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_ok_or_error([&] {
    infer::SamplingParams defaults;
    defaults.max_tokens = 16;
    for (const infer::JsonlRequest& r : infer::parse_request_jsonl(fuzz::as_text(data, size), defaults, "fuzz.jsonl")) {
      TITAN_FUZZ_ASSERT(r.prompt.has_value() || r.prompt_token_ids.size() < size);
      for (int32_t id : r.prompt_token_ids) TITAN_FUZZ_ASSERT(id >= 0);
      fuzz::expect_ok_or_error([&] { r.params.validate(); });
    }
  });
  return 0;
}
