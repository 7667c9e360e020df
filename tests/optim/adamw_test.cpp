// AdamW (titan/optim/adamw.h through titan::optim::Optimizer) against PyTorch 1.13's
// torch.optim.AdamW (foreach=False), tests/reference/optim_adamw.py:
//  - 5 steps, a weight-decay group (matrices, lm_head) and a no-decay group
//    (embedding, norm, bias) formed by the default decay rules, a different lr every
//    step, odd sizes (masked vector tails), and missing gradients skipped as torch
//    does (state and step count untouched).
//    Tolerance: 1 ulp per element (params, exp_avg, exp_avg_sq). titan replicates
//    torch's kernels op for op (mul, FMA for add_(alpha), contracted addcmul,
//    divide-then-add for the denominator, addcdiv), and on the CI machine every
//    element matches bit for bit; the 1 ulp covers torch builds whose scalar tail
//    loops are compiled without FMA contraction.
//  - the update bits do not depend on the thread count (1 vs 2 threads, memcmp).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "optim_test_util.h"
#include "titan/core/thread_pool.h"
#include "titan/optim/adamw.h"
#include "titan/optim/optimizer.h"

namespace titan::optim {
namespace {
using namespace testing;

struct Spec {
  std::string name;
  Shape shape;
  bool decay;
  float grad_scale;
};

const std::vector<Spec> kSpecs = {
    {"model.embed_tokens.weight", {17, 24}, false, 0.05f},
    {"model.layers.0.self_attn.q_proj.weight", {24, 24}, true, 0.1f},
    {"model.layers.0.input_layernorm.weight", {24}, false, 1e-3f},
    {"model.layers.0.mlp.up_proj.bias", {37}, false, 1e-5f},
    {"model.layers.0.mlp.down_proj.weight", {29, 37}, true, 0.3f},
    {"lm_head.weight", {17, 24}, true, 0.02f},
};
constexpr int kSteps = 5;
const double kLr[kSteps] = {1e-2, 2e-2, 3e-2, 2.5e-2, 1e-3};
bool has_grad(int step, size_t i) {
  if (i == 3 && step == 1) return false;  // bias: no gradient at step 1
  if (i == 5 && step == 0) return false;  // lm_head: first gradient at step 1
  return true;
}

TEST(AdamW, MatchesTorchAdamWOverFiveStepsWithDecayGroups) {
  TempDir dir;
  std::mt19937 rng(1234);
  OptimizerConfig cfg;
  cfg.name = "AdamW";  // case-insensitive
  cfg.lr = kLr[0];
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weight_decay = 0.1;

  std::vector<ParamRef> refs;
  nlohmann::json meta = {{"steps", kSteps}, {"beta1", cfg.beta1}, {"beta2", cfg.beta2},
                         {"eps", cfg.eps}, {"weight_decay", cfg.weight_decay}};
  meta["lr"] = std::vector<double>(kLr, kLr + kSteps);
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    const Spec& s = kSpecs[i];
    auto v = normal_vec(shape_numel(s.shape), rng, 1.0f);
    dir.write_f32("p_" + std::to_string(i) + ".f32", v);
    refs.push_back({s.name, param_tensor(v, s.shape)});
    meta["params"].push_back({{"name", s.name}, {"shape", s.shape}, {"decay", s.decay}});
  }
  Optimizer opt(refs, cfg);
  // The default rules put matrices and lm_head in the decay group, the rest not.
  ASSERT_EQ(opt.groups().size(), 2u);
  EXPECT_EQ(opt.groups()[0].name, "adamw_decay");
  EXPECT_EQ(opt.groups()[1].weight_decay, 0.0);
  for (size_t i = 0; i < kSpecs.size(); ++i)
    EXPECT_EQ(opt.params()[i].group == 0, kSpecs[i].decay) << kSpecs[i].name;

  for (int s = 0; s < kSteps; ++s) {
    std::vector<int> mask;
    for (size_t i = 0; i < kSpecs.size(); ++i) {
      auto g = normal_vec(shape_numel(kSpecs[i].shape), rng, kSpecs[i].grad_scale);
      dir.write_f32("g_" + std::to_string(s) + "_" + std::to_string(i) + ".f32", g);
      mask.push_back(has_grad(s, i));
      if (has_grad(s, i)) set_grad(refs[i].param, g);
      else refs[i].param.zero_grad();
    }
    meta["has_grad"].push_back(mask);
    for (size_t g = 0; g < opt.groups().size(); ++g) opt.set_lr(g, kLr[s]);
    opt.step();
  }
  dir.write_json("meta.json", meta);
  ASSERT_EQ(run_reference("optim_adamw.py", dir), 0);

