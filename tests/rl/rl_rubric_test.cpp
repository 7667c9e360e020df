// Rubrics and the episode loop: weighted sums, failing reward functions, the
// caller-enforced caps, and every way an environment or generator can misbehave.
#include <cmath>
#include <limits>
#include <stdexcept>

#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/rl/rubric.h"

namespace titan::rl {
namespace {

using nlohmann::json;

// Asks "say N" for N = 1..turns; done after the last. Misbehaves on request.
class CountingEnv : public MessageEnv {
 public:
  enum class Bad { none, assistant_role, invalid_utf8, throw_in_step, empty_init, empty_step, unknown_role };
  explicit CountingEnv(int turns, Bad bad = Bad::none) : turns_(turns), bad_(bad) {}
  std::vector<ChatMessage> init(const TaskSample&) override {
    if (bad_ == Bad::empty_init) return {};
    return {{"system", "count", std::nullopt}, {"user", "say 1", std::nullopt}};
  }
  StepResult step(const std::string& reply) override {
    replies.push_back(reply);
    if (bad_ == Bad::throw_in_step) throw std::runtime_error("env exploded");
    if (static_cast<int>(replies.size()) >= turns_) return {{}, true};
    const std::string next = "say " + std::to_string(replies.size() + 1);
    switch (bad_) {
      case Bad::assistant_role: return {{{"assistant", next, std::nullopt}}, false};
      case Bad::unknown_role: return {{{"robot", next, std::nullopt}}, false};
      case Bad::invalid_utf8: return {{{"user", "bad \xff byte", std::nullopt}}, false};
      case Bad::empty_step: return {{}, false};
      default: return {{{"user", next, std::nullopt}}, false};
    }
  }
  std::vector<std::string> replies;

