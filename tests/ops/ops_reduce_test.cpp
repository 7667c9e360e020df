// Reductions vs PyTorch (float64 reference), fixed-order and thread-count invariance.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/index.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randn;

OpCheck reduce_case(const std::string& op, const Shape& s, uint64_t seed, nlohmann::json attrs,
                    test::OpFn fn, bool grad = true) {
  OpCheck c;
  c.ref.op = op;
  c.ref.label = op + shape_str(s) + attrs.dump();
  c.ref.attrs = attrs;
  c.ref.inputs = {{"x", randn(s, seed)}};
  if (grad) c.ref.grad_of = {"x"};
  c.fn = std::move(fn);
  // Sums of up to ~600 N(0,1) terms: the fp32 error grows with the count.
  c.tol = {1e-5, 1e-5};
  c.grad_tol = {1e-5, 1e-6};
  return c;
}

TEST(Reduce, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 100;
  const std::vector<Shape> shapes = {{1}, {17}, {3, 33}, {2, 5, 7}, {4, 1, 9}};
  for (const Shape& s : shapes) {
    cs.push_back(reduce_case("sum", s, seed++, {}, [](auto& in) { return std::vector<Tensor>{sum(in[0])}; }));
    cs.push_back(reduce_case("mean", s, seed++, {}, [](auto& in) { return std::vector<Tensor>{mean(in[0])}; }));
    cs.push_back(reduce_case("max", s, seed++, {}, [](auto& in) { return std::vector<Tensor>{max(in[0])}; }));
    cs.push_back(reduce_case("argmax", s, seed++, {}, [](auto& in) { return std::vector<Tensor>{argmax(in[0])}; }, false));
    for (int64_t d = -1; d < static_cast<int64_t>(s.size()); ++d)
      for (bool kd : {false, true}) {
        nlohmann::json a = {{"dim", d}, {"keepdim", kd}};
        cs.push_back(reduce_case("sum", s, seed++, a, [d, kd](auto& in) { return std::vector<Tensor>{sum(in[0], d, kd)}; }));
        cs.push_back(reduce_case("mean", s, seed++, a, [d, kd](auto& in) { return std::vector<Tensor>{mean(in[0], d, kd)}; }));
        cs.push_back(reduce_case("max", s, seed++, a, [d, kd](auto& in) {
          auto r = max(in[0], d, kd);
          return std::vector<Tensor>{r.values, r.indices};
        }));
        cs.push_back(reduce_case("logsumexp", s, seed++, a, [d, kd](auto& in) {
          return std::vector<Tensor>{logsumexp(in[0], d, kd)};
        }));
        cs.push_back(reduce_case("argmax", s, seed++, a, [d, kd](auto& in) {
          return std::vector<Tensor>{argmax(in[0], d, kd)};
        }, false));
      }
  }
  // A long full sum (several kSumChunk chunks, odd tail).
  cs.push_back(reduce_case("sum", {3 * kSumChunk + 77}, seed++, {}, [](auto& in) { return std::vector<Tensor>{sum(in[0])}; }));
  cs.back().tol = {1e-5, 1e-4};
  check_ops(cs);
}

TEST(Reduce, MaxTiesAndGradientGoToFirstIndex) {
  Tensor x = Tensor::from_vector<float>({1, 5, 5, 2, 5, 0}, {2, 3}).requires_grad_();
  auto r = max(x, 1);
  EXPECT_EQ(r.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  sum(r.values).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 1, 0, 0, 1, 0}));
  Tensor y = Tensor::from_vector<float>({3, 7, 7}, {3}).requires_grad_();
  max(y).backward();
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(argmax(y).item<int64_t>(), 1);
}

TEST(Reduce, FullSumIsThreadCountInvariant) {
  Tensor x = randn({5 * kSumChunk + 123}, 9);
  const int prev = num_threads();
  set_num_threads(1);
  const float a = sum(x).item<float>();
  set_num_threads(2);
  const float b = sum(x).item<float>();
  set_num_threads(prev);
  EXPECT_EQ(std::memcmp(&a, &b, 4), 0);
  // The documented order: chunk sums with 8 lanes and a fixed tree, chunks ascending.
  auto v = x.to_vector<float>();
  float total = 0;
  for (size_t c0 = 0; c0 < v.size(); c0 += kSumChunk) {
    float acc[8] = {};
    for (size_t i = c0; i < std::min(v.size(), c0 + kSumChunk); ++i) acc[(i - c0) % 8] += v[i];
    total += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  EXPECT_EQ(std::memcmp(&a, &total, 4), 0);
}

TEST(Reduce, Errors) {
  try {
    sum(Tensor::zeros({2, 3}), 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum: dim 2 out of range for a 2-d tensor"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(mean(Tensor::zeros({2}, DType::i64)), Error);
  EXPECT_THROW(max(Tensor::zeros({0})), Error);
}

}  // namespace
}  // namespace titan
