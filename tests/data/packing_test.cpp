// Packing: samples of seq_len + 1 stream tokens -> one packed ForwardBatch with a
// cu_seqlens entry at every sample and document boundary, positions restarting at 0,
// targets shifted by one (ignore_index across documents when asked). Hand-made
// cases, then random ones against a direct per-token reference.
#include "titan/data/packing.h"

#include <gtest/gtest.h>

#include <random>

#include "data_test_util.h"
#include "titan/data/token_cache.h"

namespace titan::data {
namespace {

using testing::expect_error;
using testing::ivec;
using V = std::vector<int32_t>;

// Stream 1 2 3 | 0 4 5 | 0 6 7 8 9 with separator 0; documents [0,4) [4,7) [7,11).
std::shared_ptr<const TokenDataset> three_docs() {
  return TokenDataset::from_documents({{1, 2, 3}, {4, 5}, {6, 7, 8, 9}}, 0, 10);
}

Batch pack(const TokenDataset& d, std::vector<int64_t> starts, int64_t L, bool mask = false) {
  return pack_batch(d.tokens(), d.doc_offsets(), starts,
                    {.seq_len = L, .mask_cross_document_targets = mask});
}

TEST(Packing, SampleCrossingTwoDocuments) {
  auto d = three_docs();
  ASSERT_EQ(std::vector<int32_t>(d->tokens().begin(), d->tokens().end()),
            (V{1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9}));
  const Batch b = pack(*d, {2}, 6);
  EXPECT_EQ(ivec(b.input.tokens), (V{3, 0, 4, 5, 0, 6}));
  EXPECT_EQ(ivec(b.targets), (V{0, 4, 5, 0, 6, 7}));
  EXPECT_EQ(ivec(b.input.positions), (V{0, 1, 0, 1, 2, 0}));
  EXPECT_EQ(ivec(b.input.cu_seqlens), (V{0, 2, 5, 6}));
  EXPECT_EQ(b.num_targets, 6);
  EXPECT_EQ(b.num_tokens(), 6);
  EXPECT_EQ(b.input.tokens.dtype(), DType::i32);
  EXPECT_FALSE(b.input.is_paged());

  // Masked: the EOS of each document does not predict the next document's start.
  const Batch m = pack(*d, {2}, 6, true);
  EXPECT_EQ(ivec(m.targets), (V{0, -100, 5, 0, -100, 7}));
  EXPECT_EQ(ivec(m.input.cu_seqlens), ivec(b.input.cu_seqlens));
  EXPECT_EQ(m.num_targets, 4);
}

TEST(Packing, BoundaryAtTheSampleEdges) {
  auto d = three_docs();
  // Next document starts right after the last input: no extra sequence, but the
  // last target crosses (masked when asked).
  Batch b = pack(*d, {1}, 3, true);
  EXPECT_EQ(ivec(b.input.tokens), (V{2, 3, 0}));
  EXPECT_EQ(ivec(b.targets), (V{3, 0, -100}));
  EXPECT_EQ(ivec(b.input.positions), (V{0, 1, 2}));
  EXPECT_EQ(ivec(b.input.cu_seqlens), (V{0, 3}));
  // A sample starting exactly at a document start.
  b = pack(*d, {4}, 3, true);
  EXPECT_EQ(ivec(b.input.tokens), (V{4, 5, 0}));
  EXPECT_EQ(ivec(b.targets), (V{5, 0, -100}));
  EXPECT_EQ(ivec(b.input.cu_seqlens), (V{0, 3}));
  // A sample inside one document: one sequence, positions from 0.
  b = pack(*d, {7}, 3, true);
  EXPECT_EQ(ivec(b.input.tokens), (V{6, 7, 8}));
  EXPECT_EQ(ivec(b.targets), (V{7, 8, 9}));
  EXPECT_EQ(ivec(b.input.positions), (V{0, 1, 2}));
}

TEST(Packing, SeveralSamplesShareOneStream) {
  auto d = three_docs();
  const Batch b = pack(*d, {0, 5, 2}, 3);
  EXPECT_EQ(b.num_samples(), 3);
  EXPECT_EQ(ivec(b.input.tokens), (V{1, 2, 3, 5, 0, 6, 3, 0, 4}));
  EXPECT_EQ(ivec(b.targets), (V{2, 3, 0, 0, 6, 7, 0, 4, 5}));
  EXPECT_EQ(ivec(b.input.positions), (V{0, 1, 2, 0, 1, 0, 0, 1, 0}));
  // Sample boundaries 0, 3, 6, 9 plus document starts at 3+2 and 6+2.
  EXPECT_EQ(ivec(b.input.cu_seqlens), (V{0, 3, 5, 6, 8, 9}));
  EXPECT_EQ(b.starts, (std::vector<int64_t>{0, 5, 2}));
}

TEST(Packing, Errors) {
  auto d = three_docs();  // 11 tokens: starts for L = 4 lie in [0, 6]
  expect_error([&] { pack(*d, {0, 7}, 4); }, {"pack_batch", "sample 1", "starts at 7", "[0, 6]"});
  expect_error([&] { pack(*d, {-1}, 4); }, {"sample 0", "starts at -1"});
  expect_error([&] { pack(*d, {0}, 0); }, {"seq_len must be >= 1"});
  expect_error([&] { pack(*d, {}, 4); }, {"no samples"});
  const std::vector<int64_t> bad_offsets{0, 5};
  const std::vector<int64_t> starts{0};
  expect_error([&] { pack_batch(d->tokens(), bad_offsets, starts, {.seq_len = 2}); },
               {"doc_offsets", "11"});
}

// Reference: for every token of every sample, the document id of the input and of
// the target; a sequence starts at a sample start or where the document id changes.
void check_against_reference(const TokenDataset& d, const std::vector<int64_t>& starts, int64_t L,
                             bool mask) {
  const auto toks = d.tokens();
  const auto offs = d.doc_offsets();
  std::vector<int64_t> doc_of(toks.size());
  for (size_t k = 0; k + 1 < offs.size(); ++k)
    for (int64_t t = offs[k]; t < offs[k + 1]; ++t) doc_of[t] = static_cast<int64_t>(k);
  V tokens, targets, positions, cu;
  for (size_t b = 0; b < starts.size(); ++b) {
    int32_t p = 0;
    for (int64_t j = 0; j < L; ++j) {
      const int64_t t = starts[b] + j;
      const bool new_seq = j == 0 || doc_of[t] != doc_of[t - 1];
      if (new_seq) {
        cu.push_back(static_cast<int32_t>(b * L + j));
        p = 0;
      }
      tokens.push_back(toks[t]);
      positions.push_back(p++);
      targets.push_back(mask && doc_of[t + 1] != doc_of[t] ? -100 : toks[t + 1]);
    }
  }
  cu.push_back(static_cast<int32_t>(starts.size() * L));
  const Batch got = pack(d, starts, L, mask);
  EXPECT_EQ(ivec(got.input.tokens), tokens);
  EXPECT_EQ(ivec(got.targets), targets);
  EXPECT_EQ(ivec(got.input.positions), positions);
  EXPECT_EQ(ivec(got.input.cu_seqlens), cu);
  int64_t n = 0;
  for (int32_t t : targets) n += t != -100;
  EXPECT_EQ(got.num_targets, n);
}

TEST(Packing, RandomDocumentsMatchReference) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::vector<int32_t>> docs(1 + rng() % 12);
    for (auto& doc : docs) {
      doc.resize(1 + rng() % 9);
      for (auto& t : doc) t = 1 + static_cast<int32_t>(rng() % 50);
    }
    auto d = TokenDataset::from_documents(docs, trial % 3 == 0 ? -1 : 0, 51);
    const int64_t N = d->num_tokens();
    if (N < 3) continue;
    const int64_t L = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(N - 1, 12));
    std::vector<int64_t> starts(1 + rng() % 5);
    for (auto& s : starts) s = static_cast<int64_t>(rng() % (N - L));
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " N=" << N << " L=" << L);
    check_against_reference(*d, starts, L, false);
    check_against_reference(*d, starts, L, true);
  }
}

}  // namespace
}  // namespace titan::data
