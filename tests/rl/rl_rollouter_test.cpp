// The rollouter over a real engine with a tiny random Qwen3-style model and the
// byte_chat tokenizer: prompts are the rendered conversations, logprobs equal the
// trainer's bitwise, results do not depend on what else is in the call, failures
// (throwing reward, malformed environment, max_tokens, max_turns) are recorded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/infer/engine.h"
#include "titan/models/common/decoder.h"
#include "titan/ops/loss.h"
#include "titan/rl/rollouter.h"

namespace titan::rl {
namespace {

// Short multi-turn conversations: "turns" user questions; done after the last reply.
// prompt.bad = "assistant" makes step() return an assistant message (malformed).
class ShortEnv : public MessageEnv {
 public:
  std::vector<ChatMessage> init(const TaskSample& s) override {
    turns_ = s.prompt.value("turns", 1);
    bad_ = s.prompt.value("bad", std::string());
    if (bad_ == "init") throw std::runtime_error("no such sample");
    return {{"system", "Be brief.", std::nullopt}, {"user", "Q0 " + s.id, std::nullopt}};
  }
  StepResult step(const std::string& reply) override {
    ++done_;
    if (done_ >= turns_) return {{}, true};
    const std::string role = bad_ == "assistant" ? "assistant" : "user";
    return {{{role, "Q" + std::to_string(done_) + " (you said " + std::to_string(reply.size()) + " bytes)",
              std::nullopt}},
            false};
  }

 private:
  int turns_ = 1, done_ = 0;
  std::string bad_;
};

TaskSample make_sample(int i, int turns, const std::string& bad = "") {
  TaskSample s;
  s.id = "short/" + std::to_string(i);
  s.prompt = {{"turns", turns}, {"bad", bad}};
  return s;
}

// Reward: completion bytes / 10 of the first turn; throws for sample "short/13".
double length_reward(const Rollout& r) {
  if (r.sample.id == "short/13") throw std::runtime_error("reward exploded");
  return r.completions.empty() ? 0.0 : static_cast<double>(r.completions[0].size()) / 10.0;
}

TaskSpec short_task() {
  std::vector<TaskSample> val;
  for (int i = 0; i < 4; ++i) val.push_back(make_sample(100 + i, 1 + i % 2));
  return TaskSpec{"short",
                  std::make_shared<VectorSource>("short/train", std::vector<TaskSample>{make_sample(0, 1)}),
                  std::make_shared<VectorSource>("short/validation", val),
                  [] { return std::make_unique<ShortEnv>(); },
                  Rubric({RewardFn{"length", 1.0, length_reward}}),
                  3,
                  nullptr};
}

models::TransformerConfig tiny_config() {
  models::TransformerConfig c;
  c.family = "qwen3";
  c.vocab_size = 263;  // byte_chat
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 512;
  c.rope_theta = 10000;
  c.qk_norm = true;
  c.tie_word_embeddings = true;
  return c;
}

// Sampling that ends most completions within a few tokens: lower-case letters stop.
infer::SamplingParams quick_stops(int64_t max_tokens = 16) {
  infer::SamplingParams p;
  p.temperature = 1.0;
  p.max_tokens = max_tokens;
  p.seed = 77;
  for (int32_t c = 'a'; c <= 'z'; ++c) p.stop_token_ids.push_back(c);
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same(const std::vector<TokenRollout>& a, const std::vector<TokenRollout>& b, size_t n,
                 const std::string& what) {
  ASSERT_GE(a.size(), n) << what;
  ASSERT_GE(b.size(), n) << what;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(a[i].rollout.id, b[i].rollout.id) << what;
    EXPECT_EQ(a[i].rollout.status, b[i].rollout.status) << what << " rollout " << i;
    EXPECT_EQ(a[i].rollout.completions, b[i].rollout.completions) << what << " rollout " << i;
    ASSERT_EQ(a[i].turns.size(), b[i].turns.size()) << what << " rollout " << i;
    for (size_t t = 0; t < a[i].turns.size(); ++t) {
      EXPECT_EQ(a[i].turns[t].prompt_ids, b[i].turns[t].prompt_ids) << what;
      EXPECT_EQ(a[i].turns[t].completion_ids, b[i].turns[t].completion_ids) << what << " rollout " << i;
      EXPECT_TRUE(same_bits(a[i].turns[t].logprobs, b[i].turns[t].logprobs)) << what << " rollout " << i;
    }
  }
}

class RolloutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok = data::load_tokenizer("byte_chat");
    model = std::make_unique<models::Decoder>(tiny_config());
    model->init_weights(5);
  }
  infer::Engine make_engine(int64_t budget = 2048) {
    infer::EngineConfig ec;
    ec.kv_cache_bytes = 16 << 20;
    ec.max_num_batched_tokens = budget;
    ec.seed = 9;
    return infer::Engine(*model, tok.get(), ec);
  }
  std::unique_ptr<data::Tokenizer> tok;
  std::unique_ptr<models::Decoder> model;
};

