// The long_context workload (titan/rl/long_context.h): seeded haystacks with distinct
// keys and the answer in exactly one line, 4k- and 16k-token prompts in the byte_chat
// tokenizer, the exact-match rubric (a throwing reward scored 0 with the reason),
// and a GRPO run on ~2k-token prompts prefilled in 512-token chunks with
// logprob_diff_max == 0.0 at every step.
#include <gtest/gtest.h>

#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/rl/rl_test_util.h"
#include "tests/util/test_files.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/rl/controller.h"
#include "titan/rl/long_context.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

TEST(LongContext, HaystacksAreSeededWithOneLineHoldingTheAnswer) {
  const json cfg{{"num_samples", 50}, {"num_validation", 10}, {"min_pairs", 8}, {"max_pairs", 24}};
  const TaskSpec t = make_task("long_context", cfg);
  std::set<int64_t> sizes;
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    EXPECT_EQ(s.to_json(), t.train->get(i).to_json());
    const json& pairs = s.prompt["pairs"];
    sizes.insert(static_cast<int64_t>(pairs.size()));
    EXPECT_GE(pairs.size(), 8u);
    EXPECT_LE(pairs.size(), 24u);
    std::set<std::string> keys;
    for (const json& p : pairs) {
      EXPECT_TRUE(keys.insert(p[0].get<std::string>()).second) << s.id;
      EXPECT_EQ(p[1].get<std::string>().size(), 3u);
    }
    const std::string key = s.prompt["query"], answer = s.reference["answer"];
    EXPECT_EQ(pairs[s.reference["position"].get<size_t>()][1], answer);
    const std::string prompt = long_context_prompt(s);
    EXPECT_EQ(count(prompt, "\n" + key + ": " + answer + "\n") + (prompt.rfind(key + ": " + answer + "\n", 0) == 0), 1u);
    EXPECT_EQ(count(prompt, "\n"), pairs.size() + 1);
  }
  EXPECT_GE(sizes.size(), 8u);  // the distractor count varies
  EXPECT_NE(t.validation->get(0).to_json()["prompt"], t.train->get(0).to_json()["prompt"]);
}

TEST(LongContext, LetterKeysAreDistinctSingleLettersAndTheSyllableSamplesStay) {
  const json base{{"num_samples", 40}, {"num_validation", 4}, {"min_pairs", 20}, {"max_pairs", 52}};
  json letters = base;
  letters["key_style"] = "letter";
  const TaskSpec t = make_task("long_context", letters), syl = make_task("long_context", base);
  json explicit_syl = base;
  explicit_syl["key_style"] = "syllables";
  const TaskSpec syl2 = make_task("long_context", explicit_syl);
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    std::set<std::string> keys;
    for (const json& p : s.prompt["pairs"]) {
      const std::string k = p[0].get<std::string>();
      ASSERT_EQ(k.size(), 1u) << s.id;
      EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(k[0]))) << k;
      EXPECT_TRUE(keys.insert(k).second) << s.id;
    }
    EXPECT_EQ(s.prompt["pairs"][s.reference["position"].get<size_t>()][1], s.reference["answer"]);
    EXPECT_EQ(syl.train->get(i).to_json(), syl2.train->get(i).to_json());  // "syllables" is the default
    EXPECT_GE(syl.train->get(i).prompt["query"].get<std::string>().size(), 4u);
  }
  letters["max_pairs"] = 53;  // more pairs than letters
  EXPECT_THROW(make_task("long_context", letters), Error);
  letters["max_pairs"] = 8;
  letters["key_style"] = "digits";
  EXPECT_THROW(make_task("long_context", letters), Error);
}

TEST(LongContext, BuildsFourAndSixteenThousandTokenPrompts) {
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  for (const auto& [pairs, lo, hi] : {std::tuple{360, 3600, 4500}, std::tuple{1450, 15000, 17500}}) {
    const TaskSpec t = make_task("long_context", json{{"min_pairs", pairs}, {"max_pairs", pairs},
                                                      {"num_samples", 4}, {"num_validation", 1}});
    const TaskSample s = t.train->get(1);
    Rollout r = t.demonstration_rollout(s, tok.get());
    t.rubric.score(r);
    EXPECT_EQ(r.total_reward, 1.0);
    EXPECT_GE(r.prompt_tokens[0], lo) << pairs;
    EXPECT_LE(r.prompt_tokens[0], hi) << pairs;
    std::printf("%d pairs: %lld prompt tokens\n", pairs, static_cast<long long>(r.prompt_tokens[0]));
  }
}

TEST(LongContext, ExactMatchAndBadInput) {
  const TaskSpec t = make_task("long_context", json{{"num_samples", 4}, {"num_validation", 1}});
  const TaskSample s = t.train->get(0);
  const std::string answer = s.reference["answer"];
  auto score = [&](const std::string& reply) {
    std::unique_ptr<MessageEnv> env = t.make_env();
    Rollout r = run_episode(*env, s, scripted_generator({reply}), {.max_turns = 1});
    t.rubric.score(r);
    return r;
  };
  EXPECT_EQ(score("<answer>" + answer + "</answer>").total_reward, 1.0);
  EXPECT_EQ(score("<answer> " + answer + " </answer>").total_reward, 1.0);
  EXPECT_EQ(score(answer).total_reward, 0.0);
  EXPECT_EQ(score("<answer>" + answer + "0</answer>").total_reward, 0.0);
  Rollout r = score("<answer>" + answer + "</answer>");
  r.sample.reference.erase("answer");
  t.rubric.score(r);
  EXPECT_EQ(r.total_reward, 0.0);
  EXPECT_NE(r.rewards[0].error.find("reference.answer"), std::string::npos) << r.rewards[0].error;
  EXPECT_THROW(make_task("long_context", json{{"min_pairs", 0}}), Error);
  EXPECT_THROW(make_task("long_context", json{{"min_pairs", 10}, {"max_pairs", 5}}), Error);
  EXPECT_THROW(make_task("long_context", json{{"value_digits", 12}}), Error);
  EXPECT_THROW(make_task("long_context", json{{"pairs", 12}}), Error);
}

TEST(LongContext, GrpoOnChunkedPrefillPromptsHasExactLogprobParity) {
  const fs::path dump = test::fresh_dir("long_context_grpo");
  config::JobConfig c = test_util::tiny_job(dump);
  const json cfg{{"num_samples", 64}, {"num_validation", 4}, {"min_pairs", 150}, {"max_pairs", 180}};
  c.training.seq_len = 2560;
  c.training.steps = 2;
  c.generator.max_tokens = 8;
  c.generator.max_num_batched_tokens = 512;  // every prompt is prefilled in 4+ chunks
  c.generator.kv_cache_bytes = 32 << 20;
  c.rl.env = "long_context";
  c.rl.env_config = cfg.dump();
  c.rl.max_turns = 1;
  c.rl.val_freq = 0;
  c.rl.microbatch_tokens = 4096;
  TaskSpec t = make_task("long_context", cfg);
  t.rubric = Rubric({RewardFn{"lower_share", 1.0, test_util::lower_share}});
  RLController ctl(c, t);
  EXPECT_EQ(ctl.run({.print = false}).steps_done, 2);
  const std::vector<json> rows = test_util::step_rows(dump);
  ASSERT_EQ(rows.size(), 2u);
  for (const json& row : rows) {
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
  }
  for (const json& l : test_util::read_jsonl(dump / "rollouts.jsonl"))
    EXPECT_GT(l["prompt"].get<std::string>().size(), 1500u);
}

}  // namespace
}  // namespace titan::rl
