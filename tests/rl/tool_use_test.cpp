// The tool_use workload (titan/rl/tool_use.h): the generated knowledge base and its
// questions (answers only in the corpus), the environment's turns with real tool
// results, bad calls answered with error tool messages while the episode goes on,
// the exact-match rubric (0 for a tool call cut at max_tokens, with the reason), the
// SFT loss mask (tool responses are context, never targets), and a short GRPO run
// with tool messages in the context and logprob_diff_max == 0.0 at every step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/util/test_files.h"
#include "tests/util/tiny_models.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/rl/controller.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/sft_data.h"
#include "titan/rl/tasks.h"
#include "titan/rl/tool_use.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const json kSmall = json{{"num_people", 40}, {"num_cities", 8}, {"num_countries", 3}, {"num_samples", 400},
                         {"num_validation", 16}, {"question_types", {"city", "job", "country", "age_sum"}},
                         {"max_turns", 4}};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST(ToolUse, KnowledgeBaseIsDeterministicAndAnswersAreOnlyInTheCorpus) {
  const ToolUseConfig cfg = ToolUseConfig::from_json(kSmall);
  const KnowledgeBase a = make_knowledge_base(cfg), b = make_knowledge_base(cfg);
  ASSERT_EQ(a.documents.size(), 40u + 8u + 3u);
  for (size_t i = 0; i < a.documents.size(); ++i) EXPECT_EQ(a.documents[i].body, b.documents[i].body);
  ToolUseConfig other = cfg;
  other.seed = 8;
  EXPECT_NE(make_knowledge_base(other).documents[0].body, a.documents[0].body);
  std::set<std::string> names;
  for (const SearchDocument& d : a.documents) EXPECT_TRUE(names.insert(lower(d.title)).second) << d.title;

  const TaskSpec t = make_task("tool_use", kSmall);
  std::set<std::string> types;
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    types.insert(s.prompt["type"].get<std::string>());
    const std::string answer = lower(s.reference["answer"].get<std::string>());
    const std::vector<ChatMessage> init = t.make_env()->init(s);
    ASSERT_EQ(init.size(), 2u);
    for (const ChatMessage& m : init) {
      if (s.prompt["type"] != "age_sum") {
        EXPECT_EQ(lower(m.content).find(answer), std::string::npos) << s.id;
      }
    }
    bool in_corpus = false;
    for (const SearchDocument& d : a.documents) in_corpus = in_corpus || lower(d.body).find(answer) != std::string::npos;
    if (s.prompt["type"] != "age_sum") {
      EXPECT_TRUE(in_corpus) << s.id << " " << answer;
    }
  }
  EXPECT_EQ(types, (std::set<std::string>{"city", "job", "country", "age_sum"}));
}

TEST(ToolUse, DemonstrationsSearchAndScoreOne) {
  const TaskSpec t = make_task("tool_use", kSmall);
  for (int64_t i = 0; i < 40; ++i) {
    const TaskSample s = t.train->get(i);
    const std::vector<ChatMessage> conv = t.demonstration(s);
    const std::string type = s.prompt["type"];
    const size_t calls = type == "country" ? 2 : type == "age_sum" ? 3 : 1;
    ASSERT_EQ(conv.size(), 2 + 2 * calls + 1) << s.id;
    // The last tool message before the answer holds it (a search result or the sum).
    const std::string answer = s.reference["answer"];
    EXPECT_NE(conv[conv.size() - 2].content.find(answer), std::string::npos) << conv[conv.size() - 2].content;
    EXPECT_EQ(conv[conv.size() - 2].role, "tool");
    Rollout r = run_episode(*t.make_env(), s, scripted_generator(t.reference_replies(s)), {.max_turns = 4});
    t.rubric.score(r);
    EXPECT_EQ(r.status, RolloutStatus::completed);
    EXPECT_EQ(r.total_reward, 1.0) << s.id;
  }
}