TEST_F(RolloutTest, PromptsAreTheRenderedConversationAndLogprobsMatchTheTrainer) {
  Rollouter ro(short_task(), *tok);
  infer::Engine engine = make_engine();
  std::vector<TaskSample> samples = {make_sample(0, 2), make_sample(1, 3), make_sample(2, 1)};
  RolloutConfig rc;
  rc.group_size = 3;
  rc.sampling = quick_stops();
  rc.sampling.temperature = 0.9;
  rc.limits.max_turns = 3;
  const std::vector<TokenRollout> out = ro.run(engine, samples, rc, /*policy_version=*/7);
  ASSERT_EQ(out.size(), 9u);
  EXPECT_FALSE(engine.has_unfinished());
  int multi_turn = 0;
  std::vector<std::vector<int32_t>> docs;
  std::vector<std::pair<size_t, size_t>> which;  // (rollout, turn) of each doc
  for (size_t i = 0; i < out.size(); ++i) {
    const TokenRollout& t = out[i];
    EXPECT_EQ(t.group, static_cast<int64_t>(i / 3));
    EXPECT_EQ(t.policy_version, 7);
    EXPECT_EQ(t.rollout.id, "group=" + std::to_string(i / 3) + "/rollout=" + std::to_string(i % 3));
    EXPECT_EQ(t.rollout.sample.id, samples[i / 3].id);
    ASSERT_EQ(static_cast<int>(t.turns.size()), t.rollout.num_turns());
    multi_turn += t.rollout.num_turns() > 1;
    // Turn k's prompt is the conversation before the k-th assistant message, rendered.
    size_t k = 0;
    for (size_t m = 0; m < t.rollout.messages.size(); ++m) {
      if (t.rollout.messages[m].role != "assistant") continue;
      ASSERT_LT(k, t.turns.size());
      const TurnTokens& tt = t.turns[k];
      const std::vector<ChatMessage> before(t.rollout.messages.begin(), t.rollout.messages.begin() + m);
      EXPECT_EQ(tok->decode(tt.prompt_ids),
                tok->apply_chat_template(before, {.add_generation_prompt = true, .enable_thinking = false}));
      EXPECT_EQ(tt.prompt_ids, render_prompt_ids(*tok, before, false));
      EXPECT_EQ(tt.logprobs.size(), tt.completion_ids.size());
      EXPECT_EQ(t.rollout.completion_tokens[k], static_cast<int64_t>(tt.completion_ids.size()));
      EXPECT_EQ(t.rollout.prompt_tokens[k], static_cast<int64_t>(tt.prompt_ids.size()));
      EXPECT_EQ(tt.finish_reason, t.rollout.finish_reasons[k]);
      if (tt.finish_reason == "stop") {  // the stop token is kept in the ids, not in the text
        EXPECT_EQ(t.rollout.completions[k],
                  tok->decode(std::vector<int32_t>(tt.completion_ids.begin(), tt.completion_ids.end() - 1)));
      }
      std::vector<int32_t> d = tt.prompt_ids;
      d.insert(d.end(), tt.completion_ids.begin(), tt.completion_ids.end());
      docs.push_back(d);
      which.emplace_back(i, k);
      ++k;
    }
    EXPECT_EQ(k, t.turns.size());
  }
  EXPECT_GT(multi_turn, 0);
  // Trainer side: every turn's prompt + completion packed in reverse order, forward with
  // autograd on, THE logprob function on the rows predicting the completion.
  std::vector<std::vector<int32_t>> packed(docs.rbegin(), docs.rend());
  Tensor hidden = model->forward(models::make_packed_batch(packed));
  EXPECT_TRUE(hidden.requires_grad());
  int64_t start = 0;
  double max_diff = 0;
  for (size_t j = docs.size(); j-- > 0;) {
    const TurnTokens& tt = out[which[j].first].turns[which[j].second];
    const int64_t P = static_cast<int64_t>(tt.prompt_ids.size()), n = static_cast<int64_t>(tt.completion_ids.size());
    Tensor lp = titan::logprobs(hidden.narrow(0, start + P - 1, n), model->lm_head_weight(),
                                Tensor::from_vector(tt.completion_ids, {n}), tt.logprob_temperature);
    const std::vector<float> trainer = lp.to_vector<float>();
    EXPECT_TRUE(same_bits(trainer, tt.logprobs)) << "rollout " << which[j].first << " turn " << which[j].second;
    for (int64_t q = 0; q < n; ++q)
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(trainer[q]) - tt.logprobs[q]));
    start += static_cast<int64_t>(docs[j].size());
  }
  std::printf("turns checked: %zu, max |logprob diff| generator vs trainer = %g\n", docs.size(), max_diff);
  EXPECT_EQ(max_diff, 0.0);
}

