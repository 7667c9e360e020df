// gsm8k: answer extraction and number comparison, the loader, and the whole test
// split scored through the task's environment and rubric.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/rl/gsm8k.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

using nlohmann::json;

TEST(Gsm8kAnswer, Extraction) {
  const std::vector<std::pair<std::string, std::optional<std::string>>> cases = {
      {"She makes 9 * 2 = $18 every day.\n#### 18", "18"},
      {"#### 1,600", "1600"},
      {"#### $1,450,000.", "1450000"},
      {"#### 18 dollars", "18"},
      {"#### -3", "-3"},
      {"#### 3.50", "3.5"},
      {"The answer is \\boxed{42}.", "42"},
      {"\\boxed{\\$1,000} and then \\boxed{7 apples}", "7"},
      {"\\boxed{x = {2}} ", "2"},
      {"first 5 then 12 then 7.", "7"},
      {"it costs $2,125.", "2125"},
      {"16-3-4=9", "9"},
      {"x is -4", "-4"},
      {"0.75 or .5", "0.5"},
      {"1,2,3", "3"},
      {"in 2023, 14,000 people", "14000"},
      {"#### \n\\boxed{9}", "9"},  // "####" with no number falls back to \boxed
      {"no digits here", std::nullopt},
      {"", std::nullopt},
      {"####", std::nullopt},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(gsm8k_extract_answer(text), want) << json(text).dump();
}

TEST(Gsm8kAnswer, NumberComparison) {
  EXPECT_TRUE(gsm8k_same_number("3.50", "3.5"));
  EXPECT_TRUE(gsm8k_same_number("1,000", "1000.0"));
  EXPECT_TRUE(gsm8k_same_number("-0", "0"));
  EXPECT_TRUE(gsm8k_same_number("$18", "18"));
  EXPECT_TRUE(gsm8k_same_number("007", "7"));
  EXPECT_TRUE(gsm8k_same_number("+5", "5"));
  EXPECT_FALSE(gsm8k_same_number("3.5", "35"));
  EXPECT_FALSE(gsm8k_same_number("-5", "5"));
  EXPECT_FALSE(gsm8k_same_number("abc", "abc"));
  EXPECT_FALSE(gsm8k_same_number("5.", "5"));  // not a number form we accept
  EXPECT_EQ(gsm8k_normalize_number("-0012.500"), "-12.5");
  EXPECT_EQ(gsm8k_normalize_number("-0.0"), "0");
  EXPECT_EQ(gsm8k_normalize_number(".25"), "0.25");
  EXPECT_EQ(gsm8k_normalize_number("1e5"), std::nullopt);
}

TEST(Gsm8kTask, AllTestReferenceSolutionsScoreOneAndShuffledNearZero) {
  const TaskSpec task = make_task("gsm8k");
  ASSERT_EQ(task.validation->size(), 1319);
  ASSERT_EQ(task.train->size(), 7473);
  std::vector<TaskSample> test;
  for (int64_t i = 0; i < task.validation->size(); ++i) test.push_back(task.validation->get(i));
  int correct = 0, demo_correct = 0, shuffled_correct = 0;
  const int n = static_cast<int>(test.size());
  for (int i = 0; i < n; ++i) {
    const TaskSample& s = test[static_cast<size_t>(i)];
    auto env = task.make_env();
    Rollout r = run_episode(*env, s, scripted_generator({s.reference["solution"].get<std::string>()}));
    ASSERT_EQ(r.status, RolloutStatus::completed);
    task.rubric.score(r);
    correct += r.total_reward == 1.0;
    EXPECT_EQ(r.total_reward, 1.0) << s.id << ": " << r.completions[0];
    // The demonstration reply (calculator annotations removed) also scores 1.
    Rollout d = run_episode(*task.make_env(), s, scripted_generator(assistant_replies(task.demonstration(s))));
    task.rubric.score(d);
    demo_correct += d.total_reward == 1.0;
    // A shuffled pairing: the solution of another question (fixed derangement).
    const TaskSample& other = test[static_cast<size_t>((i + 617) % n)];
    Rollout w = run_episode(*task.make_env(), s, scripted_generator({other.reference["solution"].get<std::string>()}));
    task.rubric.score(w);
    shuffled_correct += w.total_reward == 1.0;
  }
  EXPECT_EQ(correct, n);
  EXPECT_EQ(demo_correct, n);
  const double frac = static_cast<double>(shuffled_correct) / n;
  std::printf("gsm8k test: reference solutions %d/%d, demonstrations %d/%d, shuffled pairing %d/%d = %.4f\n",
              correct, n, demo_correct, n, shuffled_correct, n, frac);
  EXPECT_LT(frac, 0.03);
}

TEST(Gsm8kTask, PromptAndRewardOfFreeFormReplies) {
  const TaskSpec task = make_task("gsm8k", {{"system_prompt", "You are careful."}});
  const TaskSample s = task.validation->get(0);  // Janet's ducks, answer 18
  EXPECT_EQ(s.id, "gsm8k/test/0");
  EXPECT_EQ(s.reference["answer"], "18");
  auto env = task.make_env();
  const auto msgs = env->init(s);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].role, "system");
  EXPECT_EQ(msgs[1].content.rfind("Janet", 0), 0u);
  EXPECT_NE(msgs[1].content.find("####"), std::string::npos);
  auto score = [&](const std::string& reply, const std::string& finish = "stop") {
    Rollout r = run_episode(*task.make_env(), s, [&](const GenerateRequest&) { return Completion{reply, finish, 0, 0}; });
    task.rubric.score(r);
    return r;
  };
  EXPECT_EQ(score("16 - 3 - 4 = 9 eggs, 9 * $2 = $18.").total_reward, 1.0);
  EXPECT_EQ(score("So the answer is \\boxed{18}").total_reward, 1.0);
  EXPECT_EQ(score("#### 18.00 dollars").total_reward, 1.0);
  EXPECT_EQ(score("#### 17").total_reward, 0.0);
  EXPECT_EQ(score("I don't know").total_reward, 0.0);
  // Cut at max_tokens before the answer: truncated, scored 0, reason recorded.
  Rollout cut = score("Janet has 16 eggs. She eats 3, bakes 4, so 9 remain. 9 * 2 = 1", "length");
  EXPECT_EQ(cut.status, RolloutStatus::truncated_length);
  EXPECT_EQ(cut.total_reward, 0.0);
  EXPECT_FALSE(cut.failure_reason.empty());
  // A sample without a reference answer: the reward function fails -> 0 with the reason.
  TaskSample bad = s;
  bad.reference = json::object();
  Rollout r = run_episode(*task.make_env(), bad, scripted_generator({"#### 18"}));
  task.rubric.score(r);
  EXPECT_EQ(r.total_reward, 0.0);
  EXPECT_NE(r.rewards[0].error.find("reference.answer"), std::string::npos) << r.rewards[0].error;
}

