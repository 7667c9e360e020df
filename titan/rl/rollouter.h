// The rollouter: groups of episodes of one task run through the generator
// (infer::Engine) at once, token-level records for the trainer, rewards from the
// task's rubric (TitanRL's Rollouter: dataset + MessageEnv + Rubric + generator).
//
//   rl::TaskSpec task = rl::make_task("alphabet_sort", cfg);
//   rl::Rollouter ro(task, *tok);
//   rl::RolloutConfig rc{.group_size = 8, .sampling = sp, .limits = {.max_turns = task.max_turns}};
//   std::vector<rl::TokenRollout> out = ro.run(engine, samples, rc, /*policy_version=*/step);
//   // out[g * group_size + k]: rollout k of samples[g]; out[i].turns[t].completion_ids / .logprobs
//
// Batching: every live episode's current turn is a request in the engine at the same
// time (continuous batching); when a turn's completion finishes, the environment
// answers it (env.step) and the episode's next turn is added as a new request while
// the others keep decoding. Episode semantics are run_episode's (rollout.h): the
// same statuses, limits and failure reasons; environment exceptions and malformed
// environment messages end the episode as an error with the reason recorded; a
// completion cut at max_tokens ends it as truncated_length. Then Rubric::score
// scores every rollout (a throwing reward function gives 0 with the reason).
//
// Prompts: turn t's prompt is the conversation so far (since the last context reset,
// StepResult::reset_context) rendered with the tokenizer's
// chat template (Tokenizer::apply_chat_template, add_generation_prompt = true,
// enable_thinking = RolloutConfig::enable_thinking), encoded with special tokens
// parsed. The default (enable_thinking = false) ends the prompt with Qwen3's empty
// "<think>\n\n</think>\n\n", so the completion is the answer and its stop token
// <|im_end|>; SFT documents are built with the same prompt (rl/sft_data.h).
//
// Seeds: turn t of rollout k of samples[g] is sampled with its own Philox key
// episode_seed(base, g, k, t) (base = sampling.seed, else the engine's seed), so a
// rollout's tokens do not depend on which other rollouts share the engine, on the
// number of samples in the call after it, or on arrival order (batch-invariant
// kernels + per-request Philox sampling, DESIGN.md §1.2).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "titan/data/tokenizer.h"
#include "titan/infer/engine.h"
#include "titan/infer/sampling_params.h"
#include "titan/rl/rollout.h"
#include "titan/rl/tasks.h"

namespace titan::rl {

// One generated turn, in token ids.
struct TurnTokens {
  std::vector<int32_t> prompt_ids;      // exactly the ids the generator was given for this turn
  std::vector<int32_t> completion_ids;  // sampled ids, including the stop token (<|im_end|>) when it stopped on it
  std::vector<float> logprobs;          // generator logprobs of completion_ids at logprob_temperature
                                        // (titan::logprobs: bitwise equal to the trainer's for the same tokens)
  std::vector<int32_t> routed_experts;  // MoE: the generator's routing per completion token
                                        // (infer::CompletionOutput::routed_experts); empty if dense
  std::string finish_reason;            // "stop" | "length" | "abort" | "error"
  double logprob_temperature = 1.0;     // SamplingParams::logprob_temperature() of the request
  uint64_t seed = 0;                    // the request's Philox seed
  double advantage_scale = 1.0;         // this turn's tokens train with advantage * advantage_scale
                                        // (TaskSpec::turn_advantage_scales; self-play: -1 on the
                                        // second player's turns, whose reward is minus the first's)
};

struct TokenRollout {
  Rollout rollout;                // text-level record, rewards, status (rollout.h)
  std::vector<TurnTokens> turns;  // one per generated turn
  int64_t group = 0;              // index of its sample in the call
  int64_t policy_version = 0;     // weights version that generated it (passed in)
};

struct RolloutConfig {
  int64_t group_size = 1;          // episodes per sample (>= 1)
  infer::SamplingParams sampling;  // per request (n must be 1); seed: see episode_seed
  EpisodeLimits limits;
  bool enable_thinking = false;    // chat template option of every prompt (see the header comment)
};

// The Philox seed of turn `turn` of rollout `index` in group `group`: a Philox 4x32-10
// draw keyed by `base` at counter (group, index, turn) — distinct per episode and turn.
uint64_t episode_seed(uint64_t base, int64_t group, int64_t index, int64_t turn);

// The ids of turn prompt: apply_chat_template(messages, add_generation_prompt, enable_thinking)
// encoded with special tokens. Throws titan::Error from the template (unknown role, no
// <|im_start|> in the vocabulary).
std::vector<int32_t> render_prompt_ids(const data::Tokenizer& tok, std::span<const ChatMessage> messages,
                                       bool enable_thinking);

class Rollouter {
 public:
  // tok must outlive the rollouter and be the tokenizer of the engine's model.
  Rollouter(TaskSpec task, const data::Tokenizer& tok);
  const TaskSpec& task() const { return task_; }
  const data::Tokenizer& tokenizer() const { return tok_; }

  // Returns samples.size() * group_size rollouts, group-major (sample 0's group
  // first), scored. Never throws for episode failures (they are recorded in each
  // rollout); throws titan::Error for a bad config (group_size < 1, sampling.n != 1,
  // invalid sampling params or limits). Other requests may be in the engine; they
  // are stepped along and their outputs dropped.
  std::vector<TokenRollout> run(infer::Engine& engine, std::span<const TaskSample> samples, const RolloutConfig& cfg,
                                int64_t policy_version) const;

 private:
  TaskSpec task_;
  const data::Tokenizer& tok_;
};

// Mean total_reward over the first n samples of task.validation (n <= 0: all), greedy
// (temperature 0), one episode each, at most max_tokens tokens per turn.
struct ValidationResult {
  double reward_mean = 0;
  int64_t episodes = 0;
  std::vector<TokenRollout> rollouts;
};
ValidationResult validation_reward(infer::Engine& engine, const Rollouter& r, int64_t n, const EpisodeLimits& limits,
                                   int64_t max_tokens);

}  // namespace titan::rl
