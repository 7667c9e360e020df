#include "tests/util/venv_python.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace titan::test {

std::string venv_python() {
  const char* p = std::getenv("TITAN_PYTHON");
  const std::string py = p && *p ? std::string(p) : std::string(TITAN_VENV_PYTHON);
  if (!std::filesystem::exists(py))
    throw std::runtime_error("oracle venv python not found at " + py + " (run `make venv`)");
  return py;
}

}  // namespace titan::test
