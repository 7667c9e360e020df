#include "titan/rl/tools/calculator.h"

#include <cmath>
#include <cstdlib>

#include "titan/core/error.h"

namespace titan::rl {

namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  double parse() {
    const double v = expr();
    skip_space();
    if (i_ < s_.size()) fail("calculator: unexpected '{}' at position {}", s_[i_], i_);
    return v;
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void enter() {
    if (++depth_ > kCalculatorMaxDepth) fail("calculator: expression nested deeper than {}", kCalculatorMaxDepth);
  }

  double expr() {
    double v = term();
    for (;;) {
      if (eat('+')) v += term();
      else if (eat('-')) v -= term();
      else return v;
    }
  }
  double term() {
    double v = unary();
    for (;;) {
      if (eat('*')) {
        skip_space();
        if (i_ < s_.size() && s_[i_] == '*') fail("calculator: '**' is not an operator (use ^ for powers)");
        v *= unary();
      } else if (eat('/')) {
        const double d = unary();
        if (d == 0.0) fail("calculator: division by zero");
        v /= d;
      } else {
        return v;
      }
    }
  }
  double unary() {
    enter();
    double v;
    if (eat('-')) v = -unary();
    else if (eat('+')) v = unary();
    else v = power();
    --depth_;
    return v;
  }
  double power() {
    const double base = primary();
    if (!eat('^')) return base;
    enter();
    const double e = unary();
    --depth_;
    return std::pow(base, e);
  }
  double primary() {
    skip_space();
    if (i_ >= s_.size()) fail("calculator: expression ends where a number or '(' was expected");
    if (eat('(')) {
      enter();
      const double v = expr();
      if (!eat(')')) fail("calculator: missing ')' at position {}", i_);
      --depth_;
      return v;
    }
    return number();
  }
  double number() {
    const size_t b = i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - d;
    };
    size_t n = digits();
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      n += digits();
    }
    if (n == 0) {
      i_ = b;
      fail("calculator: unexpected '{}' at position {} (only numbers, + - * / ^ and parentheses)", s_[b], b);
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      const size_t e = i_++;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) fail("calculator: malformed exponent at position {}", e);
    }
    const std::string text(s_.substr(b, i_ - b));
    return std::strtod(text.c_str(), nullptr);
  }

  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

double calculate(std::string_view expression) {
  TITAN_CHECK(expression.size() <= kCalculatorMaxBytes, "calculator: expression of {} bytes, more than {}",
              expression.size(), kCalculatorMaxBytes);
  TITAN_CHECK(expression.find_first_not_of(" \t\r\n") != std::string_view::npos, "calculator: empty expression");
  const double v = Parser(expression).parse();
  TITAN_CHECK(std::isfinite(v), "calculator: the result is not a finite number ({})", v);
  return v;
}

std::string format_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.12g}", v);
}

}  // namespace titan::rl
