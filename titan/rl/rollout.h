// Rollouts: the record of one episode (conversation, per-turn completions and finish
// reasons, rewards) and run_episode, the reference caller loop
// generate -> env.step -> ... that a rollouter runs once per sibling rollout.
//
//   AlphabetSortEnv env(cfg);
//   Rollout r = run_episode(env, sample, [&](const GenerateRequest& req) {
//     std::string prompt = tok.apply_chat_template(req.messages, {.add_generation_prompt = true});
//     ... generate ... return Completion{text, "stop", prompt_tokens, completion_tokens};
//   }, {.max_turns = 4, .max_total_tokens = 4096});
//   rubric.score(r);    // r.rewards, r.total_reward
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/rl/env.h"
#include "titan/rl/task.h"

namespace titan::rl {

// How an episode ended (TitanRL RolloutStatus names).
enum class RolloutStatus {
  ongoing,               // not finished (only while run_episode is running)
  completed,             // the environment said done
  truncated_length,      // a completion was cut at the generator's max_tokens
  truncated_max_turns,   // EpisodeLimits::max_turns reached before done
  truncated_max_tokens,  // EpisodeLimits::max_total_tokens reached before done
  error,                 // generator abort/failure, environment exception or malformed message
};
std::string_view to_string(RolloutStatus s);
bool is_truncated(RolloutStatus s);

// One reward function's result for a rollout (Rubric::score fills these in the
// rubric's order). value is 0 when the function failed; error says why.
struct RewardComponent {
  std::string name;
  double weight = 0.0;
  double value = 0.0;
  std::string error;  // empty when the function returned a finite value
};

struct Rollout {
  std::string id;  // e.g. "group=3/rollout=5" (set by the caller; run_episode leaves it)
  TaskSample sample;
  // The whole conversation: the environment's messages and the assistant replies
  // (content = completion text) in order.
  std::vector<ChatMessage> messages;
  std::vector<std::string> completions;  // [num_turns] raw completion text per turn
  std::vector<std::string>
      finish_reasons;  // [num_turns] "stop", "length" (cut at max_tokens), "abort", ...
  std::vector<int64_t> prompt_tokens;  // [num_turns] as reported by the generator (0 if unknown)
  std::vector<int64_t> completion_tokens;  // [num_turns]
  // [num_turns] index in `messages` where turn t's context begins: 0 until an
  // environment resets the context (StepResult::reset_context), then the index of
  // the first message of the new context. Turn t's prompt is
  // messages[turn_context_start[t], the turn's reply).
  std::vector<int64_t> turn_context_start;
  RolloutStatus status = RolloutStatus::ongoing;
  std::string failure_reason;  // why the episode did not complete normally; empty when completed
  std::vector<RewardComponent> rewards;  // per reward function (Rubric::score)
  double total_reward = 0.0;             // sum_i weight_i * value_i (Rubric::score)

  int num_turns() const { return static_cast<int>(completions.size()); }
  // The value of reward function `name`; titan::Error if the rollout has no such component.
  double reward(std::string_view name) const;
  nlohmann::json to_json() const;
};

// What the caller's generator is asked for: the turn's context (the conversation
// since the last context reset, ending with a user/tool message) and the 0-based
// turn index.
struct GenerateRequest {
  const std::vector<ChatMessage>& messages;
  int turn = 0;
};

// The generator's answer. finish_reason: "stop" (EOS/stop token), "length" (cut at
// max_tokens), "abort" (cancelled). Token counts are optional (0 = unknown); with
// max_total_tokens set they must be filled.
struct Completion {
  std::string text;
  std::string finish_reason = "stop";
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
using GenerateFn = std::function<Completion(const GenerateRequest&)>;

struct EpisodeLimits {
  int max_turns = 8;  // >= 1; more assistant turns than this -> truncated_max_turns
  int64_t max_total_tokens =
      0;  // 0 = no cap; else prompt + completion tokens of a turn >= cap ends the
          // episode (truncated_max_tokens) unless the environment is done
};

// Runs one episode: env.init(sample), then per turn generate -> (finish_reason
// "length": stop, truncated_length; anything but "stop"/"length": error) ->
// env.step(text) -> append its messages, until done or a cap. Never throws for
// failures of the environment or the generator: they end the episode with
// status error and failure_reason naming the turn and the exception text. Throws
// titan::Error only for bad limits (max_turns < 1, max_total_tokens < 0).
Rollout run_episode(MessageEnv& env, const TaskSample& sample, const GenerateFn& generate,
                    const EpisodeLimits& limits = {});

// Inside a catch block: the what() of the exception being handled, or "unknown
// exception" for a non-std exception (the failure reasons of rollouts).
std::string exception_text();

// The assistant replies of a conversation, in order (e.g. of a demonstration).
std::vector<std::string> assistant_replies(const std::vector<ChatMessage>& conversation);

// A GenerateFn that returns the given replies one per turn ("stop"), and an empty
// "abort" completion when they run out. For demonstrations and tests.
GenerateFn scripted_generator(std::vector<std::string> replies);

}  // namespace titan::rl
