#include "titan/rl/rollouter.h"

#include <fmt/format.h>

#include <exception>
#include <map>
#include <memory>

#include "titan/core/error.h"
#include "titan/core/philox.h"

namespace titan::rl {

uint64_t episode_seed(uint64_t base, int64_t group, int64_t index, int64_t turn) {
  const PhiloxCounter c = philox4x32_10({static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                                         static_cast<uint32_t>(index), static_cast<uint32_t>(turn)},
                                        philox_key(base));
  return (static_cast<uint64_t>(c[1]) << 32) | c[0];
}

std::vector<int32_t> render_prompt_ids(const data::Tokenizer& tok, std::span<const ChatMessage> messages,
                                       bool enable_thinking) {
  data::ChatTemplateOptions opt;
  opt.add_generation_prompt = true;
  opt.enable_thinking = enable_thinking;
  return tok.encode(tok.apply_chat_template(messages, opt), /*parse_special=*/true);
}

Rollouter::Rollouter(TaskSpec task, const data::Tokenizer& tok) : task_(std::move(task)), tok_(tok) {
  TITAN_CHECK(static_cast<bool>(task_.make_env), "Rollouter: task '{}' has no environment factory", task_.name);
}

namespace {

// One episode in flight: run_episode's loop unrolled into events.
struct Episode {
  TokenRollout out;
  std::unique_ptr<MessageEnv> env;
  size_t context_start = 0;  // where the current context begins in out.rollout.messages
  int64_t index = 0;  // in the group
  bool done = false;
};

void end(Episode& e, RolloutStatus s, std::string reason) {
  e.out.rollout.status = s;
  e.out.rollout.failure_reason = std::move(reason);
  e.done = true;
}

class Runner {
 public:
  Runner(const Rollouter& ro, infer::Engine& engine, const RolloutConfig& cfg)
      : ro_(ro), tok_(ro.tokenizer()), engine_(engine), cfg_(cfg),
        base_seed_(cfg.sampling.seed.value_or(engine.config().seed)) {}

  // Starts an episode: env.init, then its first turn (or ends it with an error).
  void start(Episode& e) {
    Rollout& r = e.out.rollout;
    try {
      e.env = ro_.task().make_env();
      TITAN_CHECK(e.env != nullptr, "the task's environment factory returned null");
      std::vector<ChatMessage> first = e.env->init(r.sample);
      check_env_messages(first, "Rollouter: env.init", /*allow_empty=*/false);
      r.messages = std::move(first);
    } catch (...) {
      end(e, RolloutStatus::error, "sample '" + r.sample.id + "': env.init failed: " + exception_text());
      return;
    }
    submit(e);
  }

  // Queues the episode's next turn (or ends it at the turn cap / on a template error).
  void submit(Episode& e) {
    Rollout& r = e.out.rollout;
    const int turn = r.num_turns();
    if (turn >= cfg_.limits.max_turns) {
      end(e, RolloutStatus::truncated_max_turns,
          fmt::format("max_turns={} reached before the environment was done", cfg_.limits.max_turns));
      return;
    }
    TurnTokens t;
    try {
      t.prompt_ids = render_prompt_ids(
          tok_, std::span<const ChatMessage>(r.messages).subspan(e.context_start), cfg_.enable_thinking);
    } catch (...) {
      end(e, RolloutStatus::error, fmt::format("turn {}: rendering the prompt failed: {}", turn, exception_text()));
      return;
    }
    infer::SamplingParams p = cfg_.sampling;
    p.n = 1;
    p.seed = episode_seed(base_seed_, e.out.group, e.index, turn);
    if (tok_.eos_id() >= 0 && !p.ignore_eos) p.stop_token_ids.push_back(tok_.eos_id());
    if (p.stop.empty()) p.detokenize = false;  // finish() decodes the ids itself
    t.seed = *p.seed;
    t.logprob_temperature = p.logprob_temperature();
    const int64_t id = engine_.add_request(t.prompt_ids, p);
    e.out.turns.push_back(std::move(t));
    live_[id] = &e;
  }

