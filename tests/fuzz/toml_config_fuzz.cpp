// Fuzz target: the TOML job config (toml++ through config::apply_toml_text).
// Property (toml_io.h: reading a printed config back gives an equal struct): an
// accepted document's config, printed and read into a fresh config, prints the same.
#include "tests/fuzz/fuzz_util.h"
#include "titan/config/job_config.h"
#include "titan/config/resolve.h"
#include "titan/config/toml_io.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_ok_or_error([&] {
    config::JobConfig c;
    config::apply_toml_text(c, fuzz::as_text(data, size), "fuzz.toml");
    const std::string printed = config::config_to_toml(c);
    config::JobConfig again;
    config::apply_toml_text(again, printed, "printed.toml");
    TITAN_FUZZ_ASSERT(config::config_to_toml(again) == printed);
    config::validate(c);
  });
  return 0;
}