TEST_F(RolloutTest, ResultsDoNotDependOnTheOtherSamplesInTheCall) {
  Rollouter ro(short_task(), *tok);
  RolloutConfig rc;
  rc.group_size = 2;
  rc.sampling = quick_stops();
  rc.limits.max_turns = 3;
  const std::vector<TaskSample> s = {make_sample(0, 2), make_sample(1, 3), make_sample(2, 2)};
  infer::Engine e1 = make_engine();
  const auto alone = ro.run(e1, std::span(s.data(), 1), rc, 0);
  infer::Engine e2 = make_engine(/*budget=*/64);  // other chunking of the prefills too
  const auto pair = ro.run(e2, std::span(s.data(), 2), rc, 0);
  infer::Engine e3 = make_engine();
  const auto all = ro.run(e3, s, rc, 0);
  ASSERT_EQ(alone.size(), 2u);
  ASSERT_EQ(pair.size(), 4u);
  ASSERT_EQ(all.size(), 6u);
  expect_same(alone, all, 2, "sample 0 alone vs with two others");
  expect_same(pair, all, 4, "samples 0-1 vs with a third");
  // Siblings and turns get distinct seeds, so the group is not 2 copies.
  EXPECT_NE(all[0].turns[0].seed, all[1].turns[0].seed);
  EXPECT_NE(all[0].turns[0].completion_ids, all[1].turns[0].completion_ids);
  // The same engine reused for a second call gives the same results.
  const auto again = ro.run(e1, s, rc, 0);
  expect_same(again, all, 6, "second call on a used engine");
}

TEST_F(RolloutTest, ThrowingRewardScoresZeroWithTheReason) {
  Rollouter ro(short_task(), *tok);
  infer::Engine engine = make_engine();
  RolloutConfig rc;
  rc.group_size = 2;
  rc.sampling = quick_stops();
  const std::vector<TaskSample> s = {make_sample(13, 1), make_sample(14, 1)};
  const auto out = ro.run(engine, s, rc, 0);
  ASSERT_EQ(out.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(out[i].rollout.rewards.size(), 1u);
    EXPECT_EQ(out[i].rollout.total_reward, 0.0);
    EXPECT_EQ(out[i].rollout.rewards[0].value, 0.0);
    EXPECT_NE(out[i].rollout.rewards[0].error.find("reward exploded"), std::string::npos)
        << out[i].rollout.rewards[0].error;
  }
  for (int i = 2; i < 4; ++i) {
    EXPECT_TRUE(out[i].rollout.rewards[0].error.empty());
    EXPECT_DOUBLE_EQ(out[i].rollout.total_reward, out[i].rollout.completions[0].size() / 10.0);
  }
}

