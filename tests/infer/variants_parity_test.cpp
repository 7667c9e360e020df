// The attention variants of the shared decoder (config flags, models/common/config.h),
// each through trainer and generator, bitwise (memcmp):
//   window:  per-layer sliding window (layer_types sliding/full, sliding_window 8);
//   sinks:   gpt-oss learned per-head sink logits;
//   softcap: the Gemma 2 block: attention soft-cap, final logit soft-cap, scale
//            query_pre_attn_scalar^-1/2, sandwich norms, gain-centred norms, GeGLU,
//            scaled embeddings, local RoPE theta on the window layers (Gemma 3);
//   nope:    Llama 4 iRoPE: NoPE layers between RoPE layers, attention temperature tuning;
//   olmo2:   post-norms only (no pre-norms);
//   chunked: Llama 4 chunked local attention (chunks of 8 positions on layers 0 and 2:
//            prompts of 7 and 257 tokens and the decoded tokens cross chunk and KV-block
//            boundaries);
//   llama4:  the whole Llama 4 block: chunked RoPE layers with interleaved-pair RoPE and
//            the weightless q/k RMS norm after it, NoPE global layers with temperature
//            tuning, MoE layers with a top-1 sigmoid router scaling the expert's input
//            plus a shared expert.
//   gpt_oss: the gpt_oss family's block (models/gpt_oss) at tiny size: sliding window 8 /
//            full layers, sinks, q/k/v/o biases, YaRN (truncate false), every layer 4
//            biased experts (2 per token, softmax over the top-2 logits, router bias,
//            clamped SwiGLU with swiglu_limit 1 so the clamps act); its "without" model
//            keeps the shapes with sinks off, the plain SwiGLU and the softmax router.
// For each: prefill == token-by-token decode (the generator decodes every completion
// token through the paged K/V, the trainer recomputes prompt + completion in one packed
// forward with autograd on); chunked prefill == whole prefill; 1 thread == 2 threads;
// prompts of 1, 7 and 257 tokens alone and together. Each flag changes the logits (it is
// not silently ignored), and a generator-only change (the KV block size) breaks parity.
// Backward: finite differences of a logit functional against autograd for the sink
// logits and for a NoPE layer's query projection (temperature tuning).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "parity_util.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

using namespace titan;
using namespace titan::infer;
using namespace titan::infer::testing;

