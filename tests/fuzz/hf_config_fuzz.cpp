// Fuzz target: Hugging Face config.json (parse_json with its nesting bound, then
// parse_hf_config). Property (hf_config.h: export round-trips the file): an accepted
// config written with hf_config_to_json parses again to the same JSON.
#include "tests/fuzz/fuzz_util.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/core/json_read.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_ok_or_error([&] {
    const nlohmann::json j = parse_json(fuzz::as_text(data, size), "config.json fuzz");
    const HFConfig c = parse_hf_config(j, "fuzz");
    const nlohmann::json out = hf_config_to_json(c);
    const nlohmann::json again = hf_config_to_json(parse_hf_config(out, "fuzz (written)"));
    TITAN_FUZZ_ASSERT(again == out);
    (void)out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
  return 0;
}