TEST_F(RolloutTest, CompletionCutAtMaxTokensIsTruncatedLength) {
  Rollouter ro(short_task(), *tok);
  infer::Engine engine = make_engine();
  RolloutConfig rc;
  rc.group_size = 4;
  rc.sampling.temperature = 1.0;
  rc.sampling.seed = 3;
  rc.sampling.max_tokens = 3;  // only <|im_end|> stops: almost every completion is cut
  const std::vector<TaskSample> s = {make_sample(0, 2)};
  const auto out = ro.run(engine, s, rc, 0);
  int cut = 0;
  for (const auto& t : out) {
    if (t.turns.back().finish_reason != "length") continue;
    ++cut;
    EXPECT_EQ(t.rollout.status, RolloutStatus::truncated_length);
    EXPECT_EQ(t.turns.back().completion_ids.size(), 3u);
    EXPECT_NE(t.rollout.failure_reason.find("max_tokens"), std::string::npos);
    EXPECT_EQ(t.rollout.num_turns(), 1);  // the cut completion is not passed to the env
  }
  EXPECT_GT(cut, 0);
}

TEST_F(RolloutTest, EnvironmentFailuresAndTurnCap) {
  Rollouter ro(short_task(), *tok);
  infer::Engine engine = make_engine();
  RolloutConfig rc;
  rc.group_size = 1;
  rc.sampling = quick_stops();
  rc.sampling.ignore_eos = false;
  rc.limits.max_turns = 2;
  // Every completion stops (all byte ids stop), so the env is always reached.
  rc.sampling.stop_token_ids.clear();
  for (int32_t c = 0; c < 256; ++c) rc.sampling.stop_token_ids.push_back(c);
  const std::vector<TaskSample> s = {make_sample(0, 2, "assistant"), make_sample(1, 1, "init"), make_sample(2, 5),
                                     make_sample(3, 2)};
  const auto out = ro.run(engine, s, rc, 0);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].rollout.status, RolloutStatus::error);
  EXPECT_NE(out[0].rollout.failure_reason.find("env.step"), std::string::npos) << out[0].rollout.failure_reason;
  EXPECT_EQ(out[0].rollout.total_reward, out[0].rollout.rewards[0].value);
  EXPECT_EQ(out[1].rollout.status, RolloutStatus::error);
  EXPECT_NE(out[1].rollout.failure_reason.find("no such sample"), std::string::npos);
  EXPECT_TRUE(out[1].turns.empty());
  EXPECT_EQ(out[2].rollout.status, RolloutStatus::truncated_max_turns);
  EXPECT_EQ(out[2].turns.size(), 2u);
  EXPECT_EQ(out[3].rollout.status, RolloutStatus::completed);
  EXPECT_EQ(out[3].turns.size(), 2u);
  // Bad configs are errors before anything runs.
  RolloutConfig bad = rc;
  bad.group_size = 0;
  EXPECT_THROW(ro.run(engine, s, bad, 0), Error);
  bad = rc;
  bad.sampling.n = 2;
  EXPECT_THROW(ro.run(engine, s, bad, 0), Error);
}

TEST_F(RolloutTest, ValidationRewardIsTheGreedyMean) {
  Rollouter ro(short_task(), *tok);
  infer::Engine engine = make_engine();
  const ValidationResult v = validation_reward(engine, ro, 3, {.max_turns = 3}, 12);
  ASSERT_EQ(v.episodes, 3);
  double sum = 0;
  for (const auto& t : v.rollouts) sum += t.rollout.total_reward;
  EXPECT_DOUBLE_EQ(v.reward_mean, sum / 3);
  EXPECT_EQ(v.rollouts[2].rollout.sample.id, "short/102");
  // Greedy: the same again, and n <= 0 takes the whole split.
  infer::Engine engine2 = make_engine(100);
  const ValidationResult all = validation_reward(engine2, ro, 0, {.max_turns = 3}, 12);
  EXPECT_EQ(all.episodes, 4);
  expect_same(v.rollouts, all.rollouts, 3, "greedy validation");
}

TEST(EpisodeSeed, DistinctPerGroupIndexAndTurn) {
  std::set<uint64_t> seen;
  for (int g = 0; g < 4; ++g)
    for (int k = 0; k < 4; ++k)
      for (int t = 0; t < 4; ++t) seen.insert(episode_seed(1, g, k, t));
  EXPECT_EQ(seen.size(), 64u);
  EXPECT_EQ(episode_seed(1, 2, 3, 1), episode_seed(1, 2, 3, 1));
  EXPECT_NE(episode_seed(1, 2, 3, 1), episode_seed(2, 2, 3, 1));
}

}  // namespace
}  // namespace titan::rl