namespace {

// 4 gqa layers over tiny_config, with one variant set.
models::TransformerConfig variant_config(const std::string& v, bool on = true) {
  models::TransformerConfig c = tiny_config(v == "softcap" ? "gemma2" : "llama3");
  c.num_hidden_layers = 4;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  if (v == "gpt_oss") {
    c.family = "gpt_oss";
    c.layer_types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    c.sliding_window = 8;
    c.attention_bias = true;
    c.attention_sinks = on;
    c.rope_scaling.rope_type = "yarn";
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 64;
    c.rope_scaling.truncate = false;
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    c.router_bias = true;
    c.expert_proj_bias = true;
    c.scoring_func = on ? "softmax_topk" : "softmax";
    c.expert_act = on ? "swiglu_oai" : "silu";
    c.swiglu_limit = 1.0;
    return c;
  }
  if (!on) return c;
  if (v == "window") {
    c.layer_types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    c.sliding_window = 8;
  } else if (v == "sinks") {
    c.attention_sinks = true;
  } else if (v == "softcap") {
    c.attn_logit_softcapping = 1.0;
    c.final_logit_softcapping = 2.0;
    c.query_pre_attn_scalar = 24;
    c.post_norms = true;
    c.norm_unit_offset = true;
    c.hidden_act = "gelu_pytorch_tanh";
    c.embedding_multiplier = 8.0;
    c.layer_types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    c.sliding_window = 16;
    c.rope_local_base_freq = 100.0;
  } else if (v == "nope") {
    c.no_rope_layers = {1, 0, 1, 0};
    c.attn_temperature_tuning = true;
    c.floor_scale = 4;
    c.attn_scale = 0.5;
  } else if (v == "chunked") {
    c.layer_types = {"chunked_attention", "full_attention", "chunked_attention", "full_attention"};
    c.attention_chunk_size = 8;
  } else if (v == "llama4") {
    c.layer_types = {"chunked_attention", "full_attention", "chunked_attention", "full_attention"};
    c.attention_chunk_size = 12;
    c.no_rope_layers = {1, 0, 1, 0};
    c.attn_temperature_tuning = true;
    c.floor_scale = 4;
    c.attn_scale = 0.5;
    c.use_qk_norm = true;
    c.rope_interleave_gqa = true;
    c.num_experts = 4;
    c.num_experts_per_tok = 1;
    c.moe_intermediate_size = 32;
    c.decoder_sparse_step = 2;
    c.scoring_func = "sigmoid";
    c.n_shared_experts = 1;
    c.score_before_experts = true;
  } else if (v == "olmo2") {
    c.pre_norms = false;
    c.post_norms = true;
  }
  return c;
}

// Random init; norm gains, sink logits and biases (the experts' too) drawn away from
// their neutral init so that every flag acts.
std::unique_ptr<models::Decoder> variant_model(const models::TransformerConfig& c) {
  auto m = std::make_unique<models::Decoder>(c);
  m->init_weights(5);
  autograd::NoGradGuard ng;
  uint64_t seed = 100;
  for (auto& [name, p] : m->named_parameters())
    if (p.dim() == 1) {
      Tensor r = Tensor::randn(p.shape(), seed++);
      Tensor t = p;
      const bool bias = name.find("bias") != std::string::npos || name.find("sinks") != std::string::npos;
      t.copy_(bias ? scale(r, bias && name.find("sinks") == std::string::npos ? 0.2 : 1.0)
                   : add(scale(r, 0.2), c.norm_unit_offset ? 0.0 : 1.0));
    } else if (name.find(".moe.experts.b") != std::string::npos) {
      Tensor t = p;
      t.copy_(scale(Tensor::randn(p.shape(), seed++), 0.2));
    }
  return m;
}

class VariantParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = variant_model(variant_config(GetParam()));
    c = make_case();
  }
  std::unique_ptr<models::Decoder> model;
  Case c;
};

TEST_P(VariantParity, TrainerLogprobsEqualGeneratorBitwise) {
  const Result gen = run_all_at_once(*model, c, base_config());
  ASSERT_EQ(gen.tokens.size(), 9u);
  const auto tr = trainer_logprobs(*model, c, gen);
  const double d = max_abs_diff(gen, tr);
  std::printf("%s: generator (paged decode) vs trainer logprobs: max |delta| = %.1f over %zu samples\n",
              GetParam().c_str(), d, tr.size());
  EXPECT_EQ(d, 0.0);
  for (size_t i = 0; i < tr.size(); ++i) EXPECT_TRUE(same_bits(gen.logprobs[i], tr[i])) << "sample " << i;
}

TEST_P(VariantParity, EngineModesAgreeBitwise) {
  const Result all = run_all_at_once(*model, c, base_config());
  {
    Engine e(*model, nullptr, base_config());
    std::vector<RequestOutput> outs;
    for (size_t i = 0; i < c.prompts.size(); ++i) outs.push_back(std::move(e.generate({c.prompts[i]}, {c.params[i]})[0]));
    expect_same(all, flatten(outs), "one at a time");
  }
  for (int64_t budget : {5, 37}) {
    EngineConfig ec = base_config();
    ec.max_num_batched_tokens = budget;
    expect_same(all, run_all_at_once(*model, c, ec), "chunked prefill, budget " + std::to_string(budget));
  }
  const int nt = num_threads();
  set_num_threads(nt == 1 ? 2 : 1);
  const Result other = run_all_at_once(*model, c, base_config());
  set_num_threads(nt);
  expect_same(all, other, "1 vs 2 threads");
}