TEST(Gsm8kLoader, Errors) {
  char dir[] = "/tmp/titan_rl_gsm8k_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string p = std::string(dir) + "/x.jsonl";
  auto write = [&](const std::string& text) { std::ofstream(p) << text; };
  auto message = [&]() -> std::string {
    try {
      load_gsm8k(p, "test");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  write("{\"question\": \"q\", \"answer\": \"a\\n#### 5\"}\n\n{\"question\": \"q2\", \"answer\": \"b\\n#### 1,000\"}\n");
  const auto ok = load_gsm8k(p, "test");
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[1].reference["answer"], "1000");
  EXPECT_EQ(ok[1].metadata["line"], 3);
  write("{\"question\": \"q\", \"answer\": \"a\\n#### 5\"}\n{not json\n");
  EXPECT_NE(message().find(p + ":2: malformed JSON"), std::string::npos) << message();
  write("{\"question\": \"q\"}\n");
  EXPECT_EQ(message(), "load_gsm8k: " + p + ":1: key 'answer' must be a string");
  write("{\"question\": \"q\", \"answer\": \"no marker\"}\n");
  EXPECT_EQ(message(), "load_gsm8k: " + p + ":1: answer has no '####'");
  write("{\"question\": \"q\", \"answer\": \"#### many\"}\n");
  EXPECT_NE(message().find("is not a number"), std::string::npos) << message();
  write("");
  EXPECT_NE(message().find("has no samples"), std::string::npos);
  std::remove(p.c_str());
  rmdir(dir);
  EXPECT_NE(std::string([] {
              try {
                load_gsm8k("/nonexistent/gsm8k.jsonl", "test");
              } catch (const Error& e) {
                return std::string(e.what());
              }
              return std::string();
            }())
                .find("cannot open '/nonexistent/gsm8k.jsonl'"),
            std::string::npos);
  EXPECT_THROW(make_task("gsm8k", {{"train_path", 3}}), Error);
  EXPECT_THROW(make_task("gsm8k", {{"unknown", 3}}), Error);
}

}  // namespace
}  // namespace titan::rl
