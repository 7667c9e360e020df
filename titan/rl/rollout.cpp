#include "titan/rl/rollout.h"

#include <exception>
#include <memory>

#include "titan/core/error.h"

namespace titan::rl {

using nlohmann::json;

std::string_view to_string(RolloutStatus s) {
  switch (s) {
    case RolloutStatus::ongoing: return "ongoing";
    case RolloutStatus::completed: return "completed";
    case RolloutStatus::truncated_length: return "truncated_length";
    case RolloutStatus::truncated_max_turns: return "truncated_max_turns";
    case RolloutStatus::truncated_max_tokens: return "truncated_max_tokens";
    case RolloutStatus::error: return "error";
  }
  return "unknown";
}

bool is_truncated(RolloutStatus s) {
  return s == RolloutStatus::truncated_length || s == RolloutStatus::truncated_max_turns ||
         s == RolloutStatus::truncated_max_tokens;
}

double Rollout::reward(std::string_view name) const {
  for (const RewardComponent& c : rewards)
    if (c.name == name) return c.value;
  fail("Rollout::reward: rollout '{}' has no reward component '{}' ({} components)", id, name, rewards.size());
}

json Rollout::to_json() const {
  json msgs = json::array();
  for (const ChatMessage& m : messages) {
    json jm{{"role", m.role}, {"content", m.content}};
    if (m.reasoning_content) jm["reasoning_content"] = *m.reasoning_content;
    msgs.push_back(std::move(jm));
  }
  json comps = json::array();
  for (const RewardComponent& c : rewards) {
    json jc{{"name", c.name}, {"weight", c.weight}, {"value", c.value}};
    if (!c.error.empty()) jc["error"] = c.error;
    comps.push_back(std::move(jc));
  }
  json out{{"id", id},
              {"sample_id", sample.id},
              {"status", std::string(to_string(status))},
              {"failure_reason", failure_reason},
              {"messages", std::move(msgs)},
              {"completions", completions},
              {"finish_reasons", finish_reasons},
              {"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"rewards", std::move(comps)},
              {"total_reward", total_reward}};
  for (int64_t c : turn_context_start)
    if (c != 0) {
      out["turn_context_start"] = turn_context_start;
      break;
    }
  return out;
}

std::string exception_text() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

namespace {

void end(Rollout& r, RolloutStatus s, std::string reason) {
  r.status = s;
  r.failure_reason = std::move(reason);
}

}  // namespace

Rollout run_episode(MessageEnv& env, const TaskSample& sample, const GenerateFn& generate,
                    const EpisodeLimits& limits) {
  TITAN_CHECK(limits.max_turns >= 1, "run_episode: limits.max_turns must be >= 1, got {}", limits.max_turns);
  TITAN_CHECK(limits.max_total_tokens >= 0, "run_episode: limits.max_total_tokens must be >= 0, got {}",
              limits.max_total_tokens);
  TITAN_CHECK(static_cast<bool>(generate), "run_episode: generate is empty");
  Rollout r;
  r.sample = sample;
  try {
    std::vector<ChatMessage> first = env.init(sample);
    check_env_messages(first, "run_episode: env.init", /*allow_empty=*/false);
    r.messages = std::move(first);
  } catch (...) {
    end(r, RolloutStatus::error, "sample '" + sample.id + "': env.init failed: " + exception_text());
    return r;
  }
  size_t context_start = 0;  // where the current context begins in r.messages
  for (int turn = 0;; ++turn) {
    if (turn >= limits.max_turns) {
      end(r, RolloutStatus::truncated_max_turns,
          fmt::format("max_turns={} reached before the environment was done", limits.max_turns));
      return r;
    }
    Completion c;
    try {
      if (context_start == 0) {
        c = generate(GenerateRequest{r.messages, turn});
      } else {
        const std::vector<ChatMessage> context(r.messages.begin() + static_cast<std::ptrdiff_t>(context_start),
                                               r.messages.end());
        c = generate(GenerateRequest{context, turn});
      }
    } catch (...) {
      end(r, RolloutStatus::error, fmt::format("turn {}: generate failed: {}", turn, exception_text()));
      return r;
    }
    r.completions.push_back(c.text);
    r.finish_reasons.push_back(c.finish_reason);
    r.prompt_tokens.push_back(c.prompt_tokens);
    r.completion_tokens.push_back(c.completion_tokens);
    r.turn_context_start.push_back(static_cast<int64_t>(context_start));
    r.messages.push_back(ChatMessage{"assistant", c.text, std::nullopt});
    if (c.finish_reason == "length") {
      end(r, RolloutStatus::truncated_length,
          fmt::format("turn {}: completion cut at max_tokens ({} tokens, finish_reason=length)", turn,
                      c.completion_tokens));
      return r;
    }
    if (c.finish_reason != "stop") {
      end(r, RolloutStatus::error, fmt::format("turn {}: generation ended with finish_reason='{}'", turn,
                                               c.finish_reason));
      return r;
    }
    StepResult step;
    try {
      env.observe_context_tokens(c.prompt_tokens + c.completion_tokens);
      step = env.step(c.text);
      check_env_messages(step.new_messages, fmt::format("run_episode: env.step (turn {})", turn),
                         /*allow_empty=*/step.done && !step.reset_context);
    } catch (...) {
      end(r, RolloutStatus::error, fmt::format("turn {}: env.step failed: {}", turn, exception_text()));
      return r;
    }
    if (step.reset_context) context_start = r.messages.size();
    for (ChatMessage& m : step.new_messages) r.messages.push_back(std::move(m));
    if (step.done) {
      r.status = RolloutStatus::completed;
      return r;
    }
    const int64_t context = c.prompt_tokens + c.completion_tokens;
    if (!step.reset_context && limits.max_total_tokens > 0 && context >= limits.max_total_tokens) {
      end(r, RolloutStatus::truncated_max_tokens,
          fmt::format("turn {}: context of {} tokens reached max_total_tokens={}", turn, context,
                      limits.max_total_tokens));
      return r;
    }
  }
}

std::vector<std::string> assistant_replies(const std::vector<ChatMessage>& conversation) {
  std::vector<std::string> out;
  for (const ChatMessage& m : conversation)
    if (m.role == "assistant") out.push_back(m.content);
  return out;
}

GenerateFn scripted_generator(std::vector<std::string> replies) {
  auto shared = std::make_shared<const std::vector<std::string>>(std::move(replies));
  return [shared](const GenerateRequest& req) {
    if (req.turn < 0 || static_cast<size_t>(req.turn) >= shared->size()) return Completion{"", "abort", 0, 0};
    return Completion{(*shared)[static_cast<size_t>(req.turn)], "stop", 0, 0};
  };
}

}  // namespace titan::rl
