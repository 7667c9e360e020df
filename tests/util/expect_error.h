// A gtest check for the project's bad-input contract: the call throws titan::Error whose
// message contains a given text and is one line.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "titan/core/error.h"

namespace titan::test {

// Runs f(); expects a titan::Error containing `needle` with no newline in its message.
template <class F>
void expect_one_line_error(F&& f, const std::string& needle) {
  try {
    std::forward<F>(f)();
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace titan::test
