// `titan rl`: resolve a job config (recipe -> --config TOML -> --section.field
// overrides -> model transforms) and run RL post-training (titan/rl/controller.h).
// Running it again on a dump folder that holds a checkpoint resumes the run.
//
//   titan rl --list-recipes
//   titan rl --recipe alphabet_sort_grpo --print-config
//   titan rl --recipe alphabet_sort_grpo --training.steps=10 --generator.temperature 0.8
#include <memory>

#include "titan/cli/command.h"
#include "titan/rl/controller.h"

namespace {

void setup_rl(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<titan::cli::JobCommandArgs>();
  args->recipe = "alphabet_sort_grpo";
  titan::cli::add_job_options(app, *args);
  app.footer(
      "Any config field can be overridden: --section.field=value or --section.field value\n"
      "(e.g. --training.steps=20 --rl.group_size=4 --generator.kv_block_size=16). Precedence:\n"
      "command line > --config file > recipe. Outputs go to job.dump_folder (metrics.jsonl,\n"
      "rollouts.jsonl, checkpoint/); an existing checkpoint there is resumed.\n");
  CLI::App* self = &app;
  run = [args, self]() -> int {
    return titan::cli::run_job_command(*args, *self, titan::rl::run_rl_job);
  };
}

}  // namespace
TITAN_REGISTER_COMMAND(
    rl, "RL post-training (GRPO/DAPO) from a recipe, TOML config and --section.field overrides",
    setup_rl);
