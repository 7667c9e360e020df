// Gradient clipping by global L2 norm (titan/optim/grad_clip.h):
//  - against torch.nn.utils.clip_grad_norm_ (tests/reference/optim_clip.py), with a
//    multi-block gradient, odd sizes and a parameter without gradient: the total norm
//    within 1e-6 relative (torch sums in fp32, titan in double), the clipped
//    gradients within 2 ulp (the clip coefficients may differ in the last bit);
//  - the norm against an exact double sum; no change when below max_norm;
//  - the norm's bits do not depend on the thread count;
//  - non-finite norm, bad gradients, zero_grad.
#include "titan/optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "optim_test_util.h"
#include "titan/core/thread_pool.h"

namespace titan::optim {
namespace {
using namespace testing;

struct GradSet {
  std::vector<ParamRef> refs;
  std::vector<std::vector<float>> grads;  // empty: no gradient
};

GradSet make_setup(std::mt19937& rng) {
  const std::vector<std::pair<Shape, float>> specs = {
      {{300, 333}, 0.01f}, {{37}, 1.0f}, {{5, 7}, 0.f}, {{4096}, 0.1f}, {{3}, 2.0f}};
  GradSet s;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [shape, scale] = specs[i];
    s.refs.push_back({"p" + std::to_string(i), Tensor::zeros(shape)});
    if (scale == 0.f) {  // parameter without a gradient
      s.grads.emplace_back();
      continue;
    }
    s.grads.push_back(normal_vec(shape_numel(shape), rng, scale));
    set_grad(s.refs.back().param, s.grads.back());
  }
  return s;
}

double exact_norm(const GradSet& s) {
  long double t = 0;
  for (const auto& g : s.grads)
    for (float x : g) t += static_cast<long double>(x) * x;
  return std::sqrt(static_cast<double>(t));
}

TEST(GradClip, MatchesTorchClipGradNorm) {
  const double max_norms[2] = {1.0, 100.0};  // clipping, then no clipping
  TempDir dir;
  nlohmann::json meta;
  std::vector<GradSet> setups;
  std::vector<float> totals;
  for (int c = 0; c < 2; ++c) {
    std::mt19937 rng(77);
    setups.push_back(make_setup(rng));
    GradSet& s = setups.back();
    nlohmann::json cm = {{"max_norm", max_norms[c]}};
    for (size_t i = 0; i < s.refs.size(); ++i) {
      cm["params"].push_back({{"shape", s.refs[i].param.shape()}, {"has_grad", !s.grads[i].empty()}});
      if (!s.grads[i].empty())
        dir.write_f32("g_" + std::to_string(c) + "_" + std::to_string(i) + ".f32", s.grads[i]);
    }
    meta["cases"].push_back(cm);
    totals.push_back(clip_grad_norm_(s.refs, max_norms[c]));
  }
  dir.write_json("meta.json", meta);
  ASSERT_EQ(run_reference("optim_clip.py", dir), 0);
  nlohmann::json ref_totals;
  std::ifstream(dir.file("out_norm.json")) >> ref_totals;
  for (int c = 0; c < 2; ++c) {
    SCOPED_TRACE(max_norms[c]);
    const GradSet& s = setups[c];
    const double ref_total = ref_totals[c].get<double>();
    EXPECT_NEAR(totals[c], ref_total, 1e-6 * ref_total);
    EXPECT_NEAR(totals[c], exact_norm(s), 1e-7 * ref_total);  // fp32 rounding of an exact sum
    EXPECT_GT(totals[c], 1.0);
    EXPECT_LT(totals[c], 100.0);
    for (size_t i = 0; i < s.refs.size(); ++i) {
      if (s.grads[i].empty()) {
        EXPECT_FALSE(s.refs[i].param.grad().defined());
        continue;
      }
      const auto ours = s.refs[i].param.grad().to_vector<float>();
      const auto ref =
          dir.read_f32("out_g_" + std::to_string(c) + "_" + std::to_string(i) + ".f32", ours.size());
      for (size_t k = 0; k < ours.size(); ++k)
        ASSERT_LE(ulp_distance(ours[k], ref[k]), 2) << "param " << i << " element " << k;
      if (c == 1) {
        EXPECT_TRUE(bitwise_equal(ours, s.grads[i])) << "unclipped grads changed";
      }
    }
  }
}

TEST(GradClip, NormBitsIndependentOfThreadCount) {
  const int saved = num_threads();
  float norms[2];
  for (int t = 1; t <= 2; ++t) {
    set_num_threads(t);
    std::mt19937 rng(3);
    GradSet s = make_setup(rng);
    norms[t - 1] = grad_norm(s.refs);
  }
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(&norms[0], &norms[1], 4), 0);
}

TEST(GradClip, NonFiniteNormLeavesGradientsAlone) {
  std::vector<ParamRef> refs = {{"a", Tensor::zeros({3})}};
  set_grad(refs[0].param, {1.f, std::numeric_limits<float>::infinity(), 2.f});
  EXPECT_TRUE(std::isinf(clip_grad_norm_(refs, 1.0)));
  EXPECT_EQ(refs[0].param.grad().to_vector<float>()[0], 1.f);
  EXPECT_EQ(grad_norm({}), 0.f);
}

TEST(GradClip, BadInputs) {
  std::vector<ParamRef> refs = {{"w", Tensor::zeros({2, 3})}};
  refs[0].param.set_grad(Tensor::zeros({3, 2}));
  EXPECT_THROW(grad_norm(refs), Error);
  refs[0].param.set_grad(Tensor::zeros({2, 3}, DType::bf16));
  EXPECT_THROW(grad_norm(refs), Error);
  refs[0].param.set_grad(Tensor::zeros({2, 3}));
  EXPECT_THROW(clip_grad_norm_(refs, 0.0), Error);
}

TEST(GradClip, ZeroGrad) {
  std::vector<ParamRef> refs = {{"a", Tensor::zeros({3})}, {"b", Tensor::zeros({2})}};
  set_grad(refs[0].param, {1.f, 2.f, 3.f});
  zero_grad(refs, /*set_to_none=*/false);
  EXPECT_EQ(refs[0].param.grad().to_vector<float>(), (std::vector<float>{0.f, 0.f, 0.f}));
  EXPECT_FALSE(refs[1].param.grad().defined());
  zero_grad(refs);
  EXPECT_FALSE(refs[0].param.grad().defined());
}

}  // namespace
}  // namespace titan::optim
