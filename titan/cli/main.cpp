// The `titan` command-line program: titan <subcommand> [options].
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <system_error>

#include "titan/cli/command.h"
#include "titan/core/error.h"
#include "titan/kernels/cpu/dispatch.h"

int main(int argc, char** argv) {
  using namespace titan;
  CLI::App app{"titan.cpp: LLM pretraining, RL post-training and inference with one model "
               "definition and bitwise trainer/generator parity"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("titan ") + TITAN_VERSION);
  auto& reg = cli::command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::vector<std::function<int()>> runs(reg.size());
  std::vector<CLI::App*> subs;
  for (size_t i = 0; i < reg.size(); ++i) {
    CLI::App* sub = app.add_subcommand(reg[i].name, reg[i].help);
    reg[i].setup(*sub, runs[i]);
    subs.push_back(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (size_t i = 0; i < subs.size(); ++i)
      if (subs[i]->parsed() && runs[i]) return runs[i]();
    fmt::print("{}", app.help());
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // An OS error on a path the user gave (or one derived from it): name the path(s).
    std::string paths = e.path1().string();
    if (!e.path2().empty()) paths += " -> " + e.path2().string();
    fmt::print(stderr, "error: {}: {}\n", paths, e.code().message());
    return 2;
  } catch (const std::system_error& e) {
    fmt::print(stderr, "error: {} (an operating-system resource: threads, files, memory maps)\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "error: out of memory (a size in the config or input is larger than this machine can "
               "hold)\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return 1;
  }
}