  // A turn's completion finished: record it, then answer it as run_episode does.
  void finish(Episode& e, const infer::CompletionOutput& c, const std::vector<int32_t>& prompt) {
    Rollout& r = e.out.rollout;
    TurnTokens& t = e.out.turns.back();
    const int turn = r.num_turns();
    t.completion_ids = c.token_ids;
    t.logprobs = c.logprobs;
    t.routed_experts = c.routed_experts;
    t.finish_reason = infer::finish_reason_name(c.finish_reason);
    std::string text;
    if (!cfg_.sampling.stop.empty()) {
      text = c.text;  // the engine cut it at the stop string
    } else {
      size_t n = c.token_ids.size();
      const bool stop_token = c.finish_reason == infer::FinishReason::stop &&
                              (c.stop_reason == "eos" || c.stop_reason.rfind("token ", 0) == 0);
      if (stop_token && n > 0) --n;  // stop tokens are not part of the text (as in the engine)
      try {
        text = tok_.decode(std::span<const int32_t>(c.token_ids.data(), n));
      } catch (...) {
        text.clear();
      }
    }
    const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
    const int64_t completion_tokens = static_cast<int64_t>(c.token_ids.size());
    r.completions.push_back(text);
    r.finish_reasons.push_back(t.finish_reason);
    r.prompt_tokens.push_back(prompt_tokens);
    r.completion_tokens.push_back(completion_tokens);
    r.turn_context_start.push_back(static_cast<int64_t>(e.context_start));
    r.messages.push_back(ChatMessage{"assistant", text, std::nullopt});
    if (c.finish_reason == infer::FinishReason::length) {
      end(e, RolloutStatus::truncated_length,
          fmt::format("turn {}: completion cut at max_tokens ({} tokens, finish_reason=length)", turn,
                      completion_tokens));
      return;
    }
    if (c.finish_reason != infer::FinishReason::stop) {
      end(e, RolloutStatus::error,
          fmt::format("turn {}: generation ended with finish_reason='{}'{}", turn, t.finish_reason,
                      c.error.empty() ? "" : ": " + c.error));
      return;
    }
    StepResult step;
    try {
      e.env->observe_context_tokens(prompt_tokens + completion_tokens);
      step = e.env->step(text);
      check_env_messages(step.new_messages, fmt::format("Rollouter: env.step (turn {})", turn),
                         /*allow_empty=*/step.done && !step.reset_context);
    } catch (...) {
      end(e, RolloutStatus::error, fmt::format("turn {}: env.step failed: {}", turn, exception_text()));
      return;
    }
    if (step.reset_context) e.context_start = r.messages.size();
    for (ChatMessage& m : step.new_messages) r.messages.push_back(std::move(m));
    if (step.done) {
      r.status = RolloutStatus::completed;
      e.done = true;
      return;
    }
    const int64_t context = prompt_tokens + completion_tokens;
    if (!step.reset_context && cfg_.limits.max_total_tokens > 0 && context >= cfg_.limits.max_total_tokens) {
      end(e, RolloutStatus::truncated_max_tokens,
          fmt::format("turn {}: context of {} tokens reached max_total_tokens={}", turn, context,
                      cfg_.limits.max_total_tokens));
      return;
    }
    submit(e);
  }

  // Steps the engine until none of our requests is left.
  void drain() {
    while (!live_.empty()) {
      TITAN_CHECK(engine_.has_unfinished(), "Rollouter: {} requests vanished from the engine", live_.size());
      for (const infer::RequestOutput& o : engine_.step()) {
        if (!o.finished) continue;
        auto it = live_.find(o.request_id);
        if (it == live_.end()) continue;  // not ours
        Episode* e = it->second;
        live_.erase(it);
        TITAN_CHECK(o.outputs.size() == 1, "Rollouter: request {} finished with {} samples (expected 1)",
                    o.request_id, o.outputs.size());
        finish(*e, o.outputs[0], o.prompt_token_ids);
      }
    }
  }

