// The asynchronous RL mode (rl.max_offpolicy_steps >= 1): the generator runs in its
// own thread and fills a WorkBuffer with whole steps of rollouts while the trainer
// trains on earlier ones (controller.h).
//
// Weights: the generator samples from its own Decoder (gen). After each optimizer
// step the trainer copies its weights into `staging` under `mu` and publishes the
// version; the generator, between two rollout batches only, swaps staging and gen
// under the same mutex. So the generator never reads weights that are being
// written, and the trainer never waits for a rollout batch to finish.
//
// Lag bound: step k is trained at policy version k. The generator starts the batch
// of step k only with weights of version >= k - max_offpolicy_steps (it waits for the
// trainer otherwise), and the WorkBuffer drops anything older, so every trained
// rollout has lag <= max_offpolicy_steps.
#include <fmt/core.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/rl/controller_state.h"
#include "titan/rl/weight_sync.h"
#include "titan/rl/work_buffer.h"

namespace titan::rl {

void RLController::State::run_async(const RLRunOptions& o, RLResult& res, train::MetricsLogger& metrics,
                                    std::FILE* rollouts_log) {
  const int64_t max_lag = job.rl.max_offpolicy_steps;
  const int64_t total = job.training.steps;
  WorkBuffer<StepWork> buffer(max_lag, max_lag);
  std::mutex mu;
  std::condition_variable cv;
  int64_t published = policy_version;  // version held by `staging`
  bool stop = false;
  std::exception_ptr gen_error;

  std::thread producer([&] {
    set_canonical_fp_state();
    int64_t gen_version = policy_version;
    try {
      for (int64_t k = start_step; k < total; ++k) {
        {
          std::unique_lock lk(mu);
          cv.wait(lk, [&] { return stop || published >= k - max_lag; });
          if (stop) break;
          if (published > gen_version) {
            std::swap(staging, gen);
            gen_version = published;
          }
        }
        StepWork w;
        w.step = k;
        w.rollouts = collect_step_rollouts(*gen, *tok, *rollouter, *dataset, gen_settings, k, gen_version);
        w.dataset_after = dataset->state();
        if (!buffer.put(std::move(w), gen_version)) break;
      }
    } catch (...) {
      gen_error = std::current_exception();
    }
    buffer.close();
  });

  auto shutdown = [&] {
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    buffer.close();
    producer.join();
  };
  try {
    for (int64_t step = start_step; step < total; ++step) {
      auto items = buffer.take(1, step);
      if (items.empty()) break;  // the producer stopped (error reported below)
      StepWork& w = items[0].first;
      TITAN_CHECK(w.step == step, "titan rl (async): expected rollouts of step {}, got step {}", step, w.step);
      const bool stop_now = stop_requested() || (o.stop_after_steps >= 0 && step + 1 >= o.stop_after_steps);
      train_and_log(
          w, step,
          [&] {
            {
              std::lock_guard lk(mu);
              sync_weights(*policy, *staging);
              published = step + 1;
            }
            cv.notify_all();
          },
          res, metrics, rollouts_log, stop_now);
      if (stop_now && step + 1 < total) {
        res.interrupted = true;
        break;
      }
    }
  } catch (...) {
    shutdown();
    throw;
  }
  shutdown();
  if (gen_error) std::rethrow_exception(gen_error);
  if (print && buffer.dropped() > 0) fmt::print("async: {} stale rollout batches dropped\n", buffer.dropped());
}

}  // namespace titan::rl
