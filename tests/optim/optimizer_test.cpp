// titan::optim::Optimizer (titan/optim/optimizer.h) and the parameter kinds:
//  - HF-name classification and the weight-decay rules (defaults and nanoGPT's);
//  - state_dict → (copy, as through safetensors) → load_state_dict into a fresh
//    optimizer: the following steps are bitwise identical to an uninterrupted run
//    (AdamW + Muon, lr schedule, a parameter skipped on some steps);
//  - whole optimizer steps give the same bits with 1 and 2 threads;
//  - bad input: gradient shape/dtype mismatch (nothing changes), missing gradient
//    skipped like torch, unknown optimizer name, bad parameters, bad state dicts.
#include "titan/optim/optimizer.h"

#include <gtest/gtest.h>

#include "optim_test_util.h"
#include "titan/core/thread_pool.h"
#include "titan/optim/lr_scheduler.h"

namespace titan::optim {
namespace {
using namespace testing;

TEST(ParamKinds, ClassifiesHfNames) {
  const std::vector<std::tuple<std::string, Shape, ParamKind>> cases = {
      {"model.embed_tokens.weight", {100, 16}, ParamKind::embedding},
      {"model.layers.0.input_layernorm.weight", {16}, ParamKind::norm},
      {"model.layers.0.post_attention_layernorm.weight", {16}, ParamKind::norm},
      {"model.layers.3.self_attn.q_norm.weight", {8}, ParamKind::norm},
      {"model.norm.weight", {16}, ParamKind::norm},
      {"transformer.ln_f.weight", {16}, ParamKind::norm},
      {"transformer.h.0.ln_1.bias", {16}, ParamKind::bias},
      {"model.layers.0.self_attn.q_proj.bias", {16}, ParamKind::bias},
      {"model.layers.0.self_attn.q_proj.weight", {16, 16}, ParamKind::matrix},
      {"model.layers.0.mlp.down_proj.weight", {16, 64}, ParamKind::matrix},
      {"lm_head.weight", {100, 16}, ParamKind::output},
      {"output.weight", {100, 16}, ParamKind::output},
      {"transformer.wte.weight", {100, 16}, ParamKind::embedding},
      {"transformer.wpe.weight", {32, 16}, ParamKind::embedding},
      {"model.layers.0.mlp.experts.w1", {4, 16, 32}, ParamKind::other},
      {"scale", {1}, ParamKind::other},
  };
  for (const auto& [name, shape, kind] : cases)
    EXPECT_EQ(param_kind_name(classify_param(name, shape)), param_kind_name(kind)) << name;
  WeightDecayRules def;
  EXPECT_TRUE(gets_weight_decay(ParamKind::matrix, 2, def));
  EXPECT_TRUE(gets_weight_decay(ParamKind::output, 2, def));
  EXPECT_FALSE(gets_weight_decay(ParamKind::embedding, 2, def));
  EXPECT_FALSE(gets_weight_decay(ParamKind::norm, 1, def));
  EXPECT_FALSE(gets_weight_decay(ParamKind::bias, 1, def));
  EXPECT_TRUE(gets_weight_decay(ParamKind::other, 3, def));
  EXPECT_FALSE(gets_weight_decay(ParamKind::other, 1, def));
  WeightDecayRules nanogpt;  // every dim >= 2 tensor decays
  nanogpt.decay_embeddings = true;
  EXPECT_TRUE(gets_weight_decay(ParamKind::embedding, 2, nanogpt));
  EXPECT_TRUE(is_muon_eligible(ParamKind::matrix, 2));
  EXPECT_FALSE(is_muon_eligible(ParamKind::output, 2));
  EXPECT_FALSE(is_muon_eligible(ParamKind::embedding, 2));
}

// A small model-like parameter set; gradient for (step, param) from a fixed seed.
std::vector<ParamRef> make_params(uint64_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::pair<std::string, Shape>> specs = {
      {"model.embed_tokens.weight", {11, 8}},
      {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
      {"model.layers.0.mlp.up_proj.weight", {20, 8}},
      {"model.layers.0.input_layernorm.weight", {8}},
      {"model.layers.0.mlp.up_proj.bias", {20}},
      {"lm_head.weight", {11, 8}},
  };
  std::vector<ParamRef> refs;
  for (const auto& [n, s] : specs) refs.push_back({n, param_tensor(normal_vec(shape_numel(s), rng, 1.f), s)});
  return refs;
}
void set_grads(std::vector<ParamRef>& refs, int step) {
  for (size_t i = 0; i < refs.size(); ++i) {
    if (i == 4 && step % 3 == 1) {  // the bias misses some gradients
      refs[i].param.zero_grad();
      continue;
    }
    std::mt19937 rng(1000 * step + static_cast<int>(i));
    set_grad(refs[i].param, normal_vec(refs[i].param.numel(), rng, 0.1f));
  }
}
OptimizerConfig muon_config() {
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 3e-3;
  c.muon_lr = 0.02;
  c.weight_decay = 0.1;
  return c;
}
LRScheduler schedule() {
  LRSchedulerConfig c;
  c.name = "cosine";
  c.warmup_steps = 2;
  return LRScheduler(c, 8);
}
void run_steps(Optimizer& opt, std::vector<ParamRef>& refs, int from, int to) {
  for (int s = from; s < to; ++s) {
    set_grads(refs, s);
    schedule().apply(opt, s);
    opt.step();
  }
}
std::vector<std::vector<float>> snapshot(const Optimizer& opt) {
  std::vector<std::vector<float>> out;
  for (const auto& p : opt.params()) {
    out.push_back(p.ref.param.to_vector<float>());
    for (const Tensor& t : {p.exp_avg, p.exp_avg_sq, p.momentum_buffer})
      out.push_back(t.defined() ? t.to_vector<float>() : std::vector<float>{});
  }
  return out;
}

TEST(Optimizer, StateRestoreContinuesBitwise) {
  auto ref_params = make_params(42);
  Optimizer ref(ref_params, muon_config());
  run_steps(ref, ref_params, 0, 8);

  auto a_params = make_params(42);
  Optimizer a(a_params, muon_config());
  run_steps(a, a_params, 0, 4);
  // Serialise as a checkpoint would: every tensor copied out to plain values.
  NamedTensors saved;
  for (const auto& [k, t] : a.state_dict()) {
    if (t.dtype() == DType::i64) saved.emplace_back(k, Tensor::from_vector(t.to_vector<int64_t>(), t.shape()));
    else saved.emplace_back(k, Tensor::from_vector(t.to_vector<float>(), t.shape()));
  }
  // Keys as documented; the bias (no gradient at step 1) has one update fewer.
  std::map<std::string, Tensor> keys(saved.begin(), saved.end());
  EXPECT_EQ(keys.at("step").item<int64_t>(), 4);
  EXPECT_EQ(keys.at("model.layers.0.mlp.up_proj.bias.step").item<int64_t>(), 3);
  EXPECT_TRUE(keys.count("model.layers.0.self_attn.q_proj.weight.momentum_buffer"));
  EXPECT_FALSE(keys.count("model.layers.0.self_attn.q_proj.weight.exp_avg"));
  EXPECT_TRUE(keys.count("lm_head.weight.exp_avg_sq"));
  EXPECT_EQ(saved.size(), 1u + 4 * 3 + 2 * 2);

  // A fresh process: parameters from the model checkpoint, state from `saved`.
  auto b_params = make_params(0);
  for (size_t i = 0; i < b_params.size(); ++i) b_params[i].param.copy_(a_params[i].param);
  Optimizer b(b_params, muon_config());
  b.load_state_dict(saved);
  EXPECT_EQ(b.num_steps(), 4);
  run_steps(b, b_params, 4, 8);
  const auto want = snapshot(ref), got = snapshot(b);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bitwise_equal(want[i], got[i])) << "tensor " << i;
}

TEST(Optimizer, BitsIndependentOfThreadCount) {
  const int saved = num_threads();
  std::vector<std::vector<float>> out[2];
  for (int t = 1; t <= 2; ++t) {
    set_num_threads(t);
    auto refs = make_params(9);
    Optimizer opt(refs, muon_config());
    run_steps(opt, refs, 0, 3);
    out[t - 1] = snapshot(opt);
  }
  set_num_threads(saved);
  for (size_t i = 0; i < out[0].size(); ++i) EXPECT_TRUE(bitwise_equal(out[0][i], out[1][i])) << i;
}

TEST(Optimizer, MissingGradientIsSkipped) {
  auto refs = make_params(1);
  Optimizer opt(refs, muon_config());
  const auto before = refs[2].param.to_vector<float>();
  set_grads(refs, 0);
  refs[2].param.zero_grad();
  opt.step();
  EXPECT_TRUE(bitwise_equal(before, refs[2].param.to_vector<float>()));
  EXPECT_EQ(opt.params()[2].step, 0);
  EXPECT_FALSE(opt.params()[2].momentum_buffer.defined());
  EXPECT_EQ(opt.params()[1].step, 1);
  for (const auto& [k, t] : opt.state_dict()) EXPECT_EQ(k.find("up_proj.weight"), std::string::npos) << k;
}

TEST(Optimizer, GradientMismatchThrowsAndChangesNothing) {
  auto refs = make_params(2);
  Optimizer opt(refs, muon_config());
  set_grads(refs, 0);
  refs[3].param.set_grad(Tensor::zeros({9}));
  const auto before = snapshot(opt);
  try {
    opt.step();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.input_layernorm.weight"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[9]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(snapshot(opt), before);
  EXPECT_EQ(opt.num_steps(), 0);
  refs[3].param.set_grad(Tensor::zeros({8}, DType::bf16));
  EXPECT_THROW(opt.step(), Error);
}

TEST(Optimizer, BadConfigurationsAndParameters) {
  OptimizerConfig c;
  c.name = "sgd";
  try {
    Optimizer opt(make_params(3), c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sgd'"), std::string::npos) << e.what();
  }
  c.name = "adamw";
  c.beta2 = 1.0;
  EXPECT_THROW(Optimizer(make_params(3), c), Error);
  c = OptimizerConfig{};
  EXPECT_THROW(Optimizer({{"a", Tensor::zeros({2})}, {"a", Tensor::zeros({2})}}, c), Error);
  EXPECT_THROW(Optimizer({{"", Tensor::zeros({2})}}, c), Error);
  EXPECT_THROW(Optimizer({{"a", Tensor::zeros({2}, DType::bf16)}}, c), Error);
  EXPECT_THROW(Optimizer({{"a", Tensor::zeros({2, 3}).transpose(0, 1)}}, c), Error);
  EXPECT_THROW(Optimizer({{"a", Tensor()}}, c), Error);
}

TEST(Optimizer, BadStateDicts) {
  auto refs = make_params(4);
  Optimizer opt(refs, muon_config());
  set_grads(refs, 0);
  opt.step();
  const NamedTensors good = opt.state_dict();
  auto without = [&](const std::string& key) {
    NamedTensors s;
    for (const auto& kv : good)
      if (kv.first != key) s.push_back(kv);
    return s;
  };
  auto expect_error = [&](const NamedTensors& s, const std::string& needle) {
    Optimizer fresh(make_params(4), muon_config());
    try {
      fresh.load_state_dict(s);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(fresh.num_steps(), 0);
    EXPECT_EQ(fresh.params()[0].step, 0);  // nothing loaded
  };
  expect_error(without("step"), "'step'");
  expect_error(without("lm_head.weight.exp_avg_sq"), "lm_head.weight.exp_avg_sq");
  NamedTensors extra = good;
  extra.emplace_back("model.layers.0.self_attn.q_proj.weight.exp_avg", Tensor::zeros({8, 8}));
  expect_error(extra, "q_proj.weight.exp_avg");
  NamedTensors unknown = good;
  unknown.emplace_back("nope.exp_avg", Tensor::zeros({1}));
  expect_error(unknown, "nope.exp_avg");
  NamedTensors shape = without("lm_head.weight.exp_avg");
  shape.emplace_back("lm_head.weight.exp_avg", Tensor::zeros({8, 11}));
  expect_error(shape, "[8, 11]");
  NamedTensors dup = good;
  dup.push_back(good[1]);
  expect_error(dup, "twice");
  // The good one loads, and an empty-state parameter stays empty.
  Optimizer fresh(make_params(4), muon_config());
  fresh.load_state_dict(good);
  EXPECT_EQ(fresh.num_steps(), 1);
  EXPECT_EQ(fresh.params()[5].step, 1);
}

}  // namespace
}  // namespace titan::optim
