// gsm8k: grade-school math word problems (openai/grade-school-math), single turn,
// binary reward.
//
//   TaskSample.prompt    {"question": "..."}
//   TaskSample.reference {"answer": "18", "solution": "<reference solution text>"}
//   TaskSample.metadata  {"file": ".../test.jsonl", "line": 1, "split": "test"}
//
// Answer extraction (gsm8k_extract_answer), in this order:
//   1. "#### N": the first number after the LAST "####";
//   2. "\boxed{...}": the first number inside the LAST \boxed{} (braces balanced);
//   3. else the last number anywhere in the text.
// A number is [-+]?(digits with optional "," thousands groups | digits)(.digits)?
// or [-+]?.digits; "$", commas, units or other trailing text and a final "." are
// not part of it. Numbers are compared exactly as decimals (gsm8k_same_number):
// "3.50" == "3.5", "1,000" == "1000.0", "-0" == "0".
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/task.h"

namespace titan::rl {

// One sample per line of a GSM8K jsonl file (keys "question", "answer"; the answer
// ends with "#### N"). Ids "gsm8k/<split>/<0-based line>". Throws titan::Error
// naming file:line for unreadable files, malformed JSON, missing/non-string keys or
// an answer without "####" and a number after it.
std::vector<TaskSample> load_gsm8k(const std::string& path, const std::string& split);

// The default file of a split ("train" or "test") under the data folder
// (titan::config::shared_data_dir(): $TITAN_DATA, $TITAN_SHARED/data or the
// repository's data/): <dir>/gsm8k/<split>.jsonl.
std::string gsm8k_path(const std::string& split);

// The number the text answers with (see the header comment), normalised
// (gsm8k_normalize_number), or nullopt when the text has no number.
std::optional<std::string> gsm8k_extract_answer(std::string_view text);

// A number string without "$", ",", "+", leading zeros and trailing fractional
// zeros ("-0012.50" -> "-12.5", "-0.0" -> "0"); nullopt if s is not a number.
std::optional<std::string> gsm8k_normalize_number(std::string_view s);

bool gsm8k_same_number(std::string_view a, std::string_view b);

struct Gsm8kConfig {
  // Appended to the question in the user message.
  std::string instruction =
      "Solve the problem step by step. Then give the final answer as a plain number on the last line, "
      "after \"####\" (for example: #### 42).";
  std::string system_prompt;  // empty: no system message
};

class Gsm8kEnv final : public MessageEnv {
 public:
  explicit Gsm8kEnv(Gsm8kConfig cfg = {}) : cfg_(std::move(cfg)) {}
  // Throws titan::Error when prompt.question is missing.
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  StepResult step(const std::string& reply) override { return StepResult{{}, true}; }

 private:
  Gsm8kConfig cfg_;
};

// 1 if the last completion's answer equals reference.answer, else 0. Throws
// titan::Error (-> 0 with the reason, in a Rubric) when the sample has no
// reference.answer or the rollout no completion.
double gsm8k_reward(const Rollout& r);

// The reference solution with its <<calculator>> annotations removed (ends "#### N").
std::string gsm8k_reference_reply(const TaskSample& sample);

}  // namespace titan::rl
