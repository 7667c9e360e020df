// The compaction workload (titan/rl/compaction.h): the environment asks for a summary
// exactly when a turn's context (in the byte_chat tokenizer's tokens) reaches the
// budget and restarts the context as [system, summary, latest message]; without
// compaction the same episodes outgrow the window, with it every context fits; the
// list reward (summary turns skipped, partial credit for early ends, a throwing
// reward scored 0 with the reason), the SFT documents in their own contexts, and a
// GRPO run with compactions and logprob_diff_max == 0.0 at every step.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tests/rl/rl_test_util.h"
#include "tests/util/test_files.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/rl/compaction.h"
#include "titan/rl/controller.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/sft_data.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The recipe's task (titan/config/compaction_recipes.cpp) with fewer samples.
json recipe_config(int64_t budget) {
  return json{{"num_samples", 200}, {"num_validation", 16}, {"min_turns", 4},  {"max_turns", 6},
              {"min_names", 2},     {"max_names", 2},       {"min_new_names", 1}, {"max_new_names", 2},
              {"name_pool", 16},    {"context_budget", budget}};
}

int64_t context_tokens(const Rollout& r, int t) {
  return r.prompt_tokens[static_cast<size_t>(t)] + r.completion_tokens[static_cast<size_t>(t)];
}

TEST(Compaction, SummaryIsAskedForExactlyAtTheBudgetAndTheContextRestarts) {
  const TaskSpec t = make_task("compaction", recipe_config(256));
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  const CompactionOptions opt;
  int64_t compactions = 0, episodes = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const TaskSample s = t.train->get(i);
    Rollout r = t.demonstration_rollout(s, tok.get());
    t.rubric.score(r);
    ASSERT_EQ(r.status, RolloutStatus::completed) << r.failure_reason;
    EXPECT_EQ(r.reward("list"), 1.0) << s.id;
    ++episodes;
    compactions += static_cast<int64_t>(r.reward("compactions"));
    // Walk the turns: a summary turn follows exactly the turns whose context reached
    // the budget (and that were not the last list turn).
    std::vector<size_t> assistant;
    for (size_t m = 0; m < r.messages.size(); ++m)
      if (r.messages[m].role == "assistant") assistant.push_back(m);
    ASSERT_EQ(assistant.size(), static_cast<size_t>(r.num_turns()));
    for (int k = 0; k + 1 < r.num_turns(); ++k) {
      const bool summary_next = is_summary_turn(r.messages, assistant[static_cast<size_t>(k) + 1], opt);
      const bool summary_now = is_summary_turn(r.messages, assistant[static_cast<size_t>(k)], opt);
      if (!summary_now) {
        EXPECT_EQ(summary_next, context_tokens(r, k) >= 256) << s.id << " turn " << k;
      }
      if (summary_now) {
        // The next context is [system, summary, latest message], and the summary is the list so far.
        const size_t b = static_cast<size_t>(r.turn_context_start[static_cast<size_t>(k) + 1]);
        EXPECT_EQ(b, assistant[static_cast<size_t>(k)] + 1);
        ASSERT_EQ(r.messages[b].role, "system");
        ASSERT_EQ(r.messages[b + 1].role, "user");
        EXPECT_EQ(r.messages[b + 1].content.rfind(opt.summary_prefix, 0), 0u);
        const std::string& summary = r.messages[assistant[static_cast<size_t>(k)]].content;
        EXPECT_NE(r.messages[b + 1].content.find(summary.substr(10, summary.size() - 21)), std::string::npos);
        EXPECT_EQ(r.messages[b + 2].content.rfind("Add: ", 0), 0u);
        EXPECT_EQ(b + 3, assistant[static_cast<size_t>(k) + 1]);
        // The restarted context is shorter than the one the summary was written in.
        EXPECT_LT(r.prompt_tokens[static_cast<size_t>(k) + 1], r.prompt_tokens[static_cast<size_t>(k)]);
      }
    }
  }
  EXPECT_GT(compactions, episodes);  // > 1 compaction per episode on average
}

TEST(Compaction, WithoutCompactionTheEpisodesOutgrowTheWindow) {
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  const TaskSpec with = make_task("compaction", recipe_config(256));
  const TaskSpec without = make_task("compaction", recipe_config(0));
  int64_t max_with = 0, max_without = 0, over = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const TaskSample s = with.train->get(i);
    const Rollout a = with.demonstration_rollout(s, tok.get());
    const Rollout b = without.demonstration_rollout(s, tok.get());
    int64_t mb = 0;
    for (int k = 0; k < a.num_turns(); ++k) max_with = std::max(max_with, context_tokens(a, k));
    for (int k = 0; k < b.num_turns(); ++k) mb = std::max(mb, context_tokens(b, k));
    EXPECT_EQ(b.turn_context_start.back(), 0);  // one context
    max_without = std::max(max_without, mb);
    over += mb > 768;
  }
  // The recipe's window is rl.max_total_tokens = 768.
  EXPECT_LT(max_with, 768);
  EXPECT_GT(max_without, 768);
  EXPECT_GT(over, 0);
  std::printf("longest context: %lld tokens with compaction, %lld without; %lld of 40 episodes over 768\n",
              static_cast<long long>(max_with), static_cast<long long>(max_without), static_cast<long long>(over));
}

