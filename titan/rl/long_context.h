// long_context: key-value retrieval from a long prompt. The prompt lists num_pairs
// "key: value" lines (made-up keys of consonant-vowel syllables or single letters
// (key_style), distinct within a sample; values of value_digits digits) and asks for
// the value of one of them; the other pairs are the distractors, and their number
// (uniform in [min_pairs, max_pairs]) sets the haystack's length. One turn per
// question (questions, default 1).
//
//   system: Find the value of the key in the list. Reply with <answer>VALUE</answer>.
//   user:   tovi: 381\nkeprau: 907\n... (num_pairs lines)\n\nWhat is the value of keprau?
//   assistant: <answer>907</answer>
//   user:   What is the value of tovi?          (questions >= 2: one user turn per
//   assistant: <answer>381</answer>              further question, distinct keys)
//
// The reference reply (reference_reply, used by the SFT demonstrations): "answer" is
// `<answer>907</answer>`; "quote" first quotes the needle's line,
// `keprau: 907\n<answer>907</answer>`, so the value follows a copy of the key as it
// does in the list (an induction pattern). The reward reads the last <answer> only.
//
// Length: a line is ~11 bytes (byte_chat: ~11 tokens), so 360 pairs is a ~4k-token
// prompt and 1450 pairs ~16k (long_context_test builds both); the recipes use 8-24
// pairs, short enough for the 2-core GRPO budget. With the needle's position uniform in
// the list, the key is found anywhere in the context.
//
// Haystack (haystack): "pairs" (above) makes every line a key-value pair, so the
// question is answered by matching its key against the list's. "filler" makes the
// needle the only pair: the other lines are filler of 2-3 made-up words (the key
// syllables, no digits, no ':'), the classic needle-in-a-haystack form, where the value
// is found by its content alone; min_pairs / max_pairs then count the haystack's lines,
// the needle's line included, and questions must be 1.
//
//   user:   tovi mipa\nsena roku dai\nkeprau: 907\n... (lines)\n\nWhat is the value of keprau?
//
// Reward: "exact_match" (weight 1): the share of the questions whose reply's last
// <answer> block, trimmed, equals the value (one question: 0 or 1); a question without
// a reply counts 0. Truncated or errored rollouts score 0.
//
//   TaskSample.prompt    {"pairs": [[key, value]...], "query": key}
//                        + "queries": [key...] (questions >= 2; queries[0] == query)
//                        + "filler": [line...] (haystack "filler"; pairs holds the
//                          needle alone, shown before filler[position])
//   TaskSample.reference {"answer": value, "position": index of the query in pairs}
//                        + "answers": [value...] (questions >= 2)
//   TaskSample.metadata  {"index": i, "num_pairs": n}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/tasks.h"

namespace titan::rl {

struct LongContextConfig {
  uint64_t seed = 3;
  int64_t num_samples = 20000;
  int64_t num_validation = 256;
  int min_pairs = 8;     // pairs in the haystack, uniform in [min_pairs, max_pairs]
  int max_pairs = 24;
  int value_digits = 3;  // digits of a value, [1, 9]
  // "syllables": keys of 2-3 consonant-vowel syllables ("keprau", 4-6 byte tokens);
  // "letter": one ASCII letter (A-Z, a-z: one byte token, so at most 52 pairs), which a
  // small model can match with one attention hop where a multi-token key needs more.
  std::string key_style = "syllables";
  // Questions per sample, [1, min_pairs]: distinct keys, the first in the user message
  // with the list, each further one a user turn of its own (max_turns = questions).
  int questions = 1;
  std::string reference_reply = "answer";  // "answer" or "quote" (see above)
  std::string haystack = "pairs";           // "pairs" or "filler" (see above)
  std::string system_prompt;  // "" = the default

  void validate() const;
  static LongContextConfig from_json(const nlohmann::json& j);
};

// Sample `index` (deterministic in (cfg.seed, index)); validation samples are drawn
// from their own streams.
TaskSample make_long_context_sample(const LongContextConfig& cfg, int64_t index, bool validation);

// The user message of a sample (the list, then the question).
std::string long_context_prompt(const TaskSample& sample);

// The keys asked about, in turn order (prompt.queries, or [prompt.query]).
std::vector<std::string> long_context_queries(const TaskSample& sample);

// The reference replies of a sample, one per question, in the reply style.
std::vector<std::string> long_context_reference_replies(const TaskSample& sample, const std::string& style);

class LongContextEnv final : public MessageEnv {
 public:
  explicit LongContextEnv(std::string system_prompt) : system_prompt_(std::move(system_prompt)) {}
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  // Asks the next question, or ends the episode after the last.
  StepResult step(const std::string& reply) override;

 private:
  std::string system_prompt_;
  std::vector<std::string> queries_;
  size_t asked_ = 0;
};

// exact_match of a rollout (the share of questions answered right). Throws
// titan::Error for a sample without reference.answer (or reference.answers when it
// has prompt.queries).
double long_context_exact_match(const Rollout& r);

// The task "long_context" (tasks.h): config = LongContextConfig keys.
TaskSpec make_long_context_task(const nlohmann::json& config);

}  // namespace titan::rl
