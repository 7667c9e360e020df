// `titan rl`: resolve a job config (recipe -> --config TOML -> --section.field
// overrides -> model transforms) and run RL post-training (titan/rl/controller.h).
// Running it again on a dump folder that holds a checkpoint resumes the run.
//
//   titan rl --list-recipes
//   titan rl --recipe alphabet_sort_grpo --print-config
//   titan rl --recipe alphabet_sort_grpo --training.steps=10 --generator.temperature 0.8
#include <fmt/core.h>

#include <optional>
#include <string>
#include <vector>

#include "titan/cli/command.h"
#include "titan/config/recipes.h"
#include "titan/config/resolve.h"
#include "titan/rl/controller.h"

namespace {

struct RlArgs {
  std::string recipe = "alphabet_sort_grpo";
  std::string config_file;
  bool print_config = false;
  bool list_recipes = false;
};

void setup_rl(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<RlArgs>();
  app.add_option("--recipe", args->recipe, "named recipe to start from (see --list-recipes)")->capture_default_str();
  app.add_option("--config", args->config_file, "TOML file whose fields override the recipe");
  app.add_flag("--print-config", args->print_config, "print the resolved config as TOML and exit");
  app.add_flag("--list-recipes", args->list_recipes, "list the named recipes and exit");
  app.footer(
      "Any config field can be overridden: --section.field=value or --section.field value\n"
      "(e.g. --training.steps=20 --rl.group_size=4 --generator.kv_block_size=16). Precedence:\n"
      "command line > --config file > recipe. Outputs go to job.dump_folder (metrics.jsonl,\n"
      "rollouts.jsonl, checkpoint/); an existing checkpoint there is resumed.\n");
  app.allow_extras();
  CLI::App* self = &app;
  run = [args, self]() -> int {
    if (args->list_recipes) {
      for (const auto& r : titan::config::list_recipes()) fmt::print("{:<20} {}\n", r.name, r.doc);
      return 0;
    }
    std::optional<std::string> toml;
    if (!args->config_file.empty()) toml = args->config_file;
    const std::vector<std::string> overrides = titan::config::overrides_from_args(self->remaining());
    const titan::config::JobConfig cfg = titan::config::resolve_config(args->recipe, toml, overrides);
    if (args->print_config) {
      fmt::print("{}", titan::config::config_to_toml(cfg));
      return 0;
    }
    return titan::rl::run_rl_job(cfg);
  };
}

}  // namespace
TITAN_REGISTER_COMMAND(rl, "RL post-training (GRPO/DAPO) from a recipe, TOML config and --section.field overrides",
                       setup_rl);