TEST(Compaction, ListRewardSkipsSummariesAndGivesPartialCredit) {
  const TaskSpec t = make_task("compaction", recipe_config(256));
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  const TaskSample s = t.train->get(3);
  const Rollout full = t.demonstration_rollout(s, tok.get());
  const size_t turns = s.reference["expected"].size();
  // Cut after the first list reply: 1 of `turns` turns right.
  Rollout cut = full;
  auto second = std::find_if(cut.messages.begin() + 3, cut.messages.end(),
                             [](const ChatMessage& m) { return m.role == "assistant"; });
  cut.messages.erase(second, cut.messages.end());
  cut.status = RolloutStatus::truncated_max_tokens;
  t.rubric.score(cut);
  EXPECT_DOUBLE_EQ(cut.reward("list"), 1.0 / static_cast<double>(turns));
  // A reply without <list> scores 0 for its turn; a wrong name costs difflib's ratio.
  Rollout bad = full;
  bad.messages[2].content = "BrunoAdams";
  t.rubric.score(bad);
  EXPECT_DOUBLE_EQ(bad.reward("list"), (static_cast<double>(turns) - 1) / static_cast<double>(turns));
  // A sample the reward cannot read: 0 with the reason, the other component still runs.
  Rollout broken = full;
  broken.sample.reference.erase("expected");
  t.rubric.score(broken);
  EXPECT_EQ(broken.total_reward, 0.0);
  EXPECT_NE(broken.rewards[0].error.find("reference.expected"), std::string::npos) << broken.rewards[0].error;
  EXPECT_GE(broken.reward("compactions"), 0.0);
  EXPECT_THROW(make_task("compaction", json{{"context_budget", -1}}), Error);
  EXPECT_THROW(make_task("compaction", json{{"min_turns", 0}}), Error);
  EXPECT_THROW(make_task("compaction", json{{"budget", 10}}), Error);
}

TEST(Compaction, SftDocumentsTrainEachTurnInItsOwnContext) {
  const TaskSpec t = make_task("compaction", recipe_config(256));
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  VectorSource src("few", {t.train->get(0), t.train->get(1), t.train->get(2), t.train->get(3)});
  const data::MaskedDocuments docs = sft_documents(t, src, *tok);
  int64_t n = 0, restarted = 0;
  for (int64_t i = 0; i < src.size(); ++i) {
    const Rollout r = t.demonstration_rollout(src.get(i), tok.get());
    for (int k = 0; k < r.num_turns(); ++k) {
      std::vector<int32_t> ctx, target;
      for (int64_t j = docs.offsets[static_cast<size_t>(n)]; j < docs.offsets[static_cast<size_t>(n) + 1]; ++j)
        (docs.loss_mask[static_cast<size_t>(j)] ? target : ctx).push_back(docs.tokens[static_cast<size_t>(j)]);
      ++n;
      EXPECT_EQ(tok->decode(target), r.completions[static_cast<size_t>(k)] + "<|im_end|>");
      EXPECT_EQ(static_cast<int64_t>(ctx.size()), r.prompt_tokens[static_cast<size_t>(k)]);
      const std::string context = tok->decode(ctx);
      if (r.turn_context_start[static_cast<size_t>(k)] > 0) {
        ++restarted;
        EXPECT_EQ(context.find("Names: "), std::string::npos);  // the first turn is gone
        EXPECT_NE(context.find("Summary of the earlier turns:"), std::string::npos);
      }
    }
  }
  EXPECT_EQ(n, docs.size());
  EXPECT_GT(restarted, 0);
}

TEST(Compaction, GrpoWithCompactionsHasExactLogprobParity) {
  const fs::path dump = test::fresh_dir("compaction_grpo");
  config::JobConfig c = test_util::tiny_job(dump);
  json cfg = recipe_config(120);  // the random model's contexts pass it after one turn
  cfg["max_turns"] = 4;
  c.training.steps = 2;
  c.generator.max_tokens = 160;  // the random model stops (<|im_end|>) in about half its replies
  c.rl.env = "compaction";
  c.rl.env_config = cfg.dump();
  c.rl.max_turns = 7;
  c.rl.max_total_tokens = 1024;
  c.rl.val_freq = 2;
  c.rl.val_samples = 4;
  c.rl.max_error_fraction = 1.0;
  TaskSpec t = make_task("compaction", cfg);
  t.rubric = Rubric({RewardFn{"lower_share", 1.0, test_util::lower_share},
                     RewardFn{"compactions", 0.0, [](const Rollout& r) { return compaction_count(r, {}); }}});
  RLController ctl(c, t);
  EXPECT_EQ(ctl.run({.print = false}).steps_done, 2);
  const std::vector<json> rows = test_util::step_rows(dump);
  ASSERT_EQ(rows.size(), 2u);
  for (const json& row : rows) {
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
  }
  EXPECT_TRUE(rows.back().contains("val_compactions"));
  // Every first turn's context passes the budget, so a rollout of 3+ turns asked for a
  // summary and went on in a restarted context (the rollouter's reset path).
  int restarted = 0;
  for (const json& l : test_util::read_jsonl(dump / "rollouts.jsonl")) restarted += l["completions"].size() >= 3;
  EXPECT_GT(restarted, 0);
}

}  // namespace
}  // namespace titan::rl
