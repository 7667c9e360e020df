// The calculator tool: a safe arithmetic evaluator (no names, no calls, no code).
//
// Grammar (whitespace between tokens is ignored):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := ('-' | '+') unary | power
//   power   := primary ('^' unary)?          right-associative: 2^3^2 = 2^9
//   primary := number | '(' expr ')'
//   number  := digits ['.' digits] [('e' | 'E') ['+' | '-'] digits]  |  '.' digits ...
// so precedence is Python's with ^ for **: -2^2 = -4, 2^-1 = 0.5, 2*3^2 = 18.
// Arithmetic is IEEE double.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace titan::rl {

inline constexpr size_t kCalculatorMaxBytes = 256;  // expression length
inline constexpr int kCalculatorMaxDepth = 32;      // nesting of parentheses / unary signs / powers

// The value of `expression`. Throws titan::Error with a one-line reason for: an empty
// or over-long expression, any other character or token (names, '**', ','), a
// missing operand or ')', nesting deeper than kCalculatorMaxDepth, division by zero,
// or a non-finite result (overflow, 0^-1, (-8)^(1/3)).
double calculate(std::string_view expression);

// A value as the tool prints it: integers of magnitude below 1e15 without a
// fraction ("42", "-3"), others with 12 significant digits ("0.333333333333").
std::string format_number(double v);

}  // namespace titan::rl
