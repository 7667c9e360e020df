// The BPE merge loop against a direct implementation of the rule (apply the
// lowest-rank adjacent pair, leftmost on ties, until none applies), on random
// merge tables over a small alphabet so that long merge chains and ties occur.
// Both the scan (short words) and the heap (long words) paths are checked.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "titan/data/bpe_merge.h"

namespace titan::data {
namespace {

struct Rule {
  uint32_t rank;
  int32_t merged;
};

std::vector<int32_t> reference_merge(const std::map<std::pair<int32_t, int32_t>, Rule>& rules,
                                     std::vector<int32_t> s) {
  while (s.size() > 1) {
    size_t best = 0;
    uint32_t best_rank = UINT32_MAX;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = rules.find({s[i], s[i + 1]});
      if (it != rules.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = i;
      }
    }
    if (best_rank == UINT32_MAX) break;
    s[best] = rules.at({s[best], s[best + 1]}).merged;
    s.erase(s.begin() + best + 1);
  }
  return s;
}

TEST(BpeMerge, MatchesReferenceOnRandomTables) {
  std::mt19937 rng(7);
  for (int table = 0; table < 20; ++table) {
    const int alphabet = 3 + table % 4;
    std::map<std::pair<int32_t, int32_t>, Rule> rules;
    MergeTable mt;
    int32_t next_id = alphabet;
    // Merges may combine any existing tokens, like a trained vocabulary.
    for (uint32_t rank = 0; rank < 60; ++rank) {
      const int32_t a = rng() % next_id, b = rng() % next_id;
      if (rules.count({a, b})) continue;
      rules[{a, b}] = {rank, next_id};
      EXPECT_TRUE(mt.add(a, b, rank, next_id));
      ++next_id;
    }
    EXPECT_FALSE(mt.add(rules.begin()->first.first, rules.begin()->first.second, 999, 0));
    for (int word = 0; word < 200; ++word) {
      const int len = word < 150 ? 1 + rng() % 30 : 40 + rng() % 400;
      std::vector<int32_t> s(len);
      for (auto& x : s) x = rng() % alphabet;
      const std::vector<int32_t> want = reference_merge(rules, s);
      for (int force : {0, 1, 2}) {
        std::vector<int32_t> got = s;
        bpe_merge_word(mt, got, force);
        ASSERT_EQ(got, want) << "table " << table << " word " << word << " force " << force;
      }
    }
  }
}

TEST(BpeMerge, TableLookup) {
  MergeTable mt;
  EXPECT_EQ(mt.find(1, 2), MergeTable::kNone);
  for (int i = 0; i < 1000; ++i) mt.add(i, i + 1, i, 5000 + i);  // grows past its initial size
  EXPECT_EQ(mt.size(), 1000u);
  EXPECT_EQ(mt.find(10, 11), (uint64_t(10) << 32) | 5010u);
  EXPECT_EQ(mt.find(11, 10), MergeTable::kNone);
}

}  // namespace
}  // namespace titan::data
