// Task samples and datasets: seeded shuffles, epochs, resumable state, splits, errors.
#include <algorithm>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/rl/task.h"

namespace titan::rl {
namespace {

using nlohmann::json;

std::shared_ptr<VectorSource> numbered(int n) {
  std::vector<TaskSample> v;
  for (int i = 0; i < n; ++i) {
    TaskSample s;
    s.id = "s" + std::to_string(i);
    s.prompt = {{"i", i}};
    v.push_back(s);
  }
  return std::make_shared<VectorSource>("numbered", std::move(v));
}

std::vector<std::string> ids(const std::vector<TaskSample>& v) {
  std::vector<std::string> out;
  for (const auto& s : v) out.push_back(s.id);
  return out;
}

TEST(EpochOrder, IsASeededPermutation) {
  const auto a = epoch_order(1000, 42, 0);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(a, iota);
  EXPECT_EQ(a, epoch_order(1000, 42, 0));   // deterministic
  EXPECT_NE(a, epoch_order(1000, 42, 1));   // a new order each epoch
  EXPECT_NE(a, epoch_order(1000, 43, 0));   // and per seed
  EXPECT_EQ(epoch_order(5, 42, 0, /*shuffle=*/false), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(epoch_order(0, 1, 0).empty());
  EXPECT_EQ(epoch_order(1, 1, 0), std::vector<int64_t>{0});
  // Roughly uniform: each value lands in the first position about 1/4 of the time.
  std::vector<int> first(4, 0);
  for (int e = 0; e < 4000; ++e) ++first[static_cast<size_t>(epoch_order(4, 7, e)[0])];
  for (int c : first) EXPECT_NEAR(c, 1000, 150);
}

TEST(TaskDataset, WalksEpochsAndResumes) {
  auto src = numbered(10);
  TaskDataset d(src, 99);
  const auto all = ids(d.take(25));  // 2.5 epochs
  EXPECT_EQ(d.state(), (DatasetState{99, 2, 5}));
  // Each epoch is a permutation of the source.
  for (int e = 0; e < 2; ++e) {
    std::set<std::string> seen(all.begin() + e * 10, all.begin() + e * 10 + 10);
    EXPECT_EQ(seen.size(), 10u);
  }
  EXPECT_NE(std::vector<std::string>(all.begin(), all.begin() + 10),
            std::vector<std::string>(all.begin() + 10, all.begin() + 20));

  // Resume from a state saved after 13 samples, through JSON.
  TaskDataset first(src, 99);
  first.take(13);
  const json saved = first.state().to_json();
  EXPECT_EQ(saved, (json{{"seed", 99}, {"epoch", 1}, {"index", 3}}));
  TaskDataset resumed(src, /*seed=*/0);
  resumed.load_state(DatasetState::from_json(saved));
  EXPECT_EQ(ids(resumed.take(12)), std::vector<std::string>(all.begin() + 13, all.end()));
  // at() does not move the state.
  EXPECT_EQ(d.at(0, 0).id, all[0]);
  EXPECT_EQ(d.state(), (DatasetState{99, 2, 5}));
}

TEST(TaskDataset, NoShuffleAndErrors) {
  auto src = numbered(3);
  TaskDataset d(src, 1, /*shuffle=*/false);
  EXPECT_EQ(ids(d.take(4)), (std::vector<std::string>{"s0", "s1", "s2", "s0"}));
  EXPECT_THROW(TaskDataset(nullptr, 1), Error);
  EXPECT_THROW(TaskDataset(std::make_shared<VectorSource>("empty", std::vector<TaskSample>{}), 1), Error);
  EXPECT_THROW(d.load_state({1, 0, 3}), Error);
  EXPECT_THROW(d.load_state({1, -1, 0}), Error);
  EXPECT_THROW(d.take(-1), Error);
  EXPECT_THROW(src->get(3), Error);
  EXPECT_THROW(DatasetState::from_json(json{{"seed", 1}, {"epoch", 0}}), Error);
  EXPECT_THROW(DatasetState::from_json(json{{"seed", 1}, {"epoch", "0"}, {"index", 0}}), Error);
  EXPECT_THROW(DatasetState::from_json(json{{"seed", -1}, {"epoch", 0}, {"index", 0}}), Error);
  EXPECT_THROW(DatasetState::from_json(json::array()), Error);
  try {
    DatasetState::from_json(json{{"seed", 1}, {"epoch", 0}, {"index", -2}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "DatasetState::from_json: field 'index' must be >= 0, got -2");
  }
}

TEST(TaskSample, JsonRoundTrip) {
  TaskSample s;
  s.id = "x/1";
  s.prompt = {{"q", "2+2?"}};
  s.reference = {{"answer", "4"}};
  s.metadata = {{"line", 3}};
  const TaskSample t = TaskSample::from_json(s.to_json());
  EXPECT_EQ(t.id, s.id);
  EXPECT_EQ(t.prompt, s.prompt);
  EXPECT_EQ(t.reference, s.reference);
  EXPECT_EQ(t.metadata, s.metadata);
  EXPECT_THROW(TaskSample::from_json(json{{"prompt", {}}}), Error);
  EXPECT_THROW(TaskSample::from_json(json{{"id", 3}}), Error);
}

TEST(Split, DisjointCoveringDeterministic) {
  auto src = numbered(100);
  const auto a = split_train_validation(src, 20, 5);
  EXPECT_EQ(a.train->size(), 80);
  EXPECT_EQ(a.validation->size(), 20);
  std::set<int64_t> all(a.train->indices().begin(), a.train->indices().end());
  for (int64_t i : a.validation->indices()) EXPECT_TRUE(all.insert(i).second) << i;
  EXPECT_EQ(all.size(), 100u);
  EXPECT_TRUE(std::is_sorted(a.validation->indices().begin(), a.validation->indices().end()));
  EXPECT_EQ(a.validation->indices(), split_train_validation(src, 20, 5).validation->indices());
  EXPECT_NE(a.validation->indices(), split_train_validation(src, 20, 6).validation->indices());
  EXPECT_EQ(a.train->name(), "numbered/train");
  EXPECT_EQ(a.validation->get(0).id, src->get(a.validation->indices()[0]).id);
  EXPECT_EQ(split_train_validation(src, 0, 5).validation->size(), 0);
  EXPECT_THROW(split_train_validation(src, 100, 5), Error);
  EXPECT_THROW(split_train_validation(src, -1, 5), Error);
}

}  // namespace
}  // namespace titan::rl
