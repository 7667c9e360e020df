// `titan info`: build and machine facts relevant to reproducibility.
#include <fmt/core.h>

#include "titan/cli/command.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/dispatch.h"

namespace {
void setup_info(CLI::App& app, std::function<int()>& run) {
  run = [] {
    fmt::print("titan {}\nkernel ISA: {}\nthreads: {}\n", TITAN_VERSION,
               titan::kernels::cpu::isa_name(titan::kernels::cpu::cpu_isa()), titan::num_threads());
    return 0;
  };
}
}  // namespace
TITAN_REGISTER_COMMAND(info, "Print version, kernel ISA and thread count", setup_info);
