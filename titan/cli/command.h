// Subcommand registry for the `titan` program. Each subcommand lives in its own
// file under titan/cli/ and registers itself with a static TITAN_REGISTER_COMMAND:
//
//   static void setup_tokenize(CLI::App& app, std::function<int()>& run) { ... }
//   TITAN_REGISTER_COMMAND(tokenize, "Tokenize text read from stdin", setup_tokenize);
//
// setup adds options to `app` (a CLI11 subcommand) and sets `run`, which is called
// if the subcommand is chosen and returns the exit code. titan::Error thrown by run
// is printed as one line "error: ..." and exits with code 2.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace titan::config {
struct JobConfig;
}

namespace titan::cli {

using CommandSetup = std::function<void(CLI::App& app, std::function<int()>& run)>;

struct CommandInfo {
  std::string name, help;
  CommandSetup setup;
};

std::vector<CommandInfo>& command_registry();

// The options of the config-driven commands (train, rl): --recipe, --config,
// --print-config, --list-recipes; every other argument is a --section.field override.
struct JobCommandArgs {
  std::string recipe;
  std::string config_file;
  bool print_config = false;
  bool list_recipes = false;
};
// Adds those options to app (recipe's current value is the shown default) and allows extras.
void add_job_options(CLI::App& app, JobCommandArgs& args);
// --list-recipes or --print-config: prints and returns 0. Else resolves the config
// (recipe -> TOML -> app's extra arguments as overrides -> transforms) and returns
// run_job(config). titan::Error from resolution propagates (one line, exit 2).
int run_job_command(const JobCommandArgs& args, const CLI::App& app,
                    const std::function<int(const config::JobConfig&)>& run_job);

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string help, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

}  // namespace titan::cli

#define TITAN_REGISTER_COMMAND(name, help, setup) \
  static ::titan::cli::CommandRegistrar titan_cmd_registrar_##name(#name, help, setup)
