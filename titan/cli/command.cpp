#include "titan/cli/command.h"

namespace titan::cli {
std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> r;
  return r;
}
}  // namespace titan::cli
