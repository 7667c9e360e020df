// Fuzz target: command-line overrides (one argument per input line) through
// overrides_from_args and resolve_config("debugmodel", ...): value syntax of every
// field type, unknown keys, transforms and validation.
// Property: an accepted config, printed and read back, prints the same.
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "titan/config/resolve.h"
#include "titan/config/toml_io.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = fuzz::as_text(data, size);
  std::vector<std::string> args;
  for (size_t pos = 0; pos <= in.size() && args.size() < 64;) {
    size_t end = in.find('\n', pos);
    if (end == std::string_view::npos) end = in.size();
    args.emplace_back(in.substr(pos, end - pos));
    pos = end + 1;
  }
  fuzz::expect_ok_or_error([&] {
    const config::JobConfig c = config::resolve_config("debugmodel", std::nullopt, config::overrides_from_args(args));
    const std::string printed = config::config_to_toml(c);
    config::JobConfig again;
    config::apply_toml_text(again, printed, "printed.toml");
    TITAN_FUZZ_ASSERT(config::config_to_toml(again) == printed);
  });
  return 0;
}
