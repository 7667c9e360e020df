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
#include "titan/distributed/runtime.h"
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
    // --help and --version end parsing with code 0; a bad argument is one "error:" line
    // and exit code 2, as every other bad input.
    if (e.get_exit_code() == 0) return app.exit(e);
    const bool sub = argc > 1 && argv[1][0] != '-';
    fmt::print(stderr, "error: {} (titan {}--help)\n", e.what(), sub ? std::string(argv[1]) + " " : "");
    return 2;
  }
  // Under mpirun every rank prints its own errors, prefixed "rank R: "; a failing rank
  // ends the job (distributed::finish), so no rank waits forever for it.
  int rc = 0;
  try {
    rc = -1;
    for (size_t i = 0; i < subs.size() && rc == -1; ++i)
      if (subs[i]->parsed() && runs[i]) rc = runs[i]();
    if (rc == -1) {
      fmt::print("{}", app.help());
      rc = 0;
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}{}\n", distributed::rank_prefix(), e.what());
    rc = 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // An OS error on a path the user gave (or one derived from it): name the path(s).
    std::string paths = e.path1().string();
    if (!e.path2().empty()) paths += " -> " + e.path2().string();
    fmt::print(stderr, "error: {}{}: {}\n", distributed::rank_prefix(), paths, e.code().message());
    rc = 2;
  } catch (const std::system_error& e) {
    fmt::print(stderr, "error: {}{} (an operating-system resource: threads, files, memory maps)\n",
               distributed::rank_prefix(), e.what());
    rc = 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "error: {}out of memory (a size in the config or input is larger than this machine can "
               "hold)\n", distributed::rank_prefix());
    rc = 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}{}\n", distributed::rank_prefix(), e.what());
    rc = 1;
  }
  return distributed::finish(rc);
}
