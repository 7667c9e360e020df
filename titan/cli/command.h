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

namespace titan::cli {

using CommandSetup = std::function<void(CLI::App& app, std::function<int()>& run)>;

struct CommandInfo {
  std::string name, help;
  CommandSetup setup;
};

std::vector<CommandInfo>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string help, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

}  // namespace titan::cli

#define TITAN_REGISTER_COMMAND(name, help, setup) \
  static ::titan::cli::CommandRegistrar titan_cmd_registrar_##name(#name, help, setup)
