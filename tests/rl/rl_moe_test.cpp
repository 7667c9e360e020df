// RL on a mixture-of-experts model: the generator (the paged-cache engine) records each
// sampled token's routing (CompletionOutput::routed_experts) and the trainer compares it
// with its own packed forward (PolicyUpdateStats::routing_mismatch_frac).
//   - the same weights on both sides: logprob_diff_max == 0.0 and routing_mismatch_frac
//     == 0.0 exactly, with every trained token carrying its routing;
//   - a generator-only change (its copy of layer 0's router gate perturbed) makes both > 0;
//   - the RL controller on a small Qwen3-MoE chat model (recipes/alphabet_sort_moe.json,
//     the alphabet_sort_moe_* recipes' model): both metrics 0.0 at every step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/config/job_config.h"
#include "titan/config/recipes.h"
#include "titan/infer/engine.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/rl/controller.h"
#include "titan/rl/policy_update.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

models::TransformerConfig moe_cfg() {
  models::TransformerConfig c = models::flavor("qwen3_moe", "debugmodel");
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.mlp_only_layers = {1};
  c.max_position_embeddings = 256;
  return c;
}

// Samples 6 completions of 3 prompts on `gen`, trains `trainer` on them.
PolicyUpdateStats roundtrip(const models::Decoder& gen, models::Decoder& trainer, int64_t* routed_width) {
  infer::EngineConfig ec;
  ec.kv_cache_bytes = 8 << 20;
  ec.seed = 3;
  infer::Engine engine(gen, nullptr, ec);
  infer::SamplingParams sp;
  sp.n = 2;
  sp.temperature = 1.0;
  sp.max_tokens = 20;
  sp.ignore_eos = true;
  sp.detokenize = false;
  std::vector<std::vector<int32_t>> prompts = {{5, 17, 42, 9}, {100, 3}, {7, 7, 250, 31, 64, 2, 11}};
  std::map<int64_t, size_t> which;
  for (size_t i = 0; i < prompts.size(); ++i) which[engine.add_request(prompts[i], sp)] = i;
  std::vector<TokenRollout> rolls;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& o : engine.step())
      for (const infer::CompletionOutput& c : o.outputs) {
        if (!c.finished()) continue;
        TokenRollout r;
        TurnTokens t;
        t.prompt_ids = prompts[which.at(o.request_id)];
        t.completion_ids = c.token_ids;
        t.logprobs = c.logprobs;
        t.routed_experts = c.routed_experts;
        t.logprob_temperature = 1.0;
        EXPECT_EQ(c.routed_experts.size() % c.token_ids.size(), 0u);
        *routed_width = static_cast<int64_t>(c.routed_experts.size() / c.token_ids.size());
        r.turns.push_back(std::move(t));
        rolls.push_back(std::move(r));
      }
  EXPECT_EQ(rolls.size(), 6u);
  std::vector<const TokenRollout*> ptrs;
  std::vector<double> adv;
  for (size_t i = 0; i < rolls.size(); ++i) {
    ptrs.push_back(&rolls[i]);
    adv.push_back(i % 2 ? 1.0 : -1.0);
  }
  PolicyUpdateSettings s;
  s.microbatch_tokens = 40;  // several microbatches
  trainer.zero_grad();
  return policy_update_backward(trainer, nullptr, ptrs, adv, s);
}

TEST(RLMoE, GeneratorRoutingEqualsTrainerRoutingAndABreakShows) {
  const models::TransformerConfig cfg = moe_cfg();
  models::Decoder trainer(cfg), gen(cfg);
  trainer.init_weights(21);
  gen.init_weights(21);
  int64_t W = 0;
  const PolicyUpdateStats same = roundtrip(gen, trainer, &W);
  EXPECT_EQ(W, 2 * 2);  // two MoE layers (0 and 2) x top-2
  EXPECT_GT(same.tokens, 0);
  EXPECT_EQ(same.logprob_diff_max, 0.0);
  EXPECT_EQ(same.routing_mismatch_frac, 0.0);

  // Generator-only change: its router of layer 0 moved (the trainer keeps its weights).
  {
    autograd::NoGradGuard ng;
    Tensor g = gen.parameter("layers.0.moe.router.gate.weight");
    g.copy_(Tensor::randn(g.shape(), 99));
  }
  const PolicyUpdateStats broken = roundtrip(gen, trainer, &W);
  EXPECT_GT(broken.logprob_diff_max, 0.0);
  EXPECT_GT(broken.routing_mismatch_frac, 0.0);
  EXPECT_LE(broken.routing_mismatch_frac, 1.0);
  std::printf("parity: diff %.3g mismatch %.3g; broken generator: diff %.3g mismatch %.3g\n", same.logprob_diff_max,
              same.routing_mismatch_frac, broken.logprob_diff_max, broken.routing_mismatch_frac);
}

TEST(RLMoE, ControllerOnAlphabetSortMoeModelHasZeroGapsEveryStep) {
  const fs::path dump = fs::temp_directory_path() / ("titan_rl_moe_" + std::to_string(::getpid()));
  fs::remove_all(dump);
  config::JobConfig c = config::alphabet_sort_moe_grpo();
  c.job.dump_folder = dump.string();
  c.model.hf_config = std::string(TITAN_SOURCE_DIR) + "/recipes/alphabet_sort_moe.json";
  c.rl.init_from = "";  // random init: the metrics, not the reward, are under test
  c.training.seq_len = 512;
  c.training.steps = 3;
  c.generator.max_tokens = 12;
  c.generator.kv_cache_bytes = 16 << 20;
  c.rl.env_config = R"({"num_samples": 256, "num_validation": 8, "max_names": 3})";
  c.rl.group_size = 4;
  c.rl.rollouts_per_step = 8;
  c.rl.val_freq = 0;
  c.rl.microbatch_tokens = 600;
  c.rl.overlong_buffer_len = 2;
  c.checkpoint.enable = false;
  c.metrics.log_freq = 100;
  TaskSpec task = make_task("alphabet_sort", json::parse(c.rl.env_config));
  RLController ctl(c, task);
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_EQ(r.logprob_diff_max, 0.0);
  int rows = 0;
  std::ifstream in(dump / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json row = json::parse(line);
    if (row["step"].get<int64_t>() <= 0) continue;
    ++rows;
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_EQ(row["routing_mismatch_frac"].get<double>(), 0.0) << row.dump();
  }
  EXPECT_EQ(rows, 3);
  fs::remove_all(dump);
}

}  // namespace
}  // namespace titan::rl