TEST(ToolUse, BadCallsAreErrorToolMessagesAndTheEpisodeGoesOn) {
  const TaskSpec t = make_task("tool_use", kSmall);
  TaskSample s = t.train->get(0);
  const std::string answer = s.reference["answer"];
  const std::vector<std::string> replies{
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": }\n</tool_call>",  // malformed JSON
      "<tool_call>\n{\"name\": \"weather\", \"arguments\": {}}\n</tool_call>"            // unknown tool
      "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1/0\"}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>",  // wrong argument
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"",              // never closed
      "<answer>" + answer + "</answer>"};
  Rollout r = run_episode(*t.make_env(), s, scripted_generator(replies), {.max_turns = 8});
  t.rubric.score(r);
  EXPECT_EQ(r.status, RolloutStatus::completed) << r.failure_reason;
  std::vector<std::string> tool_msgs;
  for (const ChatMessage& m : r.messages)
    if (m.role == "tool") tool_msgs.push_back(m.content);
  ASSERT_EQ(tool_msgs.size(), 5u);
  EXPECT_EQ(tool_msgs[0].rfind("error: tool call: malformed JSON", 0), 0u) << tool_msgs[0];
  EXPECT_EQ(tool_msgs[1], "error: unknown tool 'weather' (known: search, calculator, python)");
  EXPECT_EQ(tool_msgs[2], "error: calculator: division by zero");
  EXPECT_EQ(tool_msgs[3], "error: search: unknown argument 'q' (expected query, k)");
  EXPECT_EQ(tool_msgs[4].rfind("error: ", 0), 0u) << tool_msgs[4];
  EXPECT_EQ(r.total_reward, 1.0);

  // A tool that throws inside the harness: an error message, the episode goes on.
  auto tools = std::make_shared<ToolSet>();
  tools->add(Tool{"search", "search(query)", [](const json&) -> std::string { throw std::runtime_error("index offline"); }});
  ToolUseEnv env(tools, "sys");
  Rollout r2 = run_episode(env, s,
                           scripted_generator({"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}}\n"
                                               "</tool_call>",
                                               "<answer>" + answer + "</answer>"}),
                           {.max_turns = 4});
  EXPECT_EQ(r2.status, RolloutStatus::completed);
  EXPECT_EQ(r2.messages[3].content, "error: index offline");
}

TEST(ToolUse, ToolCallCutAtMaxTokensScoresZeroWithTheReason) {
  const TaskSpec t = make_task("tool_use", kSmall);
  const TaskSample s = t.train->get(1);
  GenerateFn cut = [](const GenerateRequest&) {
    return Completion{"<tool_call>\n{\"name\": \"search\", \"argu", "length", 100, 12};
  };
  Rollout r = run_episode(*t.make_env(), s, cut, {.max_turns = 4});
  t.rubric.score(r);
  EXPECT_EQ(r.status, RolloutStatus::truncated_length);
  EXPECT_NE(r.failure_reason.find("max_tokens"), std::string::npos) << r.failure_reason;
  EXPECT_EQ(r.total_reward, 0.0);
  ASSERT_EQ(r.rewards.size(), 1u);
  EXPECT_EQ(r.rewards[0].name, "truncated");
  const json j = r.to_json();
  EXPECT_EQ(j["status"], "truncated_length");
  // Out of turns (calling tools forever) is 0 as well.
  const std::string call = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}}\n</tool_call>";
  Rollout r2 = run_episode(*t.make_env(), s, scripted_generator({call, call, call, call, call}), {.max_turns = 4});
  t.rubric.score(r2);
  EXPECT_EQ(r2.status, RolloutStatus::truncated_max_turns);
  EXPECT_EQ(r2.total_reward, 0.0);
}

