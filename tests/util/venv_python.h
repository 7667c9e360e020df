// The oracle venv's python (scripts/setup_venv.sh: torch 2.13 CPU, transformers,
// flash-linear-attention, openai, tensorboard): $TITAN_PYTHON, set by CTest from the
// TITAN_VENV cache variable, else that venv's python as configured (a test binary run
// by hand). Tests that need it fail (never skip) when it is absent, so a CI without
// the venv is red rather than silently weaker.
#pragma once
#include <string>

namespace titan::test {

// The path of the venv's python; std::runtime_error if it does not exist.
std::string venv_python();

}  // namespace titan::test
