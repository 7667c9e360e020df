// The serving side of the engine: one thread owns an infer::Engine and steps it while
// requests are in flight (continuous batching over every HTTP request at once); the
// HTTP handler threads submit prompts and read their outputs from a Stream.
//
//   serve::EngineLoop loop(engine);             // starts the engine thread
//   auto s = loop.submit({prompt_a, prompt_b}, params);
//   while (!s->done()) for (auto& [i, o] : s->take(100ms)) ...   // i = prompt index
//   loop.cancel(*s);                            // e.g. the client went away
//
// The engine is touched only by the loop thread, so a request sees exactly what it
// would see in `titan generate`: its tokens and logprobs depend on its own prompt,
// SamplingParams and seed, never on its neighbours (engine.h, DESIGN.md §1.2).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "titan/infer/engine.h"

namespace titan::serve {

// The outputs of one submission (one or more prompts sharing SamplingParams).
class Stream {
 public:
  explicit Stream(int num_prompts) : remaining_(num_prompts) {}
  // Waits up to timeout for outputs; returns those that arrived, oldest first, each with
  // the index of its prompt in the submission. Empty after a timeout.
  std::vector<std::pair<int, infer::RequestOutput>> take(std::chrono::milliseconds timeout);
  // True once every prompt's request has finished and take() has returned everything.
  bool done();
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class EngineLoop;
  void push(int prompt, infer::RequestOutput out);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, infer::RequestOutput>> outputs_;
  int remaining_;
  std::atomic<bool> cancelled_{false};
};

// Counters and pool state, as of the last engine step.
struct LoopStats {
  int64_t kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_cached = 0;
  int64_t requests_in_flight = 0;  // submitted to the engine, not finished
  int64_t requests_waiting = 0;    // submitted, not yet handed to the engine
  int64_t requests_total = 0, requests_aborted = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t steps = 0, preemptions = 0;
};

class EngineLoop {
 public:
  // engine must outlive the loop. Starts the engine thread.
  explicit EngineLoop(infer::Engine& engine);
  // Cancels what is in flight and joins the thread.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues one engine request per prompt (params shared). The prompts must have been
  // validated by the caller; an engine-side rejection still arrives as an output with
  // finish_reason "error".
  std::shared_ptr<Stream> submit(std::vector<std::vector<int32_t>> prompts, const infer::SamplingParams& params);
  // Aborts every unfinished request of s (finish_reason "abort"; their KV blocks go
  // back to the pool in the next step). Idempotent.
  void cancel(Stream& s);
  // Aborts every request in flight or waiting.
  void cancel_all();
  LoopStats stats() const;

 private:
  struct Pending {
    std::vector<std::vector<int32_t>> prompts;
    infer::SamplingParams params;
    std::shared_ptr<Stream> stream;
  };
  void run();

  infer::Engine& engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool cancel_requested_ = false, cancel_all_ = false, stop_ = false;
  // Engine request id -> (stream, prompt index). Loop thread only.
  std::map<int64_t, std::pair<std::shared_ptr<Stream>, int>> live_;
  LoopStats stats_;
  std::thread thread_;
};

}  // namespace titan::serve
