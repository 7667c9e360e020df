#include "titan/cli/command.h"

#include <fmt/core.h>

#include <optional>

#include "titan/config/command_fields.h"
#include "titan/config/recipes.h"
#include "titan/config/resolve.h"

namespace titan::cli {
std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> r;
  return r;
}

void add_job_options(CLI::App& app, JobCommandArgs& args) {
  app.add_option("--recipe", args.recipe, "named recipe to start from (see --list-recipes)")
      ->capture_default_str();
  app.add_option("--config", args.config_file, "TOML file whose fields override the recipe");
  app.add_flag("--print-config", args.print_config, "print the resolved config as TOML and exit");
  app.add_flag("--list-recipes", args.list_recipes, "list the named recipes and exit");
  app.allow_extras();
}

int run_job_command(const JobCommandArgs& args, const CLI::App& app,
                    const std::function<int(const config::JobConfig&)>& run_job) {
  if (args.list_recipes) {
    for (const auto& r : config::list_recipes()) fmt::print("{:<20} {}\n", r.name, r.doc);
    return 0;
  }
  std::optional<std::string> toml;
  if (!args.config_file.empty()) toml = args.config_file;
  const std::vector<std::string> overrides = config::overrides_from_args(app.remaining());
  const config::JobConfig cfg = config::resolve_config(args.recipe, toml, overrides);
  std::vector<std::string> keys;
  for (const std::string& o : overrides) keys.push_back(o.substr(0, o.find('=')));
  config::refuse_unused_fields(cfg, config::make_recipe(args.recipe), app.get_name(), keys);
  if (args.print_config) {
    fmt::print("{}", config::config_to_toml(cfg));
    return 0;
  }
  return run_job(cfg);
}
}  // namespace titan::cli