TEST_P(VariantParity, BatchInvariance1_7_257Tokens) {
  Case b;
  b.prompts = {random_tokens(1, 21), random_tokens(7, 22), random_tokens(257, 23)};
  b.params = {sp(0.0, {}, 1, 6), sp(0.0, {}, 1, 6), sp(0.0, {}, 1, 6)};
  const Result together = run_all_at_once(*model, b, base_config());
  for (size_t i = 0; i < b.prompts.size(); ++i) {
    Case one;
    one.prompts = {b.prompts[i]};
    one.params = {b.params[i]};
    const Result alone = run_all_at_once(*model, one, base_config());
    EXPECT_EQ(alone.tokens[0], together.tokens[i]) << "prompt " << i;
    EXPECT_TRUE(same_bits(alone.logprobs[0], together.logprobs[i])) << "prompt " << i;
  }
  EXPECT_EQ(max_abs_diff(together, trainer_logprobs(*model, b, together)), 0.0);
}

TEST_P(VariantParity, FlagChangesTheLogits) {
  // The same weights (by name) in the model without the variant.
  auto base = std::make_unique<models::Decoder>(variant_config(GetParam(), /*on=*/false));
  autograd::NoGradGuard ng;
  const auto src = model->named_parameters();
  for (auto& [name, p] : base->named_parameters())
    for (auto& [n2, q] : src)
      if (n2 == name) {
        Tensor t = p;
        t.copy_(q);
      }
  const models::ForwardBatch fb = models::make_packed_batch({random_tokens(40, 31), random_tokens(9, 32)});
  const auto a = model->logits(model->forward(fb)).to_vector<float>();
  const auto b = base->logits(base->forward(fb)).to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  std::printf("%s: max |logit with - without| = %.3g\n", GetParam().c_str(), d);
  EXPECT_GT(d, 1e-3);  // float noise of one forward is ~1e-6 here
}

TEST_P(VariantParity, GeneratorOnlyChangeBreaksParity) {
  EngineConfig ec = base_config();
  ec.block_size = 2 * kernels::cpu::kKvBlockSize;
  const Result gen64 = run_all_at_once(*model, c, ec);
  const double d = max_abs_diff(gen64, trainer_logprobs(*model, c, gen64));
  std::printf("%s: generator KV block %d vs trainer %d: max |delta| = %.3g\n", GetParam().c_str(),
              2 * kernels::cpu::kKvBlockSize, kernels::cpu::kKvBlockSize, d);
  EXPECT_GT(d, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantParity, ::testing::Values("window", "sinks", "softcap", "nope", "olmo2",
                                                                   "chunked", "llama4", "gpt_oss"));

// sum_t,v logits[t, v] · G[t, v] accumulated in double.
double functional(const models::Decoder& m, const models::ForwardBatch& fb, const std::vector<float>& g) {
  const auto z = m.logits(m.forward(fb)).to_vector<float>();
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += static_cast<double>(z[i]) * g[i];
  return s;
}

// Central differences (step h) of `functional` against autograd for `count` entries of
// parameter `name`, after multiplying that parameter by `param_scale`.
void finite_difference_check(const std::string& v, const std::string& name, int64_t count, double h = 1e-2,
                             double param_scale = 1.0) {
  auto m = variant_model(variant_config(v));
  if (param_scale != 1.0) {
    autograd::NoGradGuard ng;
    for (auto& [n, q] : m->named_parameters())
      if (n == name) {
        Tensor t = q;
        t.copy_(scale(q.detach().clone(), param_scale));
      }
  }
  const models::ForwardBatch fb = models::make_packed_batch({random_tokens(40, 41), random_tokens(13, 42)});
  const int64_t T = 53, V = 101;
  const Tensor G = Tensor::randn({T, V}, 43);
  const auto g = G.to_vector<float>();
  sum(mul(m->logits(m->forward(fb)), G)).backward();
  Tensor p;
  for (auto& [n, q] : m->named_parameters())
    if (n == name) p = q;
  ASSERT_TRUE(p.defined()) << name;
  const auto grad = p.grad().to_vector<float>();
  autograd::NoGradGuard ng;
  float* w = p.data<float>();
  double worst = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = (i * 7919) % p.numel();
    const float w0 = w[k];
    w[k] = static_cast<float>(w0 + h);
    const double up = functional(*m, fb, g);
    w[k] = static_cast<float>(w0 - h);
    const double down = functional(*m, fb, g);
    w[k] = w0;
    const double fd = (up - down) / (2 * h);
    const double e = std::fabs(fd - grad[static_cast<size_t>(k)]) / std::max(1.0, std::fabs(fd));
    worst = std::max(worst, e);
    EXPECT_LT(e, 2e-2) << name << "[" << k << "]: finite difference " << fd << ", autograd " << grad[k];
  }
  std::printf("%s: %s gradient vs central differences: worst relative error %.3g\n", v.c_str(), name.c_str(), worst);
}

