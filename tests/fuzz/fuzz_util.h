// Helpers of the fuzz harnesses (tests/fuzz/*_fuzz.cpp). Each harness defines
// LLVMFuzzerTestOneInput; the libFuzzer build (build-fuzz, `make fuzz`) links it
// with -fsanitize=fuzzer, and the normal build links it with seed_main.cpp into a
// CTest test that replays the committed seeds (tests/fuzz/corpus/<target>/).
//
// A harness catches titan::Error only: that is how bad input must end. Any other
// exception escapes and aborts the run (libFuzzer reports it as a crash), as do
// sanitizer findings and failed TITAN_FUZZ_ASSERT checks.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "titan/core/error.h"

namespace titan::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A per-process scratch directory under $TMPDIR (or /tmp), created once.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string d = std::string(base && *base ? base : "/tmp") + "/titan_fuzz_" + std::to_string(::getpid());
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d;
  }();
  return dir;
}

// Writes bytes to <scratch>/<name> (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();
  return path;
}

// Runs f; a titan::Error is the expected outcome for bad input.
template <class F>
void expect_ok_or_error(F&& f) {
  try {
    f();
  } catch (const titan::Error&) {
  }
}

}  // namespace titan::fuzz

// A property the harness checks on inputs that were accepted.
#define TITAN_FUZZ_ASSERT(cond)                                                          \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
