// titan::Error — the one exception type for user-facing errors (DESIGN.md §1.5).
// Messages are one readable line that names the op/file/field, what was expected
// and what was found. The CLI catches it and exits with code 2.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace titan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Throw titan::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace titan

// TITAN_CHECK(cond, "fmt", args...): throws titan::Error with the message if !cond.
#define TITAN_CHECK(cond, ...)                  \
  do {                                          \
    if (!(cond)) ::titan::fail(__VA_ARGS__);    \
  } while (0)
