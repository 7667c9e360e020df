// compaction: context compaction for multi-turn episodes longer than the model's
// context window.
//
// CompactingEnv wraps any multi-turn MessageEnv. When a turn's context (prompt +
// completion tokens, MessageEnv::observe_context_tokens) reaches the token budget and
// the episode goes on, it holds the inner environment's next messages back and asks
// the policy to summarise its state; the policy's summary reply is not passed to the
// inner environment. The next context restarts (StepResult::reset_context) as
//   [the inner environment's leading system message(s), user(summary), the held-back messages]
// so the episode can run past the window while each context stays within it; the
// trainer trains each turn in the context it was generated in (the summary turn in
// the full context, the turns after it in the restarted one).
//
// The task "compaction": a running sorted list (alphabet_sort's samples: names of
// the committed lists, sorted by first or last name) that outgrows the window. Turn
// 0 gives a few names, each later turn adds one or two, and every reply is the whole
// list so far, sorted. After a restart only the summary holds the earlier names, so
// the task needs it.
//
//   system: Keep a list of names sorted by LAST name. Reply with the whole list in <list>, one name per line.
//   user:   Names: AliceWells, BrunoAdams
//   assistant: <list>\nBrunoAdams\nAliceWells\n</list>
//   user:   Add: CarlBaker
//   assistant: <list>\nBrunoAdams\nCarlBaker\nAliceWells\n</list>
//   user:   Context full. Write the list so far in <summary>, one name per line.   (budget reached)
//   assistant: <summary>\nBrunoAdams\nCarlBaker\nAliceWells\n</summary>
//   --- context restarts ---
//   system: Keep a list of names ...
//   user:   Summary of the earlier turns:\nBrunoAdams\nCarlBaker\nAliceWells
//   user:   Add: DanaCole
//   assistant: <list>\n...\n</list>
//
// Rewards: "list" (weight 1): the mean over the sample's turns of difflib's
// SequenceMatcher ratio of the reply's <list> text (its non-empty stripped lines,
// lower-cased, joined with \n) to the expected list's, 0 for a turn without a reply
// (the episode ended early, e.g. truncated at rl.max_total_tokens) or without a
// <list>; "compactions" (weight 0): the summary turns of the episode (val_compactions
// in metrics.jsonl: compactions per episode). Summary turns are not graded.
//
// Demonstrations (SFT, TaskSpec::reference_policy): the sorted list each turn and,
// when asked, the list so far as the summary; with the tokenizer's token counts the
// demonstration compacts exactly where a rollout with the same replies would.
//
//   TaskSample: alphabet_sort's (prompt.sort_by, prompt.new_names_per_turn,
//   reference.expected).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/tasks.h"

namespace titan::rl {

struct CompactionOptions {
  int64_t context_budget = 0;  // tokens; 0 = never compact
  std::string request = "Context full. Write the list so far in <summary>, one name per line.";
  std::string summary_tag = "summary";  // the summary is the reply's last <summary_tag> block (else the whole reply)
  std::string summary_prefix = "Summary of the earlier turns:\n";
};

class CompactingEnv final : public MessageEnv {
 public:
  // Throws titan::Error for a null inner environment or a negative budget.
  CompactingEnv(std::unique_ptr<MessageEnv> inner, CompactionOptions options);
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  StepResult step(const std::string& reply) override;
  void observe_context_tokens(int64_t tokens) override { context_tokens_ = tokens; }
  int64_t compactions() const { return compactions_; }

 private:
  std::unique_ptr<MessageEnv> inner_;
  CompactionOptions options_;
  std::vector<ChatMessage> system_;   // the inner environment's leading system messages
  std::vector<ChatMessage> pending_;  // held back while the summary is asked for
  bool awaiting_summary_ = false;
  int64_t context_tokens_ = 0;
  int64_t compactions_ = 0;
};

// True when a rollout's assistant message at `index` of messages answers the
// compaction request (a summary turn).
bool is_summary_turn(const std::vector<ChatMessage>& messages, size_t index, const CompactionOptions& options);

struct CompactionConfig {
  uint64_t seed = 5;
  int64_t num_samples = 20000;
  int64_t num_validation = 256;
  int min_turns = 4;  // list turns per episode, uniform in [min_turns, max_turns]
  int max_turns = 6;
  int min_names = 2;  // names of turn 0
  int max_names = 2;
  int min_new_names = 1;  // names added by each later turn
  int max_new_names = 2;
  int name_pool = 16;     // alphabet_sort's name_pool (0 = all names)
  int64_t context_budget = 256;  // tokens; 0 = no compaction
  std::string system_prompt;     // "" = the default (sort key and format)

  void validate() const;
  static CompactionConfig from_json(const nlohmann::json& j);
};

// The running-list environment without compaction (the inner environment).
class RunningListEnv final : public MessageEnv {
 public:
  explicit RunningListEnv(std::string system_prompt) : system_prompt_(std::move(system_prompt)) {}
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  StepResult step(const std::string& reply) override;

 private:
  std::string system_prompt_;
  std::vector<std::vector<std::string>> turns_;
  size_t next_turn_ = 0;
};

// "list" of a rollout (see the header comment); summary turns are skipped. Throws
// titan::Error for a sample without reference.expected.
double compaction_list_reward(const Rollout& r, const CompactionOptions& options);

// The summary turns of a rollout.
double compaction_count(const Rollout& r, const CompactionOptions& options);

// The task "compaction" (tasks.h): config = CompactionConfig keys.
TaskSpec make_compaction_task(const nlohmann::json& config);

}  // namespace titan::rl
