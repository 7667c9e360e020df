// LR schedules (titan/optim/lr_scheduler.h) against hand-computed values:
//  - nanoGPT shakespeare_char (lr 1e-3, min_lr 1e-4, warmup 100, lr_decay_iters 5000)
//    through "warmup_cosine": get_lr(it) values from nanoGPT's formula evaluated in
//    Python doubles (printed with repr), compared exactly;
//  - TorchTitan WSD phases (warmup (k+1)/W, stable 1, decay linear/sqrt/cosine to the
//    min_lr_factor floor), its "+1 virtual step", decay_ratio None, warmup clamping;
//  - linear / cosine / constant shorthands, apply() to optimizer groups, bad configs.
#include <gtest/gtest.h>

#include "optim_test_util.h"
#include "titan/optim/lr_scheduler.h"
#include "titan/optim/optimizer.h"

namespace titan::optim {
namespace {

TEST(LRScheduler, NanoGptShakespeareCharExactly) {
  LRSchedulerConfig c;
  c.name = "warmup_cosine";
  c.warmup_steps = 100;
  c.lr_decay_iters = 5000;
  c.min_lr = 1e-4;
  LRScheduler s(c, 5000);
  const double lr = 1e-3;
  // Python: get_lr(it) of karpathy/nanoGPT train.py with these settings (repr).
  const std::pair<int64_t, double> want[] = {
      {0, 9.900990099009901e-06},   {50, 0.000504950495049505}, {99, 0.0009900990099009901},
      {100, 0.001},                 {1000, 0.0009271396472013282}, {2550, 0.00055},
      {4999, 0.00010000009248900101}, {5000, 0.0001},           {5001, 0.0001},
      {9000, 0.0001}};
  for (auto [it, v] : want) EXPECT_EQ(s.lr(it, lr), v) << "it " << it;
  // By hand: warmup lr·(it+1)/(W+1); half-way through the decay, (lr + min_lr)/2.
  EXPECT_DOUBLE_EQ(s.lr(0, lr), 1e-3 / 101);
  EXPECT_DOUBLE_EQ(s.lr(2550, lr), 5.5e-4);
  // Without an absolute min_lr: min_lr_factor of the base lr; lr_decay_iters 0 = total.
  c.min_lr = -1;
  c.min_lr_factor = 0.1;
  c.lr_decay_iters = 0;
  EXPECT_DOUBLE_EQ(LRScheduler(c, 5000).lr(2550, 2e-3), 1.1e-3);
}

TEST(LRScheduler, TorchTitanWsdPhases) {
  LRSchedulerConfig c;
  c.name = "wsd";
  c.warmup_steps = 10;
  c.decay_ratio = 0.2;
  c.decay_type = "linear";
  c.min_lr_factor = 0.1;
  LRScheduler s(c, 100);
  EXPECT_EQ(s.warmup_steps(), 10);
  EXPECT_EQ(s.decay_steps(), 20);
  EXPECT_EQ(s.stable_steps(), 71);  // 100 + 1 - 10 - 20
  const double b = 2.0;
  EXPECT_DOUBLE_EQ(s.lr(0, b), 2.0 * 0.1);  // (0+1)/10
  EXPECT_DOUBLE_EQ(s.lr(4, b), 2.0 * 0.5);
  EXPECT_DOUBLE_EQ(s.lr(9, b), 2.0);
  EXPECT_DOUBLE_EQ(s.lr(10, b), 2.0);
  EXPECT_DOUBLE_EQ(s.lr(80, b), 2.0);              // last stable step
  EXPECT_DOUBLE_EQ(s.lr(81, b), 2.0 * 0.955);      // p = 1/20: 0.1 + 0.9·0.95
  EXPECT_DOUBLE_EQ(s.lr(99, b), 2.0 * 0.145);      // p = 19/20: the last lr stays above the floor
  c.decay_type = "sqrt";
  EXPECT_DOUBLE_EQ(LRScheduler(c, 100).lr(85, b), 2.0 * 0.55);  // p = 1/4: 1 − ½
  c.decay_type = "cosine";
  EXPECT_DOUBLE_EQ(LRScheduler(c, 100).lr(90, b), 2.0 * 0.55);  // p = 1/2: ½(1 + cos π/2)
  // An absolute floor replaces the factor: m = min_lr / base.
  c.min_lr = 0.5;
  c.decay_type = "linear";
  EXPECT_DOUBLE_EQ(LRScheduler(c, 100).lr(99, b), 2.0 * (0.25 + 0.75 * 0.05));
}

TEST(LRScheduler, ShorthandsAndDefaults) {
  LRSchedulerConfig c;
  c.warmup_steps = 10;
  c.name = "linear";  // decay right after warmup: W = 10, D = 90, S = 1
  LRScheduler lin(c, 100);
  EXPECT_EQ(lin.decay_steps(), 90);
  EXPECT_EQ(lin.stable_steps(), 1);
  EXPECT_DOUBLE_EQ(lin.lr(10, 1.0), 1.0);
  EXPECT_NEAR(lin.lr(99, 1.0), 1.0 / 90, 1e-16);  // 1 − 89/90
  EXPECT_EQ(lin.lr(150, 1.0), 0.0);                // past the end: the floor
  c.name = "cosine";
  EXPECT_DOUBLE_EQ(LRScheduler(c, 100).lr(11, 1.0), 0.9996954135095479);  // ½(1+cos(π/90))
  c.name = "constant";
  LRScheduler con(c, 100);
  EXPECT_DOUBLE_EQ(con.lr(4, 3.0), 1.5);
  EXPECT_DOUBLE_EQ(con.lr(99, 3.0), 3.0);
  EXPECT_DOUBLE_EQ(con.lr(1000, 3.0), 3.0);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(LRScheduler(c, 100).lr(0, 3.0), 3.0);
  // warmup longer than training is clamped to the training steps (TorchTitan warns).
  c.name = "wsd";
  c.warmup_steps = 200;
  LRScheduler clamp(c, 100);
  EXPECT_EQ(clamp.warmup_steps(), 100);
  EXPECT_DOUBLE_EQ(clamp.lr(99, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clamp.lr(49, 1.0), 0.5);
}

TEST(LRScheduler, AppliesToEveryGroupFromItsBaseLr) {
  std::vector<ParamRef> refs = {
      {"layers.0.attn.wq.weight", Tensor::zeros({4, 4})},
      {"layers.0.attn_norm.weight", Tensor::zeros({4})},
  };
  OptimizerConfig oc;
  oc.name = "muon";
  oc.lr = 1e-3;
  oc.muon_lr = 0.02;
  Optimizer opt(refs, oc);
  LRSchedulerConfig c;
  c.name = "constant";
  c.warmup_steps = 4;
  LRScheduler s(c, 10);
  s.apply(opt, 1);
  for (const auto& g : opt.groups()) EXPECT_DOUBLE_EQ(g.lr, g.base_lr * 0.5) << g.name;
  EXPECT_THROW(opt.set_lr(7, 1.0), Error);
}

TEST(LRScheduler, BadConfigs) {
  LRSchedulerConfig c;
  c.name = "step";
  EXPECT_THROW(LRScheduler(c, 10), Error);
  c.name = "wsd";
  c.decay_type = "exp";
  EXPECT_THROW(LRScheduler(c, 10), Error);
  c.decay_type = "linear";
  EXPECT_THROW(LRScheduler(c, 0), Error);
  c.min_lr_factor = 2;
  EXPECT_THROW(LRScheduler(c, 10), Error);
  c.min_lr_factor = 0;
  c.name = "warmup_cosine";
  c.warmup_steps = 10;
  c.lr_decay_iters = 10;
  EXPECT_THROW(LRScheduler(c, 100), Error);
  c.lr_decay_iters = 20;
  EXPECT_THROW(LRScheduler(c, 100).lr(-1, 1.0), Error);
}

}  // namespace
}  // namespace titan::optim
