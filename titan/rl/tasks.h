// The RL tasks by name: everything a rollouter needs for one experiment (TitanRL's
// Rollouter = train/validation datasets + MessageEnv + Rubric), plus reference
// replies for SFT demonstrations.
//
//   TaskSpec t = make_task("gsm8k", {{"seed", 7}});
//   TaskDataset train(t.train, /*seed=*/7);
//   TaskSample s = train.next();
//   std::unique_ptr<MessageEnv> env = t.make_env();
//   Rollout r = run_episode(*env, s, generate, {.max_turns = t.max_turns});
//   t.rubric.score(r);
//   std::vector<ChatMessage> demo = t.demonstration(s);   // prompt + correct replies
//
// Names and config keys (a JSON object; unknown keys are a titan::Error):
//   alphabet_sort  AlphabetSortConfig keys (seed, num_samples, min_turns, max_turns,
//                  min_names, max_names, min_new_names, max_new_names,
//                  similarity_power, similarity) + num_validation (default 256):
//                  train/validation = a seeded split of the generated set.
//                  Reward "alphabet_sort" (weight 1).
//   gsm8k          train_path, validation_path (default: data/
//                  gsm8k/train.jsonl and gsm8k/test.jsonl), instruction,
//                  system_prompt. Reward "gsm8k_correct" (weight 1).
//   mbpp           path (default data/mbpp/mbpp.jsonl), train_splits
//                  (default ["train"]), validation_splits (default ["validation"]),
//                  system_prompt + CodeExecConfig keys. Reward "tests_passed".
//   humaneval      path (default data/humaneval/HumanEval.jsonl), num_validation (default
//                  32, seeded split with seed split_seed, default 0),
//                  system_prompt + CodeExecConfig keys. Reward "tests_passed".
//   compaction     CompactionConfig keys (compaction.h). Rewards "list" (weight 1) and
//                  "compactions" (weight 0, summary turns per episode).
//   long_context   LongContextConfig keys (long_context.h). Reward "exact_match" (weight 1).
//   self_play      SelfPlayConfig keys (self_play.h). Rewards "outcome" (weight 1), "win"
//                  and "draw" (weight 0); turn_advantage_scales -1 on player 2's turns.
//   tool_use       ToolUseConfig keys (tool_use.h). Rewards "exact_match" (weight 1) and,
//                  with no_search_penalty > 0, "no_search" (weight -no_search_penalty).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/rubric.h"
#include "titan/rl/task.h"

namespace titan::rl {

struct TaskSpec {
  std::string name;
  std::shared_ptr<const SampleSource> train;
  std::shared_ptr<const SampleSource> validation;
  EnvFactory make_env;
  Rubric rubric;
  int max_turns = 1;  // the most assistant turns a sample can need (EpisodeLimits::max_turns)
  std::function<std::vector<std::string>(const TaskSample&)> reference_replies;
  // Optional: per turn of a scored rollout, the factor of the rollout's advantage for
  // that turn's tokens ([num_turns]; missing entries are 0). Empty = 1 for every turn.
  // Self-play: the rollout's reward is the first player's, and the second player's
  // turns train with -1 (zero-sum: its reward is minus the first's, so its group
  // advantage is minus the first's).
  std::function<std::vector<double>(const Rollout&)> turn_advantage_scales = {};
  // Optional: the reference replies as a policy of the context (a fresh generator per
  // sample), for tasks whose turns depend on the context's length (compaction asks for
  // a summary when the budget is reached). Demonstrations use it instead of
  // reference_replies when set.
  std::function<GenerateFn(const TaskSample&)> reference_policy = {};

  // The sample's conversation with the reference reply in every assistant turn:
  // the environment run with the reference replies (an SFT demonstration).
  // Throws titan::Error when that episode does not complete.
  std::vector<ChatMessage> demonstration(const TaskSample& sample) const;
  // The same episode as a rollout (its turn_context_start says which messages each
  // reply saw when the environment resets the context). With tok, every turn reports
  // its token counts as the rollouter does (prompt: render_prompt_ids of the context
  // with enable_thinking; completion: the reply's ids + the <|im_end|> stop token), so
  // an environment with a token budget acts as in a rollout.
  Rollout demonstration_rollout(const TaskSample& sample, const data::Tokenizer* tok = nullptr,
                                bool enable_thinking = false) const;
};

// Throws titan::Error for an unknown name (listing the known ones), bad config keys
// or values, and unreadable data files.
TaskSpec make_task(std::string_view name, const nlohmann::json& config = nlohmann::json::object());

std::vector<std::string> task_names();

}  // namespace titan::rl
