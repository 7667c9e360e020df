// WorkBuffer (async RL's bounded buffer): randomised producer/consumer runs over several
// seeds, lag bounds and capacities — every returned item within the lag bound, in put
// order, capacity never exceeded, every accepted item returned or dropped exactly once;
// close() unblocks a full producer and a waiting consumer; argument errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "titan/rl/work_buffer.h"

namespace titan::rl {
namespace {

void sleep_us(int64_t us) {
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

struct RunParams {
  uint64_t seed;
  int64_t capacity, batch, max_lag, steps;
};

// The producer stamps items with the policy version it last read from the consumer,
// refreshing it only with probability 1/3 per item (a slow weight sync), so some items
// are stale and must be dropped. The consumer trains (sleeps) and bumps its version
// after every batch.
// Returns the number of stale items dropped.
int64_t run(const RunParams& p) {
  SCOPED_TRACE(testing::Message() << "seed " << p.seed << " capacity " << p.capacity << " batch "
                                  << p.batch << " max_lag " << p.max_lag);
  WorkBuffer<int64_t> buf(p.capacity, p.max_lag);
  std::atomic<int64_t> published{0};
  std::atomic<int64_t> accepted{0};
  std::atomic<bool> over_capacity{false};
  std::thread producer([&] {
    std::mt19937_64 rng(p.seed * 7919 + 1);
    int64_t version = 0;
    for (int64_t id = 0;; ++id) {
      if (rng() % 3 == 0) version = published.load();
      if (rng() % 4 == 0) sleep_us(rng() % 200);
      if (!buf.put(id, version)) break;
      accepted.fetch_add(1);
      if (buf.size() > p.capacity) over_capacity = true;
    }
  });
  std::mt19937_64 rng(p.seed);
  int64_t returned = 0, last_id = -1;
  for (int64_t v = 0; v < p.steps; ++v) {
    auto items = buf.take(p.batch, v);
    EXPECT_EQ(static_cast<int64_t>(items.size()), p.batch) << "step " << v;
    for (const auto& [id, pv] : items) {
      EXPECT_LE(v - pv, p.max_lag) << "item " << id << " of version " << pv << " at step " << v;
      EXPECT_LE(pv, v);
      EXPECT_GT(id, last_id);  // FIFO, no duplicates
      last_id = id;
    }
    returned += static_cast<int64_t>(items.size());
    EXPECT_LE(buf.size(), p.capacity);
    sleep_us(rng() % 300);  // "training"
    published.store(v + 1);
  }
  buf.close();
  producer.join();
  EXPECT_FALSE(over_capacity.load());
  EXPECT_LE(buf.high_water(), p.capacity);
  EXPECT_EQ(accepted.load(), returned + buf.dropped() + buf.size());
  return buf.dropped();
}

TEST(WorkBuffer, RandomisedProducerConsumer) {
  int64_t dropped_lag0 = 0;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    for (int64_t lag : {0, 1, 2}) {
      const int64_t batch = 2 + static_cast<int64_t>(seed % 3);
      const int64_t d = run({seed, batch * (1 + static_cast<int64_t>(seed % 2)), batch, lag, 40});
      if (lag == 0) dropped_lag0 += d;
    }
  }
  EXPECT_GT(dropped_lag0, 0);  // the stale path was exercised (the producer lags often)
}

TEST(WorkBuffer, StaleItemsAreDroppedNotReturned) {
  WorkBuffer<std::string> buf(4, 1);
  ASSERT_TRUE(buf.put("v0", 0));
  ASSERT_TRUE(buf.put("v2", 2));
  ASSERT_TRUE(buf.put("v1", 1));
  auto got = buf.take(2, 2);  // v0 is 2 versions old > 1
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, "v2");
  EXPECT_EQ(got[0].second, 2);
  EXPECT_EQ(got[1].first, "v1");
  EXPECT_EQ(buf.dropped(), 1);
  EXPECT_EQ(buf.size(), 0);
}

TEST(WorkBuffer, CloseUnblocksProducer) {
  WorkBuffer<int> buf(2, 0);
  ASSERT_TRUE(buf.put(1, 0));
  ASSERT_TRUE(buf.put(2, 0));
  std::atomic<int> result{-1};
  std::thread t([&] { result = buf.put(3, 0) ? 1 : 0; });  // blocks: full
  sleep_us(20000);
  EXPECT_EQ(result.load(), -1);
  buf.close();
  t.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_EQ(buf.size(), 2);
  EXPECT_FALSE(buf.put(4, 0));
}

TEST(WorkBuffer, CloseUnblocksConsumerWithWhatIsLeft) {
  WorkBuffer<int> buf(8, 0);
  ASSERT_TRUE(buf.put(1, 3));
  ASSERT_TRUE(buf.put(2, 2));  // stale at version 3
  std::vector<std::pair<int, int64_t>> got;
  std::atomic<bool> done{false};
  std::thread t([&] {
    got = buf.take(5, 3);
    done = true;
  });  // blocks: only 1 fresh item
  sleep_us(20000);
  EXPECT_FALSE(done.load());
  buf.close();
  t.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 1);
  EXPECT_EQ(buf.dropped(), 1);
  EXPECT_TRUE(buf.take(5, 3).empty());  // closed and empty: returns at once
}

TEST(WorkBuffer, Errors) {
  EXPECT_THROW(WorkBuffer<int>(0, 0), Error);
  EXPECT_THROW(WorkBuffer<int>(4, -1), Error);
  WorkBuffer<int> buf(4, 0);
  EXPECT_THROW(buf.take(0, 0), Error);
  try {
    buf.take(5, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WorkBuffer::take: argument 'n'"), std::string::npos);
  }
}

}  // namespace
}  // namespace titan::rl
