// Path of the `titan` program for tests that run the CLI: $TITAN_BUILD/titan (set by
// CTest), else the build folder above the test binary (build/tests/x -> build/titan).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace titan::test {

inline std::string titan_exe() {
  if (const char* b = std::getenv("TITAN_BUILD")) return std::string(b) + "/titan";
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "titan").string();
}

}  // namespace titan::test
