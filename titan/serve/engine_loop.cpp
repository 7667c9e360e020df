// EngineLoop: the engine thread of `titan serve` (engine_loop.h).
#include "titan/serve/engine_loop.h"

#include <fmt/core.h>

#include <cstdio>
#include <exception>

namespace titan::serve {

std::vector<std::pair<int, infer::RequestOutput>> Stream::take(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !outputs_.empty() || remaining_ == 0; });
  std::vector<std::pair<int, infer::RequestOutput>> out(std::make_move_iterator(outputs_.begin()),
                                                        std::make_move_iterator(outputs_.end()));
  outputs_.clear();
  return out;
}

bool Stream::done() {
  std::lock_guard lk(mu_);
  return remaining_ == 0 && outputs_.empty();
}

void Stream::push(int prompt, infer::RequestOutput out) {
  {
    std::lock_guard lk(mu_);
    if (out.finished) --remaining_;
    outputs_.emplace_back(prompt, std::move(out));
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(infer::Engine& engine) : engine_(engine) {
  stats_.kv_blocks_total = engine.block_pool().num_blocks();
  stats_.kv_blocks_free = engine.block_pool().num_free();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    cancel_all_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Stream> EngineLoop::submit(std::vector<std::vector<int32_t>> prompts,
                                           const infer::SamplingParams& params) {
  auto s = std::make_shared<Stream>(static_cast<int>(prompts.size()));
  {
    std::lock_guard lk(mu_);
    stats_.requests_waiting += static_cast<int64_t>(prompts.size());
    pending_.push_back({std::move(prompts), params, s});
  }
  cv_.notify_all();
  return s;
}

void EngineLoop::cancel(Stream& s) {
  if (s.cancelled_.exchange(true)) return;
  {
    std::lock_guard lk(mu_);
    cancel_requested_ = true;
  }
  cv_.notify_all();
}

void EngineLoop::cancel_all() {
  {
    std::lock_guard lk(mu_);
    cancel_all_ = true;
  }
  cv_.notify_all();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Pending> add;
    bool cancel_some = false, cancel_every = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || cancel_requested_ || cancel_all_ || !pending_.empty() || engine_.has_unfinished();
      });
      if (stop_ && pending_.empty() && !engine_.has_unfinished()) return;
      add.swap(pending_);
      cancel_some = cancel_requested_;
      cancel_every = cancel_all_;
      cancel_requested_ = cancel_all_ = false;
      for (const Pending& p : add) stats_.requests_waiting -= static_cast<int64_t>(p.prompts.size());
    }
    int64_t added = 0, prompt_tokens = 0;
    for (Pending& p : add)
      for (size_t i = 0; i < p.prompts.size(); ++i) {
        prompt_tokens += static_cast<int64_t>(p.prompts[i].size());
        const int64_t id = engine_.add_request(std::move(p.prompts[i]), p.params);
        live_.emplace(id, std::make_pair(p.stream, static_cast<int>(i)));
        ++added;
        if (cancel_every) p.stream->cancelled_ = true;
        if (p.stream->cancelled()) cancel_some = true;
      }
    int64_t aborted = 0;
    if (cancel_some || cancel_every)
      for (auto& [id, sp] : live_)
        if (cancel_every || sp.first->cancelled()) {
          sp.first->cancelled_ = true;
          engine_.abort(id);
        }
    std::vector<infer::RequestOutput> outs;
    try {
      outs = engine_.step();
    } catch (const std::exception& e) {
      // A failing step is a bug in the engine, not a bad request: report it and fail
      // every request in flight rather than leave their clients waiting.
      fmt::print(stderr, "serve: engine step failed: {}\n", e.what());
      for (auto& [id, sp] : live_) engine_.abort(id);
      continue;
    }
    int64_t generated = 0;
    for (infer::RequestOutput& o : outs) {
      auto it = live_.find(o.request_id);
      if (it == live_.end()) continue;
      bool abort = false;
      for (const auto& c : o.outputs) {
        generated += static_cast<int64_t>(c.new_token_ids.size());
        abort |= c.finish_reason == infer::FinishReason::abort;
      }
      aborted += abort;
      auto [stream, prompt] = it->second;
      if (o.finished) live_.erase(it);
      stream->push(prompt, std::move(o));
    }
    {
      std::lock_guard lk(mu_);
      const auto& es = engine_.stats();
      stats_.kv_blocks_free = engine_.block_pool().num_free();
      stats_.kv_blocks_cached = engine_.block_pool().num_cached();
      stats_.requests_in_flight = static_cast<int64_t>(live_.size());
      stats_.requests_total += added;
      stats_.requests_aborted += aborted;
      stats_.prompt_tokens += prompt_tokens;
      stats_.generated_tokens += generated;
      stats_.steps = es.steps;
      stats_.preemptions = es.preemptions;
    }
  }
}

}  // namespace titan::serve