TEST(ToolUse, RubricExactMatchAndNoSearchPenalty) {
  json cfg = kSmall;
  cfg["no_search_penalty"] = 0.25;
  const TaskSpec t = make_task("tool_use", cfg);
  const TaskSample s = t.train->get(2);
  const std::string answer = s.reference["answer"];
  auto score = [&](std::vector<std::string> replies) {
    Rollout r = run_episode(*t.make_env(), s, scripted_generator(std::move(replies)), {.max_turns = 4});
    t.rubric.score(r);
    return r.total_reward;
  };
  EXPECT_EQ(score({"<answer>  " + lower(answer) + " </answer>"}), 1.0 - 0.25);  // right, but never searched
  EXPECT_EQ(score({"<answer>nowhere</answer>"}), -0.25);
  EXPECT_EQ(score(t.reference_replies(s)), 1.0);
  std::vector<std::string> wrong = t.reference_replies(s);
  wrong.back() = "<answer>" + answer + "x</answer>";
  EXPECT_EQ(score(wrong), 0.0);
  wrong.back() = answer;  // no <answer> block
  EXPECT_EQ(score(wrong), 0.0);
  EXPECT_EQ(normalize_answer("  New \n  York "), "new york");
}

TEST(ToolUse, BadConfigIsRefused) {
  for (const char* bad : {R"({"num_peple": 3})", R"({"question_types": ["weather"]})", R"({"tools": ["web"]})",
                          R"({"tools": ["search"], "question_types": ["age_sum"]})", R"({"search_k": 0})",
                          R"({"max_turns": 2, "question_types": ["country"]})", R"({"no_search_penalty": -1})",
                          R"({"num_validation": 400, "num_samples": 400})", R"({"seed": "x"})"})
    EXPECT_THROW(make_task("tool_use", json::parse(bad)), Error) << bad;
}

// SFT documents of tool_use demonstrations: the loss mask is 1 exactly on the
// assistant replies (+ <|im_end|>), so the system prompt, the question and every
// tool response are context only.
TEST(ToolUse, SftMaskLeavesToolResponsesOutOfTheLoss) {
  const TaskSpec t = make_task("tool_use", kSmall);
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  VectorSource src("few", {t.train->get(0), t.train->get(1), t.train->get(2), t.train->get(3)});
  const data::MaskedDocuments docs = sft_documents(t, src, *tok);
  int64_t tool_docs = 0, n = 0;
  for (int64_t i = 0; i < src.size(); ++i) {
    const std::vector<ChatMessage> conv = t.demonstration(src.get(i));
    for (size_t a = 0; a < conv.size(); ++a) {
      if (conv[a].role != "assistant") continue;
      std::vector<int32_t> ctx, target;
      for (int64_t k = docs.offsets[static_cast<size_t>(n)]; k < docs.offsets[static_cast<size_t>(n) + 1]; ++k)
        (docs.loss_mask[static_cast<size_t>(k)] ? target : ctx).push_back(docs.tokens[static_cast<size_t>(k)]);
      ++n;
      EXPECT_EQ(tok->decode(target), conv[a].content + "<|im_end|>");
      const std::string context = tok->decode(ctx);
      for (size_t m = 0; m < a; ++m) {
        if (conv[m].role != "tool") continue;
        ++tool_docs;
        EXPECT_NE(context.find("<tool_response>\n" + conv[m].content + "\n</tool_response>"), std::string::npos);
      }
    }
  }
  EXPECT_EQ(n, docs.size());
  EXPECT_GT(tool_docs, 0);
}

// A test environment over the real tools: the opening messages are the question and
// the search tool's answer to it, and every reply that stops is another search
// query for up to two turns, so the contexts hold tool responses. The reward is
// smooth (share of lower-case letters of the last reply) so a random model's groups
// have an advantage.
class SearchEverythingEnv final : public MessageEnv {
 public:
  explicit SearchEverythingEnv(std::shared_ptr<const ToolSet> tools) : tools_(std::move(tools)) {}
  std::vector<ChatMessage> init(const TaskSample& s) override {
    const std::string q = s.prompt["question"].get<std::string>();
    ParsedToolCall c{ToolCall{"search", json{{"query", q}}}, "", ""};
    return {ChatMessage{"user", q, std::nullopt}, ChatMessage{"tool", tools_->run(c).text, std::nullopt}};
  }
  StepResult step(const std::string& reply) override {
    if (++turn_ > 2) return {{}, true};
    ParsedToolCall c{ToolCall{"search", json{{"query", reply.empty() ? "Kelmora" : reply}}}, "", ""};
    return {{ChatMessage{"tool", tools_->run(c).text, std::nullopt}}, false};
  }

