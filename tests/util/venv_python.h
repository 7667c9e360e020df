// The oracle venv's python (scripts/setup_venv.sh: torch 2.13 CPU, transformers,
// flash-linear-attention, openai, tensorboard): $TITAN_PYTHON, set by CTest from the
// TITAN_VENV cache variable (or compiled in as TITAN_VENV_PYTHON where CTest's
// environment does not reach the test). Tests that need it fail (never skip) when it is absent,
// so a CI without the venv is red rather than silently weaker.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace titan::test {

inline std::string venv_python() {
  const char* p = std::getenv("TITAN_PYTHON");
#ifdef TITAN_VENV_PYTHON
  std::string py = p ? p : std::string(TITAN_VENV_PYTHON);
#else
  std::string py = p ? p : (std::string(TITAN_SOURCE_DIR) + "/.venv/bin/python");
#endif
  if (!std::filesystem::exists(py))
    throw std::runtime_error("oracle venv python not found at " + py + " (run `make venv`)");
  return py;
}

}  // namespace titan::test