 private:
  const Rollouter& ro_;
  const data::Tokenizer& tok_;
  infer::Engine& engine_;
  const RolloutConfig& cfg_;
  uint64_t base_seed_;
  std::map<int64_t, Episode*> live_;  // engine request id -> episode
};

}  // namespace

std::vector<TokenRollout> Rollouter::run(infer::Engine& engine, std::span<const TaskSample> samples,
                                         const RolloutConfig& cfg, int64_t policy_version) const {
  TITAN_CHECK(cfg.group_size >= 1, "Rollouter::run: group_size must be >= 1, got {}", cfg.group_size);
  TITAN_CHECK(cfg.sampling.n == 1, "Rollouter::run: sampling.n must be 1 (use group_size), got {}", cfg.sampling.n);
  cfg.sampling.validate();
  TITAN_CHECK(cfg.limits.max_turns >= 1, "Rollouter::run: limits.max_turns must be >= 1, got {}",
              cfg.limits.max_turns);
  TITAN_CHECK(cfg.limits.max_total_tokens >= 0, "Rollouter::run: limits.max_total_tokens must be >= 0, got {}",
              cfg.limits.max_total_tokens);
  const int64_t G = static_cast<int64_t>(samples.size());
  std::vector<Episode> eps(static_cast<size_t>(G * cfg.group_size));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t k = 0; k < cfg.group_size; ++k) {
      Episode& e = eps[static_cast<size_t>(g * cfg.group_size + k)];
      e.index = k;
      e.out.group = g;
      e.out.policy_version = policy_version;
      e.out.rollout.id = fmt::format("group={}/rollout={}", g, k);
      e.out.rollout.sample = samples[static_cast<size_t>(g)];
    }
  Runner runner(*this, engine, cfg);
  for (Episode& e : eps) runner.start(e);
  runner.drain();
  std::vector<TokenRollout> out;
  out.reserve(eps.size());
  for (Episode& e : eps) {
    task_.rubric.score(e.out.rollout);
    if (task_.turn_advantage_scales) {
      std::vector<double> scales;
      try {
        scales = task_.turn_advantage_scales(e.out.rollout);
      } catch (...) {
        scales.clear();  // a failing hook leaves the rollout untrained (scale 0), with the reason
        e.out.rollout.failure_reason += (e.out.rollout.failure_reason.empty() ? "" : "; ") +
                                        std::string("turn_advantage_scales failed: ") + exception_text();
      }
      for (size_t t = 0; t < e.out.turns.size(); ++t)
        e.out.turns[t].advantage_scale = t < scales.size() ? scales[t] : 0.0;
    }
    out.push_back(std::move(e.out));
  }
  return out;
}

ValidationResult validation_reward(infer::Engine& engine, const Rollouter& r, int64_t n, const EpisodeLimits& limits,
                                   int64_t max_tokens) {
  const SampleSource* src = r.task().validation.get();
  TITAN_CHECK(src != nullptr && src->size() > 0, "validation_reward: task '{}' has no validation samples",
              r.task().name);
  const int64_t count = n <= 0 ? src->size() : std::min(n, src->size());
  std::vector<TaskSample> samples;
  samples.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) samples.push_back(src->get(i));
  RolloutConfig cfg;
  cfg.group_size = 1;
  cfg.sampling.temperature = 0.0;
  cfg.sampling.max_tokens = max_tokens;
  cfg.sampling.seed = 0;
  cfg.sampling.detokenize = false;
  cfg.limits = limits;
  ValidationResult res;
  res.rollouts = r.run(engine, samples, cfg, 0);
  res.episodes = static_cast<int64_t>(res.rollouts.size());
  double sum = 0;
  for (const TokenRollout& t : res.rollouts) sum += t.rollout.total_reward;
  res.reward_mean = res.episodes > 0 ? sum / static_cast<double>(res.episodes) : 0.0;
  return res;
}

}  // namespace titan::rl
