// `titan train`: resolve a job config (recipe -> --config TOML -> --section.field
// overrides -> model transforms) and run it.
//
//   titan train --list-recipes
//   titan train --list-transforms
//   titan train --recipe shakespeare_char --print-config
//   titan train --recipe debugmodel --config my.toml --training.steps=100 --optimizer.lr 3e-4
#include <fmt/core.h>

#include <optional>
#include <string>
#include <vector>

#include "titan/cli/command.h"
#include "titan/config/recipes.h"
#include "titan/config/resolve.h"
#include "titan/config/transforms.h"
#include "titan/core/error.h"
#include "titan/train/trainer.h"

namespace {

struct TrainArgs {
  std::string recipe = "debugmodel";
  std::string config_file;
  bool print_config = false;
  bool list_recipes = false;
  bool list_transforms = false;
};

int list_recipes() {
  for (const auto& r : titan::config::list_recipes()) fmt::print("{:<20} {}\n", r.name, r.doc);
  return 0;
}

int list_transforms() {
  for (const auto& t : titan::config::list_transforms()) fmt::print("{:<20} {}\n", t.name, t.doc);
  return 0;
}

void setup_train(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<TrainArgs>();
  app.add_option("--recipe", args->recipe, "named recipe to start from (see --list-recipes)")
      ->capture_default_str();
  app.add_option("--config", args->config_file, "TOML file whose fields override the recipe");
  app.add_flag("--print-config", args->print_config, "print the resolved config as TOML and exit");
  app.add_flag("--list-recipes", args->list_recipes, "list the named recipes and exit");
  app.add_flag("--list-transforms", args->list_transforms, "list the model-config transforms and exit");
  app.footer(
      "Any config field can be overridden: --section.field=value or --section.field value\n"
      "(e.g. --training.steps=100 --model.transforms=untie_embeddings). Precedence:\n"
      "command line > --config file > recipe. --print-config shows every field with its doc.\n");
  app.allow_extras();
  CLI::App* self = &app;
  run = [args, self]() -> int {
    if (args->list_recipes) return list_recipes();
    if (args->list_transforms) return list_transforms();
    std::optional<std::string> toml;
    if (!args->config_file.empty()) toml = args->config_file;
    const std::vector<std::string> overrides = titan::config::overrides_from_args(self->remaining());
    const titan::config::JobConfig cfg = titan::config::resolve_config(args->recipe, toml, overrides);
    if (args->print_config) {
      fmt::print("{}", titan::config::config_to_toml(cfg));
      return 0;
    }
    return titan::train::run_train_job(cfg);
  };
}

}  // namespace
TITAN_REGISTER_COMMAND(train, "Train a model from a recipe, TOML config and --section.field overrides",
                       setup_train);
