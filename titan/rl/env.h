// Message environments: the task side of a multi-turn episode, in message space
// (TitanRL's MessageEnv: init() gives the opening messages, step() answers each
// assistant reply). Environments never see token ids; the caller renders messages
// with Tokenizer::apply_chat_template and decodes completions to text.
//
// Who enforces what (see run_episode in rollout.h, the reference caller):
//   - the environment decides when the task is over (StepResult::done) and what
//     the next user/tool messages are; it never counts tokens;
//   - the caller enforces the turn cap (EpisodeLimits::max_turns), the total token
//     cap (EpisodeLimits::max_total_tokens: prompt + completion tokens of the last
//     turn, i.e. the context length), and the per-completion cap (the generator's
//     max_tokens, reported as finish_reason "length"). A completion cut at max_tokens
//     is not passed to step(): the episode ends as truncated_length.
//   - the caller validates every message an environment returns
//     (check_env_messages): a malformed message ends the episode as an error with
//     the reason recorded; it never crashes the run.
//
// Lifetime: one MessageEnv object per rollout (single use): init() once, then step()
// once per assistant reply until done. An environment may throw from init()/step()
// (titan::Error or any std::exception): run_episode records it as the rollout's
// failure reason.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/tokenizer.h"
#include "titan/rl/task.h"

namespace titan::rl {

using data::ChatMessage;

// The environment's answer to one assistant reply. new_messages are user/tool/system
// messages appended to the conversation (may be empty when done). With
// reset_context, the next turn's context is new_messages alone (non-empty): the
// messages before them stay in the rollout's record (Rollout::messages) but the
// generator and the trainer no longer see them (context compaction: the context
// restarts as [system, summary, latest message]; a Markov game: [system, state]).
struct StepResult {
  std::vector<ChatMessage> new_messages;
  bool done = false;
  bool reset_context = false;
};

class MessageEnv {
 public:
  virtual ~MessageEnv() = default;
  // The opening messages (e.g. [system, user]) for this sample. Non-empty.
  virtual std::vector<ChatMessage> init(const TaskSample& sample) = 0;
  // Answer the assistant's reply text (the completion of the last turn).
  virtual StepResult step(const std::string& reply) = 0;
  // Called before each step() with the tokens of the turn's context: prompt +
  // completion ids (the context an environment with a token budget, such as
  // compaction's, compares against). Default: ignored.
  virtual void observe_context_tokens(int64_t tokens) { (void)tokens; }
};

// Builds a fresh environment per rollout.
using EnvFactory = std::function<std::unique_ptr<MessageEnv>()>;

// Throws titan::Error naming `where`, the message index and the problem when a
// message an environment produced is malformed: role not one of "system", "user",
// "tool" (assistant turns come from the model only), content or
// reasoning_content that is not valid UTF-8, a reasoning_content on a non-assistant
// message. An empty list is an error when allow_empty is false.
void check_env_messages(std::span<const ChatMessage> messages, std::string_view where, bool allow_empty);

}  // namespace titan::rl
