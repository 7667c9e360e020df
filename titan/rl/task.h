// RL task samples and the datasets that serve them to a rollouter.
//
//   auto src = std::make_shared<VectorSource>("gsm8k/train", load_gsm8k(path));
//   TaskDataset train(src, /*seed=*/1234);
//   TaskSample s = train.next();               // epoch 0, position 0 of a seeded shuffle
//   nlohmann::json st = train.state().to_json(); // {"seed":1234,"epoch":0,"index":1}
//   ...                                        // checkpoint st with the trainer state
//   TaskDataset resumed(src, 0);
//   resumed.load_state(DatasetState::from_json(st));  // continues with the same sample
//
// A TaskSample is plain data (JSON payloads), so samples can be logged, stored with
// rollouts and handed to any environment. What goes in each JSON field is defined
// by the task that builds it (alphabet_sort.h, gsm8k.h, code_exec.h).
//
// Determinism: the order of epoch e is a Fisher–Yates shuffle of [0, n) driven by
// Philox 4x32-10 keyed by (seed, epoch) — it depends only on (seed, epoch, n), not
// on how many samples were taken before, so (seed, epoch, index) is the whole
// resumable state.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace titan::rl {

// One task instance.
//   id        unique, stable, human-readable ("gsm8k/test/17", "mbpp/11")
//   prompt    what the environment shows the model (task-specific fields)
//   reference what the rubric checks against (answer, expected lists, tests)
//   metadata  anything else (source file and line, split, difficulty)
struct TaskSample {
  std::string id;
  nlohmann::json prompt = nlohmann::json::object();
  nlohmann::json reference = nlohmann::json::object();
  nlohmann::json metadata = nlohmann::json::object();

  nlohmann::json to_json() const;
  // Throws titan::Error naming the missing/mistyped field.
  static TaskSample from_json(const nlohmann::json& j);
};

// Random access to a finite, fixed collection of samples. get(i) must return the
// same sample for the same i every time (it may build it on the fly, as
// alphabet_sort does) and must be safe to call from several threads.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  // Throws titan::Error for i outside [0, size()).
  virtual TaskSample get(int64_t i) const = 0;
};

// Samples held in memory (loaded from a file).
class VectorSource final : public SampleSource {
 public:
  VectorSource(std::string name, std::vector<TaskSample> samples);
  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  TaskSample get(int64_t i) const override;

 private:
  std::string name_;
  std::vector<TaskSample> samples_;
};

// A subset of another source: sample k is base.get(indices[k]).
class SubsetSource final : public SampleSource {
 public:
  SubsetSource(std::string name, std::shared_ptr<const SampleSource> base, std::vector<int64_t> indices);
  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  TaskSample get(int64_t i) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::string name_;
  std::shared_ptr<const SampleSource> base_;
  std::vector<int64_t> indices_;
};

// Where a TaskDataset stands: the next sample is position `index` of epoch `epoch`'s
// order for `seed`. index is in [0, size()).
struct DatasetState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;

  nlohmann::json to_json() const;
  // Throws titan::Error naming the missing/mistyped/negative field.
  static DatasetState from_json(const nlohmann::json& j);
  bool operator==(const DatasetState&) const = default;
};

// The order of one epoch: a permutation of [0, n), Fisher–Yates with Philox draws
// keyed by (seed, epoch) (draw k uses counter (k, epoch) and takes a uniform integer
// by 64-bit multiply-shift of two 32-bit outputs). Identity when shuffle is false.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle = true);

// Endless, seeded, resumable iteration over a source, epoch after epoch.
// Not thread-safe: one consumer (the rollouter's data loop) calls next().
class TaskDataset {
 public:
  // Throws titan::Error when src is null or empty.
  TaskDataset(std::shared_ptr<const SampleSource> src, uint64_t seed, bool shuffle = true);

  // The sample at the current position; advances (to the next epoch after the last one).
  TaskSample next();
  // The next n samples (n >= 0).
  std::vector<TaskSample> take(int64_t n);
  // Sample at position `index` of epoch `epoch` (no state change).
  TaskSample at(int64_t epoch, int64_t index) const;

  DatasetState state() const { return state_; }
  // Continue from a saved state; its seed replaces this dataset's seed. Throws
  // titan::Error when index is outside [0, size()) or epoch < 0.
  void load_state(const DatasetState& s);

  int64_t size() const { return src_->size(); }
  const SampleSource& source() const { return *src_; }
  std::shared_ptr<const SampleSource> source_ptr() const { return src_; }

 private:
  const std::vector<int64_t>& order_for(int64_t epoch) const;

  std::shared_ptr<const SampleSource> src_;
  bool shuffle_;
  DatasetState state_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// Train / validation split of one source: a seeded shuffle of [0, n) (epoch_order
// with `split_seed`, epoch 0); the first `num_validation` indices (kept in
// ascending order) form validation, the rest (ascending) train. num_validation in
// [0, n); titan::Error otherwise. Sources named "<name>/train" and "<name>/validation".
struct TrainValidationSplit {
  std::shared_ptr<const SubsetSource> train;
  std::shared_ptr<const SubsetSource> validation;
};
TrainValidationSplit split_train_validation(std::shared_ptr<const SampleSource> src, int64_t num_validation,
                                            uint64_t split_seed);

}  // namespace titan::rl