TEST(VariantGradients, SinkLogitsMatchFiniteDifferences) { finite_difference_check("sinks", "layers.1.attention.sinks", 4); }

TEST(VariantGradients, ChunkedAttentionQueriesAndKeysMatchFiniteDifferences) {
  finite_difference_check("chunked", "layers.0.attention.wq.weight", 4);
  finite_difference_check("chunked", "layers.2.attention.wk.weight", 4);
}

TEST(VariantGradients, Llama4ExpertsAndChunkedQueriesMatchFiniteDifferences) {
  finite_difference_check("llama4", "layers.1.moe.experts.w1", 4);
  finite_difference_check("llama4", "layers.0.attention.wq.weight", 4);
}

// The Llama 4 router weight (sigmoid weight scaling the expert's input): central
// differences against autograd, over entries whose perturbation changes no token's
// top-1 expert (a flip is a jump, not a derivative); router logits spread x10.
TEST(VariantGradients, Llama4RouterWeightMatchesFiniteDifferences) {
  auto m = variant_model(variant_config("llama4"));
  const std::string name = "layers.1.moe.router.gate.weight";
  Tensor p;
  for (auto& [n, q] : m->named_parameters())
    if (n == name) p = q;
  ASSERT_TRUE(p.defined());
  {
    autograd::NoGradGuard ng;
    p.copy_(scale(p.detach().clone(), 10.0));
  }
  models::ForwardBatch fb = models::make_packed_batch({random_tokens(40, 41), random_tokens(13, 42)});
  const Tensor G = Tensor::randn({53, 101}, 43);
  const auto g = G.to_vector<float>();
  sum(mul(m->logits(m->forward(fb)), G)).backward();
  const auto grad = p.grad().to_vector<float>();
  autograd::NoGradGuard ng;
  auto eval = [&](std::vector<int32_t>& routing) {
    std::vector<Tensor> routed;
    fb.routed_experts = &routed;
    const double f = functional(*m, fb, g);
    fb.routed_experts = nullptr;
    routing = routed.at(1).to_vector<int32_t>();
    return f;
  };
  std::vector<int32_t> r0, ru, rd;
  eval(r0);
  float* w = p.data<float>();
  const double h = 1e-2;
  int checked = 0, skipped = 0;
  double worst = 0;
  for (int64_t i = 0; checked < 6 && i < 64; ++i) {
    const int64_t k = (i * 7919) % p.numel();
    const float w0 = w[k];
    w[k] = static_cast<float>(w0 + h);
    const double up = eval(ru);
    w[k] = static_cast<float>(w0 - h);
    const double down = eval(rd);
    w[k] = w0;
    if (ru != r0 || rd != r0) {
      ++skipped;
      continue;
    }
    const double fd = (up - down) / (2 * h);
    const double e = std::fabs(fd - grad[static_cast<size_t>(k)]) / std::max(0.1, std::fabs(fd));
    worst = std::max(worst, e);
    EXPECT_LT(e, 2e-2) << name << "[" << k << "]: finite difference " << fd << ", autograd " << grad[k];
    ++checked;
  }
  EXPECT_EQ(checked, 6);
  std::printf("llama4: %s gradient vs central differences: %d entries (%d skipped for a routing flip), worst "
              "relative error %.3g\n", name.c_str(), checked, skipped, worst);
}

TEST(VariantGradients, GptOssExpertAndOutputBiasesMatchFiniteDifferences) {
  finite_difference_check("gpt_oss", "layers.0.moe.experts.b1", 4);
  finite_difference_check("gpt_oss", "layers.1.attention.wo.bias", 4);
}

TEST(VariantGradients, NopeTemperatureTunedQueriesMatchFiniteDifferences) {
  finite_difference_check("nope", "layers.1.attention.wq.weight", 4);
}

}  // namespace