 private:
  std::shared_ptr<const ToolSet> tools_;
  int turn_ = 0;
};

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> rows;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

config::JobConfig tiny_job(const fs::path& dump) {
  config::JobConfig c;
  c.job.dump_folder = dump.string();
  test::set_tiny_chat_qwen3(c.model);
  c.training.seq_len = 1024;
  c.training.steps = 3;
  c.training.seed = 7;
  c.optimizer.lr = 1e-3;
  c.lr_scheduler.warmup_steps = 0;
  c.lr_scheduler.decay_type = config::DecayType::constant;
  c.validation.enabled = false;
  c.generator.max_tokens = 10;
  c.generator.temperature = 1.0;
  c.generator.kv_cache_bytes = 16 << 20;
  c.generator.seed = 11;
  c.rl.env = "tool_use";
  c.rl.env_config = kSmall.dump();
  c.rl.group_size = 4;
  c.rl.rollouts_per_step = 8;
  c.rl.val_freq = 0;
  c.rl.max_turns = 4;
  c.rl.microbatch_tokens = 1500;
  c.checkpoint.enable = false;
  c.metrics.log_freq = 100;
  return c;
}

TEST(ToolUse, GrpoWithToolResponsesInContextHasExactLogprobParity) {
  const fs::path dump = test::fresh_dir("tool_use_grpo");
  const config::JobConfig c = tiny_job(dump);
  TaskSpec t = make_task("tool_use", kSmall);
  const ToolUseConfig cfg = ToolUseConfig::from_json(kSmall);
  auto index = std::make_shared<const SearchIndex>(make_knowledge_base(cfg).documents);
  std::shared_ptr<const ToolSet> tools = make_tool_use_tools(cfg, index);
  t.make_env = [tools] { return std::make_unique<SearchEverythingEnv>(tools); };
  t.rubric = Rubric({RewardFn{"lower_share", 1.0, [](const Rollout& r) {
                                const std::string& s = r.completions.back();
                                if (s.empty()) return 0.0;
                                double n = 0;
                                for (char ch : s) n += std::islower(static_cast<unsigned char>(ch)) != 0;
                                return n / static_cast<double>(s.size());
                              }}});
  RLController ctl(c, t);
  const RLResult r = ctl.run({.print = false});
  EXPECT_EQ(r.steps_done, 3);
  int rows = 0;
  for (const json& row : read_jsonl(dump / "metrics.jsonl")) {
    if (row["step"].get<int64_t>() == 0) continue;
    ++rows;
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
    EXPECT_GT(row["tools_ms"].get<double>(), 0.0);
  }
  EXPECT_EQ(rows, 3);
  int multi = 0;
  for (const json& l : read_jsonl(dump / "rollouts.jsonl")) {
    multi += l["prompt"].get<std::string>().find("\n1. ") != std::string::npos;  // the search result
  }
  EXPECT_GT(multi, 0);
}

// The real environment and rubric under a random policy: completions cut at
// max_tokens score 0 with the reason in rollouts.jsonl, and the run goes on.
TEST(ToolUse, GrpoRunWithCutCompletionsGoesOn) {
  const fs::path dump = test::fresh_dir("tool_use_cut");
  config::JobConfig c = tiny_job(dump);
  c.training.steps = 2;
  c.generator.max_tokens = 4;
  c.rl.max_error_fraction = 1.0;
  RLController ctl(c);
  EXPECT_EQ(ctl.run({.print = false}).steps_done, 2);
  int cut = 0;
  for (const json& l : read_jsonl(dump / "rollouts.jsonl")) {
    if (l["status"] != "truncated_length") continue;
    ++cut;
    EXPECT_NE(l["failure_reason"].get<std::string>().find("max_tokens"), std::string::npos);
    EXPECT_EQ(l["reward"].get<double>(), 0.0);
  }
  EXPECT_GT(cut, 0);
}

}  // namespace
}  // namespace titan::rl
