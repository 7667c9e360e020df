// `titan train`: resolve a job config (recipe -> --config TOML -> --section.field
// overrides -> model transforms) and run it.
//
//   titan train --list-recipes
//   titan train --list-transforms
//   titan train --list-overrides
//   titan train --recipe shakespeare_char --print-config
//   titan train --recipe debugmodel --config my.toml --training.steps=100 --optimizer.lr 3e-4
#include <fmt/core.h>

#include <memory>

#include "titan/cli/command.h"
#include "titan/config/transforms.h"
#include "titan/core/error.h"
#include "titan/models/common/overrides.h"
#include "titan/train/trainer.h"

namespace {

void setup_train(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<titan::cli::JobCommandArgs>();
  args->recipe = "debugmodel";
  titan::cli::add_job_options(app, *args);
  auto list_transforms = std::make_shared<bool>(false);
  app.add_flag("--list-transforms", *list_transforms, "list the model-config transforms and exit");
  auto list_overrides = std::make_shared<bool>(false);
  app.add_flag("--list-overrides", *list_overrides,
               "list the component overrides (model.overrides = [\"component=impl[:glob]\"]) and exit");
  app.footer(
      "Any config field can be overridden: --section.field=value or --section.field value\n"
      "(e.g. --training.steps=100 --model.transforms=untie_embeddings). Precedence:\n"
      "command line > --config file > recipe. --print-config shows every field with its doc.\n");
  CLI::App* self = &app;
  run = [args, list_transforms, list_overrides, self]() -> int {
    if (*list_overrides) {
      fmt::print("{:<10} {:<10} {:<8} {:<10} {}\n", "component", "impl", "default", "generator", "what (applies to)");
      for (const auto& o : titan::models::list_overrides())
        fmt::print("{:<10} {:<10} {:<8} {:<10} {} ({})\n", o.component, o.impl, o.is_default ? "yes" : "",
                   o.generator ? "yes" : "refused", o.doc, o.applies_to);
      return 0;
    }
    if (*list_transforms) {
      for (const auto& t : titan::config::list_transforms())
        fmt::print("{:<20} {}\n", t.name, t.doc);
      return 0;
    }
    return titan::cli::run_job_command(*args, *self, titan::train::run_train_job);
  };
}

}  // namespace
TITAN_REGISTER_COMMAND(train,
                       "Train a model from a recipe, TOML config and --section.field overrides",
                       setup_train);
