// tool_use: a Search-R1-like tool-use workload. The model answers questions about a
// generated knowledge base that only its tools can read: it calls tools in the
// Qwen3/Hermes format (tool_calls.h), the environment runs them (tools/tools.h) and
// answers with `tool` messages (<tool_response> in the chat template), until the
// model replies without a call; that reply's last <answer>...</answer> is graded.
//
//   system: Answer the question with the tools. ... Tools: - search(query) ...
//   user:   In which country was Alice Wells born?
//   assistant: <tool_call>\n{"name": "search", "arguments": {"query": "Alice Wells"}}\n</tool_call>
//   tool:   1. Alice Wells: Alice Wells was born in Kelmora, works as a baker and is 34.\n2. ...
//   assistant: <tool_call>\n{"name": "search", "arguments": {"query": "Kelmora"}}\n</tool_call>
//   tool:   1. Kelmora: Kelmora is a city in Vastia.\n2. ...
//   assistant: <answer>Vastia</answer>
//
// Knowledge base (make_knowledge_base, deterministic in the seed): people named
// "First Last" from the committed alphabet_sort name lists (rl/data/alphabet_names.cpp),
// cities and countries with made-up names built from syllables (so no model knows them
// beforehand), jobs from a fixed list, ages 20..79. Documents: one per person, city
// and country. Questions (the answer is in the corpus, never in the prompt):
//   city     "In which city was P born?"              1 search
//   job      "What is the job of P?"                  1 search
//   country  "In which country was P born?"           2 searches (person -> city -> country)
//   age_sum  "What is the sum of the ages of P and Q?" 2 searches + calculator
//
// Reward: "exact_match" (weight 1): 1 when the final reply's last <answer> block,
// trimmed, lower-cased and with runs of whitespace collapsed, equals the answer
// normalised the same way. With no_search_penalty p > 0, a reward "no_search" of
// weight -p is 1 when the episode made no well-formed search call. Truncated
// (a completion cut at max_tokens, max_turns reached) and errored episodes get 0
// (the rubric's truncation/error reward), with the reason in the rollout.
//
//   TaskSample.prompt    {"question": ..., "type": ...}
//   TaskSample.reference {"answer": ..., "calls": [{"name", "arguments"}...]} (the reference plan)
//   TaskSample.metadata  {"index": i, "seed": seed}
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/task.h"
#include "titan/rl/tasks.h"
#include "titan/rl/tools/search_index.h"
#include "titan/rl/tools/tools.h"

namespace titan::rl {

struct ToolUseConfig {
  uint64_t seed = 7;               // knowledge base and questions
  int64_t num_people = 200;
  int64_t num_cities = 24;
  int64_t num_countries = 6;
  int64_t num_samples = 20000;     // generated questions (train + validation)
  int64_t num_validation = 256;    // seeded split of the questions
  std::vector<std::string> question_types{"city", "job", "country"};  // subset of city, job, country, age_sum
  std::vector<std::string> tools{"search", "calculator", "python"};    // the tools the episode offers
  int search_k = 2;                // documents per search result, [1, 10]
  int max_turns = 4;               // assistant turns per episode (EpisodeLimits::max_turns)
  double no_search_penalty = 0.0;  // >= 0
  double python_timeout_s = 5.0;   // the python tool's sandbox wall clock
  std::string system_prompt;       // "" = the default (tool_use_system_prompt)

  // Throws titan::Error naming the field for values out of range, unknown question
  // types or tools, and a question type whose reference plan needs a missing tool or
  // more turns than max_turns.
  void validate() const;
  // Keys as the field names; unknown keys and wrong types are titan::Error.
  static ToolUseConfig from_json(const nlohmann::json& j);
};

struct KbPerson {
  std::string name, city, job;
  int age = 0;
};
struct KbCity {
  std::string name, country;
};

struct KnowledgeBase {
  std::vector<KbPerson> people;
  std::vector<KbCity> cities;
  std::vector<std::string> countries;
  std::vector<SearchDocument> documents;  // people, then cities, then countries
};

// Deterministic in (seed, sizes). Throws titan::Error when the name lists cannot give
// that many distinct names.
KnowledgeBase make_knowledge_base(const ToolUseConfig& cfg);

// Question `index` (deterministic in (cfg.seed, index)) over kb.
TaskSample make_tool_use_sample(const ToolUseConfig& cfg, const KnowledgeBase& kb, int64_t index);

// The system prompt listing `tools` (cfg.system_prompt when set).
std::string tool_use_system_prompt(const ToolUseConfig& cfg, const ToolSet& tools);

// The configured tools over kb's search index.
std::shared_ptr<const ToolSet> make_tool_use_tools(const ToolUseConfig& cfg, std::shared_ptr<const SearchIndex> index);

class ToolUseEnv final : public MessageEnv {
 public:
  ToolUseEnv(std::shared_ptr<const ToolSet> tools, std::string system_prompt);
  // [system, user(question)]. Throws titan::Error for a sample without prompt.question.
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  // A reply with tool calls: one `tool` message per call (results or "error: ..."),
  // not done. A reply without any <tool_call>: done.
  StepResult step(const std::string& reply) override;

 private:
  std::shared_ptr<const ToolSet> tools_;
  std::string system_prompt_;
  bool started_ = false;
};

// The normalised text exact match compares (see the header comment).
std::string normalize_answer(std::string_view s);

// exact_match of a rollout (0 or 1). Throws titan::Error for a sample without
// reference.answer.
double tool_use_exact_match(const Rollout& r);

// 1 when no assistant turn of the rollout holds a well-formed call of "search".
double tool_use_no_search(const Rollout& r);

// The reference replies: the reference plan's calls, one per turn, then <answer>.
std::vector<std::string> tool_use_reference_replies(const TaskSample& sample);

// The task "tool_use" (tasks.h): config = ToolUseConfig keys.
TaskSpec make_tool_use_task(const nlohmann::json& config);

}  // namespace titan::rl