 private:
  int turns_;
  Bad bad_;
};

// Replies with the number asked for; reports token counts (prompt grows 10 per turn).
Completion counter(const GenerateRequest& req) {
  const std::string& last = req.messages.back().content;
  return Completion{last.substr(4), "stop", 10 * (req.turn + 1), 5};
}

TaskSample sample() {
  TaskSample s;
  s.id = "count/0";
  return s;
}

TEST(RunEpisode, MultiTurnCompletes) {
  CountingEnv env(3);
  Rollout r = run_episode(env, sample(), counter, {.max_turns = 5});
  EXPECT_EQ(r.status, RolloutStatus::completed);
  EXPECT_EQ(r.failure_reason, "");
  EXPECT_EQ(r.completions, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(r.finish_reasons, (std::vector<std::string>{"stop", "stop", "stop"}));
  EXPECT_EQ(r.prompt_tokens, (std::vector<int64_t>{10, 20, 30}));
  ASSERT_EQ(r.messages.size(), 2u + 3u + 2u);  // system, user, then (assistant, user) x2, assistant
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[3].content, "say 2");
  EXPECT_EQ(r.messages.back().role, "assistant");
  EXPECT_EQ(r.sample.id, "count/0");
  const json j = r.to_json();
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["completions"].size(), 3u);
}

TEST(RunEpisode, CallerEnforcedCaps) {
  CountingEnv env(10);
  Rollout r = run_episode(env, sample(), counter, {.max_turns = 2});
  EXPECT_EQ(r.status, RolloutStatus::truncated_max_turns);
  EXPECT_EQ(r.num_turns(), 2);
  EXPECT_NE(r.failure_reason.find("max_turns=2"), std::string::npos) << r.failure_reason;

  CountingEnv env2(10);
  r = run_episode(env2, sample(), counter, {.max_turns = 10, .max_total_tokens = 25});
  EXPECT_EQ(r.status, RolloutStatus::truncated_max_tokens);
  EXPECT_EQ(r.num_turns(), 2);  // turn 1: 20 + 5 >= 25
  EXPECT_NE(r.failure_reason.find("max_total_tokens=25"), std::string::npos) << r.failure_reason;

  CountingEnv env3(1);
  EXPECT_THROW(run_episode(env3, sample(), counter, {.max_turns = 0}), Error);
  EXPECT_THROW(run_episode(env3, sample(), counter, {.max_turns = 1, .max_total_tokens = -1}), Error);
}

TEST(RunEpisode, LengthCutIsNotStepped) {
  CountingEnv env(3);
  auto gen = [](const GenerateRequest& req) {
    return req.turn == 1 ? Completion{"<answer>\n2\n", "length", 20, 64} : counter(req);
  };
  Rollout r = run_episode(env, sample(), gen, {.max_turns = 5});
  EXPECT_EQ(r.status, RolloutStatus::truncated_length);
  EXPECT_EQ(env.replies.size(), 1u);  // the cut reply never reached the env
  EXPECT_EQ(r.finish_reasons.back(), "length");
  EXPECT_EQ(r.completions.back(), "<answer>\n2\n");
  EXPECT_NE(r.failure_reason.find("cut at max_tokens"), std::string::npos) << r.failure_reason;
}

TEST(RunEpisode, MisbehavingEnvOrGeneratorEndsAsError) {
  using Bad = CountingEnv::Bad;
  const std::vector<std::pair<Bad, std::string>> cases = {
      {Bad::assistant_role, "role 'assistant'"}, {Bad::unknown_role, "role 'robot'"},
      {Bad::invalid_utf8, "not valid UTF-8"},    {Bad::throw_in_step, "env exploded"},
      {Bad::empty_init, "env.init failed"},      {Bad::empty_step, "returned no messages"}};
  for (const auto& [bad, want] : cases) {
    CountingEnv env(3, bad);
    Rollout r = run_episode(env, sample(), counter, {.max_turns = 5});
    EXPECT_EQ(r.status, RolloutStatus::error) << want;
    EXPECT_NE(r.failure_reason.find(want), std::string::npos) << r.failure_reason;
  }
  CountingEnv env(3);
  Rollout r = run_episode(env, sample(), [](const GenerateRequest&) -> Completion { throw Error("engine down"); });
  EXPECT_EQ(r.status, RolloutStatus::error);
  EXPECT_EQ(r.failure_reason, "turn 0: generate failed: engine down");
  CountingEnv env2(3);
  r = run_episode(env2, sample(), scripted_generator({"1"}));
  EXPECT_EQ(r.status, RolloutStatus::error);
  EXPECT_NE(r.failure_reason.find("finish_reason='abort'"), std::string::npos) << r.failure_reason;
}

Rollout finished(RolloutStatus st = RolloutStatus::completed) {
  Rollout r;
  r.id = "g/0";
  r.sample = sample();
  r.completions = {"42"};
  r.status = st;
  return r;
}

TEST(Rubric, WeightedSumAndBreakdown) {
  Rubric rubric({{"a", 2.0, [](const Rollout&) { return 0.5; }}, {"b", 0.25, [](const Rollout&) { return 1.0; }}});
  Rollout r = finished();
  rubric.score(r);
  ASSERT_EQ(r.rewards.size(), 2u);
  EXPECT_EQ(r.rewards[0].name, "a");
  EXPECT_EQ(r.rewards[0].value, 0.5);
  EXPECT_EQ(r.rewards[1].weight, 0.25);
  EXPECT_EQ(r.total_reward, 2.0 * 0.5 + 0.25 * 1.0);
  EXPECT_EQ(r.reward("b"), 1.0);
  EXPECT_THROW(r.reward("c"), Error);
  rubric.score(r);  // re-scoring replaces, not appends
  EXPECT_EQ(r.rewards.size(), 2u);
}

TEST(Rubric, ThrowingOrNonFiniteRewardGivesZeroWithReason) {
  Rubric rubric({{"throws", 1.0, [](const Rollout&) -> double { throw Error("no answer tag"); }},
                 {"nan", 1.0, [](const Rollout&) { return std::numeric_limits<double>::quiet_NaN(); }},
                 {"weird", 1.0, [](const Rollout&) -> double { throw 7; }},
                 {"good", 1.0, [](const Rollout&) { return 1.0; }}});
  std::vector<Rollout> group{finished(), finished()};
  rubric.score_group(group);
  for (const Rollout& r : group) {
    EXPECT_EQ(r.total_reward, 1.0);
    EXPECT_EQ(r.rewards[0].value, 0.0);
    EXPECT_EQ(r.rewards[0].error, "threw: no answer tag");
    EXPECT_EQ(r.rewards[1].value, 0.0);
    EXPECT_EQ(r.rewards[1].error, "returned nan");
    EXPECT_EQ(r.rewards[2].error, "threw: unknown exception");
    EXPECT_EQ(r.rewards[3].error, "");
    EXPECT_EQ(r.to_json()["rewards"][0]["error"], "threw: no answer tag");
  }
}

TEST(Rubric, TruncationAndErrorRewardsShortCircuit) {
  int calls = 0;
  Rubric rubric({{"r", 1.0, [&](const Rollout&) { ++calls; return 1.0; }}},
                RubricOptions{.truncation_reward = -0.5, .error_reward = -1.0});
  Rollout t = finished(RolloutStatus::truncated_length), e = finished(RolloutStatus::error),
          ok = finished(RolloutStatus::completed);
  rubric.score(t);
  rubric.score(e);
  rubric.score(ok);
  EXPECT_EQ(t.total_reward, -0.5);
  EXPECT_EQ(t.rewards[0].name, "truncated");
  EXPECT_EQ(e.total_reward, -1.0);
  EXPECT_EQ(e.rewards[0].name, "errored");
  EXPECT_EQ(ok.total_reward, 1.0);
  EXPECT_EQ(calls, 1);
  // Without the options the functions run on truncated rollouts too.
  Rubric plain({{"r", 1.0, [&](const Rollout&) { ++calls; return 1.0; }}});
  plain.score(t);
  EXPECT_EQ(t.total_reward, 1.0);
}

TEST(Rubric, ConstructorChecks) {
  auto f = [](const Rollout&) { return 1.0; };
  EXPECT_THROW(Rubric({}), Error);
  EXPECT_THROW(Rubric({{"", 1.0, f}}), Error);
  EXPECT_THROW(Rubric({{"a", 1.0, f}, {"a", 2.0, f}}), Error);
  EXPECT_THROW(Rubric({{"a", 1.0, nullptr}}), Error);
  EXPECT_THROW(Rubric({{"a", std::nan(""), f}}), Error);
  EXPECT_THROW(Rubric({{"a", 1.0, f}}, RubricOptions{.truncation_reward = INFINITY, .error_reward = std::nullopt}), Error);
  try {
    Rubric({{"a", 1.0, f}, {"a", 2.0, f}});
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Rubric: duplicate reward function name 'a'");
  }
}

}  // namespace
}  // namespace titan::rl