  nlohmann::json steps;
  std::ifstream(dir.file("out_steps.json")) >> steps;
  int64_t total = 0, exact = 0, worst = 0;
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    const auto& P = opt.params()[i];
    EXPECT_EQ(P.step, steps[i].get<int64_t>()) << kSpecs[i].name;
    const size_t n = static_cast<size_t>(shape_numel(kSpecs[i].shape));
    const std::string id = std::to_string(i) + ".f32";
    const std::vector<float> ours[3] = {P.ref.param.to_vector<float>(), P.exp_avg.to_vector<float>(),
                                        P.exp_avg_sq.to_vector<float>()};
    const std::vector<float> ref[3] = {dir.read_f32("out_p_" + id, n), dir.read_f32("out_m_" + id, n),
                                       dir.read_f32("out_v_" + id, n)};
    for (int t = 0; t < 3; ++t) {
      for (size_t k = 0; k < n; ++k) {
        const int64_t u = ulp_distance(ours[t][k], ref[t][k]);
        ++total;
        exact += u == 0;
        worst = std::max(worst, u);
        ASSERT_LE(u, 1) << kSpecs[i].name << " tensor " << t << " element " << k << ": titan "
                        << ours[t][k] << " torch " << ref[t][k];
      }
    }
  }
  std::printf("AdamW vs torch: %lld of %lld values bit-identical, worst %lld ulp\n",
              static_cast<long long>(exact), static_cast<long long>(total),
              static_cast<long long>(worst));
}

// The raw step against a double-precision evaluation of the same formula (a check of
// the scalars, independent of torch).
TEST(AdamW, SingleStepCloseToDoubleFormula) {
  AdamWHyper h{3e-3, 0.9, 0.99, 1e-6, 0.05};
  std::mt19937 rng(7);
  const int64_t n = 1000, step = 3;
  auto p = normal_vec(n, rng, 1.f), m = normal_vec(n, rng, 0.1f), g = normal_vec(n, rng, 0.1f);
  auto v = normal_vec(n, rng, 0.01f);
  for (auto& x : v) x = x * x;
  auto p0 = p, m0 = m, v0 = v;
  adamw_step(p.data(), m.data(), v.data(), g.data(), n, step, h);
  for (int64_t i = 0; i < n; ++i) {
    // Bounds relative to the size of the terms (the sums may cancel).
    const double m1 = h.beta1 * m0[i], m2 = (1 - h.beta1) * g[i];
    const double v1 = h.beta2 * v0[i], v2 = (1 - h.beta2) * double(g[i]) * g[i];
    const double md = m1 + m2, vd = v1 + v2;
    const double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
    const double p1 = p0[i] * (1 - h.lr * h.weight_decay);
    const double p2 = h.lr / bc1 * md / (std::sqrt(vd) / std::sqrt(bc2) + h.eps);
    EXPECT_NEAR(m[i], md, 1e-6 * (std::abs(m1) + std::abs(m2)));
    EXPECT_NEAR(v[i], vd, 1e-6 * (std::abs(v1) + std::abs(v2)));
    EXPECT_NEAR(p[i], p1 - p2, 1e-6 * (std::abs(p1) + std::abs(p2)));
  }
  EXPECT_THROW(adamw_scalars(h, 0), Error);
}

TEST(AdamW, BitsIndependentOfThreadCount) {
  const int saved = num_threads();
  std::mt19937 rng(99);
  const int64_t n = 100003;  // > 2 × the elementwise grain, odd tail
  auto p = normal_vec(n, rng, 1.f), g = normal_vec(n, rng, 0.1f);
  AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
  std::vector<float> out[2];
  for (int t = 1; t <= 2; ++t) {
    set_num_threads(t);
    auto pp = p;
    std::vector<float> m(n, 0.f), v(n, 0.f);
    for (int s = 1; s <= 3; ++s) adamw_step(pp.data(), m.data(), v.data(), g.data(), n, s, h);
    out[t - 1] = pp;
  }
  set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(out[0], out[1]));
}

}  // namespace
}  // namespace titan::optim
