// Training-state checkpoints: model weights, optimizer state, step, data-loader
// position and RNG state, saved every N steps into <folder>/step-N/ and resumed
// bitwise identically (DESIGN.md §1.3, §1.5).
//
// Layout of one checkpoint:  step-N/model.safetensors      (f32, titan names)
//                            step-N/optimizer.safetensors  (optimizer state_dict)
//                            step-N/state.json             (step, loader, rng, extra)
//                            step-N/MANIFEST.json          (written last)
// Each file is written atomically (temp + fsync + rename); a checkpoint is valid only
// once MANIFEST.json exists and every file it lists has the listed size. So a crash
// or kill -9 at any moment leaves the previous checkpoint loadable.
//
// Saving can be asynchronous (TorchTitan's async checkpointing): save() hands the
// tensors to a background thread, which copies a host snapshot of them and writes it.
// The caller must not change the tensors until wait_snapshot() returns (the trainer
// calls it before the optimizer's next update, so the copy overlaps the next forward and
// backward). At most one write is in flight: the next save() first waits for the
// previous one.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "titan/core/tensor.h"

namespace titan {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

struct TrainState {
  int64_t step = 0;
  nlohmann::json extra = nlohmann::json::object();  // loader state, rng, policy version, ...
};

struct LoadedCheckpoint {
  std::string path;
  TrainState state;
  std::map<std::string, Tensor> model, optimizer;
};

class CheckpointManager {
 public:
  // folder: where step-N/ directories live (created if missing). keep_latest_k: 0 = all.
  CheckpointManager(std::string folder, int64_t keep_latest_k, bool async);
  ~CheckpointManager();  // waits for an in-flight write

  // Saves a checkpoint for state.step. Returns the milliseconds the caller was blocked
  // (waiting for a previous write when one is still running; the whole write when not
  // async). Throws titan::Error on I/O failure (sync mode) — in
  // async mode a failure is reported by the next save()/wait().
  double save(const NamedTensorList& model, const NamedTensorList& optimizer, const TrainState& state);
  // Waits for the in-flight write; rethrows its error.
  void wait();
  // Blocks until the in-flight write has taken its snapshot (returns at once when none).
  void wait_snapshot();
  // The last completed write: its step (-1 if none) and duration in ms, read together.
  struct WriteRecord {
    int64_t step = -1;
    double ms = -1.0;
  };
  WriteRecord last_write() const;
  // Duration of the last completed write in ms (-1 if none), and its step.
  double last_write_ms() const { return last_write().ms; }
  int64_t last_written_step() const { return last_write().step; }

  // Newest valid checkpoint in `folder` (incomplete ones are skipped), or nullopt.
  static std::optional<std::string> latest(const std::string& folder);
  // Loads a checkpoint directory (either layout, distributed_checkpoint.h; a distributed
  // one is assembled into full tensors); throws titan::Error naming the file on damage.
  static LoadedCheckpoint load(const std::string& dir);
  static bool is_valid(const std::string& dir);
  // Why dir is not a complete checkpoint (MANIFEST.json missing or unreadable, a listed
  // file missing or of another size), in one phrase naming the file; "" when it is.
  static std::string invalid_reason(const std::string& dir);
  // Removes every step-N directory in `folder` that is not a valid checkpoint (a
  // write cut short by a crash or kill -9) and returns their paths. Call it only while
  // no CheckpointManager is writing into `folder`.
  static std::vector<std::string> remove_incomplete(const std::string& folder);

 private:
  void write(const NamedTensorList& model, const NamedTensorList& optimizer, const TrainState& state);
  void prune();
  void mark_snapshot_done();

  std::string folder_;
  int64_t keep_;
  bool async_;
  std::thread worker_;
  std::string error_;
  mutable std::mutex mu_;
  std::condition_variable snapshot_cv_;
  bool snapshot_done_ = true;
  WriteRecord last_;
};

}  // namespace titan
