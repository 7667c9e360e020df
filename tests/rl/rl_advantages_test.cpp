// group_advantages (GRPO with the unbiased std, Dr. GRPO without it), DAPO's
// zero_variance_groups and overlong_penalty against hand-computed numbers; edge cases
// (equal rewards, group size 1) and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "titan/core/error.h"
#include "titan/rl/advantages.h"

namespace titan::rl {
namespace {

void expect_error(const std::function<void()>& f, const std::string& fn, const std::string& arg) {
  try {
    f();
    ADD_FAILURE() << "no error for " << fn << " " << arg;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(fn), std::string::npos) << m;
    EXPECT_NE(m.find(arg), std::string::npos) << m;
  }
}

TEST(Advantages, GrpoByHand) {
  // group 0: {1, 0, 0, 1}: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
  // group 1: {0, 0, 0, 1}: mean 0.25, unbiased std sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5
  // group 2: {0.3, 0.3, 0.3, 0.3}: all equal -> 0
  const std::vector<double> r = {1, 0, 0, 1, 0, 0, 0, 1, 0.3, 0.3, 0.3, 0.3};
  const double eps = 1e-6;
  const auto a = group_advantages(r, 4, {true, eps});
  const double s0 = std::sqrt(1.0 / 3.0) + eps, s1 = 0.5 + eps;
  const std::vector<double> want = {0.5 / s0,   -0.5 / s0,  -0.5 / s0,  0.5 / s0,
                                    -0.25 / s1, -0.25 / s1, -0.25 / s1, 0.75 / s1,
                                    0,          0,          0,          0};
  ASSERT_EQ(a.size(), want.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-12) << i;
  for (size_t i = 8; i < 12; ++i) EXPECT_EQ(a[i], 0.0) << i;  // exactly 0, not tiny
  // eps matters: with eps = 0.5 group 1 divides by 1.0
  const auto b = group_advantages(r, 4, {true, 0.5});
  EXPECT_NEAR(b[7], 0.75, 1e-12);
}

TEST(Advantages, DrGrpoNoStd) {
  const std::vector<double> r = {1, 0, 0, 1, 0, 0, 0, 1, 2, 2, 2, 2};
  const auto a = group_advantages(r, 4, {false, 1e-6});
  const std::vector<double> want = {0.5, -0.5, -0.5, 0.5, -0.25, -0.25, -0.25, 0.75, 0, 0, 0, 0};
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], want[i]) << i;
}

TEST(Advantages, EdgeCases) {
  // group_size 1: all zero, std never formed (no 0/0)
  const std::vector<double> r = {0.7, -3, 1e9, 0};
  for (bool norm : {true, false}) {
    for (double v : group_advantages(r, 1, {norm, 0.0})) EXPECT_EQ(v, 0.0);
  }
  // equal rewards with eps = 0: still 0, not NaN
  const std::vector<double> eq = {0.1, 0.1, 0.1};
  for (double v : group_advantages(eq, 3, {true, 0.0})) EXPECT_EQ(v, 0.0);
  // empty input: no groups
  EXPECT_TRUE(group_advantages(std::span<const double>(), 4, {}).empty());
  // two-member group: ±1/sqrt(2) * (1/(1+eps')) pattern: {0, 2} mean 1, std sqrt(2)
  const std::vector<double> two = {0, 2};
  const auto a = group_advantages(two, 2, {true, 0.0});
  EXPECT_NEAR(a[0], -1 / std::sqrt(2.0), 1e-15);
  EXPECT_NEAR(a[1], 1 / std::sqrt(2.0), 1e-15);
  // GRPO advantages of a group sum to 0
  const std::vector<double> g = {0.1, 0.9, 0.4, 0.4, 0.0, 1.0};
  double s = 0;
  for (double v : group_advantages(g, 6, {})) s += v;
  EXPECT_NEAR(s, 0.0, 1e-12);
}

TEST(Advantages, ZeroVarianceGroups) {
  const std::vector<double> r = {1, 1, 1, 0, 1, 0, 0.5, 0.5, 0.5, 0, 0, 1e-12};
  const std::vector<bool> want = {true, false, true, false};
  EXPECT_EQ(zero_variance_groups(r, 3), want);
  EXPECT_EQ(zero_variance_groups(r, 1), std::vector<bool>(12, true));
  EXPECT_EQ(zero_variance_groups(r, 12), std::vector<bool>{false});
}

TEST(Advantages, OverlongPenaltyRegimes) {
  // L_max 20, L_cache 5: soft limit 15
  EXPECT_EQ(overlong_penalty(0, 20, 5, 1.0), 0.0);
  EXPECT_EQ(overlong_penalty(10, 20, 5, 1.0), 0.0);
  EXPECT_EQ(overlong_penalty(15, 20, 5, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(16, 20, 5, 1.0), -0.2);
  EXPECT_DOUBLE_EQ(overlong_penalty(18, 20, 5, 1.0), -0.6);
  EXPECT_DOUBLE_EQ(overlong_penalty(20, 20, 5, 1.0), -1.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(21, 20, 5, 1.0), -1.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(1000, 20, 5, 1.0), -1.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(18, 20, 5, 0.5), -0.3);
  EXPECT_DOUBLE_EQ(overlong_penalty(30, 20, 5, 0.5), -0.5);
  // buffer == max_tokens: linear from 0
  EXPECT_DOUBLE_EQ(overlong_penalty(5, 10, 10, 1.0), -0.5);
}

TEST(Advantages, Errors) {
  const std::vector<double> r = {1, 0, 1};
  expect_error([&] { group_advantages(r, 0, {}); }, "group_advantages", "group_size");
  expect_error([&] { group_advantages(r, 2, {}); }, "group_advantages", "rewards");
  expect_error([&] { group_advantages(r, 3, {true, -1.0}); }, "group_advantages", "eps");
  const std::vector<double> bad = {1, std::numeric_limits<double>::quiet_NaN(), 0};
  expect_error([&] { group_advantages(bad, 3, {}); }, "group_advantages", "index 1");
  const std::vector<double> inf = {1, 0, INFINITY};
  expect_error([&] { zero_variance_groups(inf, 3); }, "zero_variance_groups", "rewards");
  expect_error([&] { zero_variance_groups(r, -1); }, "zero_variance_groups", "group_size");
  expect_error([&] { overlong_penalty(-1, 20, 5, 1); }, "overlong_penalty", "response_len");
  expect_error([&] { overlong_penalty(1, 0, 5, 1); }, "overlong_penalty", "max_tokens");
  expect_error([&] { overlong_penalty(1, 20, 0, 1); }, "overlong_penalty", "buffer_len");
  expect_error([&] { overlong_penalty(1, 20, 21, 1); }, "overlong_penalty", "buffer_len");
  expect_error([&] { overlong_penalty(1, 20, 5, NAN); }, "overlong_penalty", "factor");
}

}  // namespace
}  // namespace titan::rl
