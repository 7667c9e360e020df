#include "titan/rl/task.h"

#include <algorithm>
#include <numeric>

#include "titan/core/error.h"
#include "titan/core/philox.h"

namespace titan::rl {

using nlohmann::json;

json TaskSample::to_json() const {
  return json{{"id", id}, {"prompt", prompt}, {"reference", reference}, {"metadata", metadata}};
}

TaskSample TaskSample::from_json(const json& j) {
  TITAN_CHECK(j.is_object(), "TaskSample::from_json: expected a JSON object, got {}", j.type_name());
  TITAN_CHECK(j.contains("id") && j["id"].is_string(), "TaskSample::from_json: field 'id' must be a string");
  TaskSample s;
  s.id = j["id"].get<std::string>();
  if (j.contains("prompt")) s.prompt = j["prompt"];
  if (j.contains("reference")) s.reference = j["reference"];
  if (j.contains("metadata")) s.metadata = j["metadata"];
  return s;
}

VectorSource::VectorSource(std::string name, std::vector<TaskSample> samples)
    : name_(std::move(name)), samples_(std::move(samples)) {}

TaskSample VectorSource::get(int64_t i) const {
  TITAN_CHECK(i >= 0 && i < size(), "VectorSource::get({}): index {} outside [0, {})", name_, i, size());
  return samples_[static_cast<size_t>(i)];
}

SubsetSource::SubsetSource(std::string name, std::shared_ptr<const SampleSource> base, std::vector<int64_t> indices)
    : name_(std::move(name)), base_(std::move(base)), indices_(std::move(indices)) {
  TITAN_CHECK(base_ != nullptr, "SubsetSource({}): base source is null", name_);
  for (int64_t i : indices_)
    TITAN_CHECK(i >= 0 && i < base_->size(), "SubsetSource({}): index {} outside [0, {}) of {}", name_, i,
                base_->size(), base_->name());
}

TaskSample SubsetSource::get(int64_t i) const {
  TITAN_CHECK(i >= 0 && i < size(), "SubsetSource::get({}): index {} outside [0, {})", name_, i, size());
  return base_->get(indices_[static_cast<size_t>(i)]);
}

json DatasetState::to_json() const { return json{{"seed", seed}, {"epoch", epoch}, {"index", index}}; }

DatasetState DatasetState::from_json(const json& j) {
  TITAN_CHECK(j.is_object(), "DatasetState::from_json: expected a JSON object, got {}", j.type_name());
  DatasetState s;
  for (const char* key : {"seed", "epoch", "index"})
    TITAN_CHECK(j.contains(key) && j[key].is_number_integer(),
                "DatasetState::from_json: field '{}' must be an integer", key);
  TITAN_CHECK(j["seed"].is_number_unsigned() || j["seed"].get<int64_t>() >= 0,
              "DatasetState::from_json: field 'seed' must be >= 0");
  s.seed = j["seed"].get<uint64_t>();
  s.epoch = j["epoch"].get<int64_t>();
  s.index = j["index"].get<int64_t>();
  TITAN_CHECK(s.epoch >= 0, "DatasetState::from_json: field 'epoch' must be >= 0, got {}", s.epoch);
  TITAN_CHECK(s.index >= 0, "DatasetState::from_json: field 'index' must be >= 0, got {}", s.index);
  return s;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  TITAN_CHECK(n >= 0, "epoch_order: n must be >= 0, got {}", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  for (int64_t k = n - 1; k >= 1; --k) {
    const PhiloxCounter r = philox_draw(seed, static_cast<uint64_t>(k), static_cast<uint64_t>(epoch));
    const uint64_t u = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(k + 1)) >> 64);
    std::swap(order[static_cast<size_t>(k)], order[static_cast<size_t>(j)]);
  }
  return order;
}

TaskDataset::TaskDataset(std::shared_ptr<const SampleSource> src, uint64_t seed, bool shuffle)
    : src_(std::move(src)), shuffle_(shuffle) {
  TITAN_CHECK(src_ != nullptr, "TaskDataset: source is null");
  TITAN_CHECK(src_->size() > 0, "TaskDataset: source '{}' is empty", src_->name());
  state_.seed = seed;
}

const std::vector<int64_t>& TaskDataset::order_for(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_order_ = epoch_order(src_->size(), state_.seed, epoch, shuffle_);
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

TaskSample TaskDataset::at(int64_t epoch, int64_t index) const {
  TITAN_CHECK(epoch >= 0, "TaskDataset::at({}): epoch must be >= 0, got {}", src_->name(), epoch);
  TITAN_CHECK(index >= 0 && index < size(), "TaskDataset::at({}): index {} outside [0, {})", src_->name(), index,
              size());
  return src_->get(order_for(epoch)[static_cast<size_t>(index)]);
}

TaskSample TaskDataset::next() {
  TaskSample s = at(state_.epoch, state_.index);
  if (++state_.index == size()) {
    state_.index = 0;
    ++state_.epoch;
  }
  return s;
}

std::vector<TaskSample> TaskDataset::take(int64_t n) {
  TITAN_CHECK(n >= 0, "TaskDataset::take({}): n must be >= 0, got {}", src_->name(), n);
  std::vector<TaskSample> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(next());
  return out;
}

void TaskDataset::load_state(const DatasetState& s) {
  TITAN_CHECK(s.epoch >= 0, "TaskDataset::load_state({}): epoch must be >= 0, got {}", src_->name(), s.epoch);
  TITAN_CHECK(s.index >= 0 && s.index < size(), "TaskDataset::load_state({}): index {} outside [0, {})",
              src_->name(), s.index, size());
  if (s.seed != state_.seed) cached_epoch_ = -1;
  state_ = s;
}

TrainValidationSplit split_train_validation(std::shared_ptr<const SampleSource> src, int64_t num_validation,
                                            uint64_t split_seed) {
  TITAN_CHECK(src != nullptr, "split_train_validation: source is null");
  const int64_t n = src->size();
  TITAN_CHECK(num_validation >= 0 && num_validation < n,
              "split_train_validation({}): num_validation must be in [0, {}), got {}", src->name(), n,
              num_validation);
  std::vector<int64_t> order = epoch_order(n, split_seed, 0, true);
  std::vector<int64_t> val(order.begin(), order.begin() + num_validation);
  std::vector<int64_t> train(order.begin() + num_validation, order.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  TrainValidationSplit out;
  out.train = std::make_shared<SubsetSource>(src->name() + "/train", src, std::move(train));
  out.validation = std::make_shared<SubsetSource>(src->name() + "/validation", src, std::move(val));
  return out;
}

}  // namespace titan::rl
