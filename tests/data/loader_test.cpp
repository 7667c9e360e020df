// Loaders: determinism by seed, disjoint data-parallel ranks, epoch coverage,
// bitwise resume from a saved state, the fixed validation batches.
#include "titan/data/loader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "data_test_util.h"
#include "titan/data/byte_tokenizer.h"

namespace titan::data {
namespace {

using testing::expect_error;
using testing::ivec;

// 40 documents of 3..29 tokens each, EOS (= 0) between them.
std::shared_ptr<const TokenDataset> corpus() {
  std::vector<std::vector<int32_t>> docs(40);
  for (size_t d = 0; d < docs.size(); ++d)
    for (size_t k = 0; k < 3 + (d * 7) % 27; ++k)
      docs[d].push_back(1 + static_cast<int32_t>((d * 31 + k * 7) % 97));
  return TokenDataset::from_documents(docs, 0, 100);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.starts, b.starts);
  EXPECT_TRUE(same_bits(a.input.tokens, b.input.tokens));
  EXPECT_TRUE(same_bits(a.input.positions, b.input.positions));
  EXPECT_TRUE(same_bits(a.input.cu_seqlens, b.input.cu_seqlens));
  EXPECT_TRUE(same_bits(a.targets, b.targets));
  EXPECT_EQ(a.num_targets, b.num_targets);
}

LoaderOptions opts(SamplingMode mode, int64_t B, int64_t L, uint64_t seed) {
  return {.mode = mode, .batch_size = B, .seq_len = L, .seed = seed};
}

TEST(RandomLoader, DeterministicBySeed) {
  auto data = corpus();
  DataLoader a(data, opts(SamplingMode::random, 4, 16, 7)),
      b(data, opts(SamplingMode::random, 4, 16, 7));
  DataLoader c(data, opts(SamplingMode::random, 4, 16, 8));
  int differ = 0;
  for (int k = 0; k < 10; ++k) {
    const Batch x = a.next(), y = b.next(), z = c.next();
    expect_same_batch(x, y);
    differ += x.starts != z.starts;
  }
  EXPECT_GE(differ, 9);
}

TEST(RandomLoader, StartsCoverTheRange) {
  auto data = corpus();
  const int64_t N = data->num_tokens(), L = 16;
  DataLoader r(data, opts(SamplingMode::random, 8, L, 1));
  EXPECT_EQ(r.num_windows(), N - L);
  int64_t lo = N, hi = -1;
  for (int k = 0; k < 100; ++k)
    for (int64_t s : r.next().starts) {
      ASSERT_GE(s, 0);
      ASSERT_LE(s, N - L - 1);  // the sample's L + 1 tokens fit
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
  EXPECT_LT(lo, N / 20);
  EXPECT_GT(hi, N - L - 1 - N / 20);
}

TEST(RandomLoader, BatchIsAFunctionOfSeedAndStep) {
  auto data = corpus();
  DataLoader a(data, opts(SamplingMode::random, 4, 16, 3));
  std::vector<Batch> seq;
  for (int k = 0; k < 6; ++k) seq.push_back(a.next());
  DataLoader b(data, opts(SamplingMode::random, 4, 16, 3));
  LoaderState s = b.state();
  s.position = 4;
  b.load_state(s);
  EXPECT_EQ(b.peek_starts(), seq[4].starts);
  expect_same_batch(b.next(), seq[4]);
  expect_same_batch(b.next(), seq[5]);
}

TEST(RandomLoader, DataParallelRanksSplitOneGlobalBatch) {
  auto data = corpus();
  DataLoader whole(data, opts(SamplingMode::random, 6, 8, 11));
  LoaderOptions o0 = opts(SamplingMode::random, 3, 8, 11), o1 = o0;
  o0.dp_degree = o1.dp_degree = 2;
  o1.dp_rank = 1;
  DataLoader r0(data, o0), r1(data, o1);
  for (int k = 0; k < 5; ++k) {
    std::vector<int64_t> both = r0.next().starts;
    const auto s1 = r1.next().starts;
    both.insert(both.end(), s1.begin(), s1.end());
    EXPECT_EQ(both, whole.next().starts);
  }
}

TEST(SequentialLoader, EachEpochVisitsEveryWindowOnce) {
  auto data = corpus();
  const int64_t L = 10, B = 4;
  DataLoader a(data, opts(SamplingMode::sequential, B, L, 5));
  const int64_t W = (data->num_tokens() - 1) / L;
  EXPECT_EQ(a.num_windows(), W);
  const int64_t per_epoch = W / B;
  std::vector<std::vector<int64_t>> epochs(2);
  for (int e = 0; e < 2; ++e)
    for (int64_t k = 0; k < per_epoch; ++k) {
      const Batch b = a.next();
      EXPECT_EQ(a.state().epoch, e);
      epochs[e].insert(epochs[e].end(), b.starts.begin(), b.starts.end());
    }
  for (const auto& starts : epochs) {
    std::set<int64_t> uniq(starts.begin(), starts.end());
    EXPECT_EQ(uniq.size(), starts.size());
    for (int64_t s : starts) EXPECT_EQ(s % L, 0);
    EXPECT_EQ(static_cast<int64_t>(starts.size()), per_epoch * B);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled
  a.next();
  EXPECT_EQ(a.state().epoch, 2);
  EXPECT_EQ(a.state().position, B);

  // Without shuffling: windows in order.
  LoaderOptions o = opts(SamplingMode::sequential, B, L, 5);
  o.shuffle = false;
  DataLoader ordered(data, o);
  EXPECT_EQ(ordered.next().starts, (std::vector<int64_t>{0, L, 2 * L, 3 * L}));
  EXPECT_EQ(ordered.next().starts, (std::vector<int64_t>{4 * L, 5 * L, 6 * L, 7 * L}));
}

TEST(SequentialLoader, ShuffleIsAPermutationDeterministicBySeed) {
  const auto p = shuffled_order(1000, 42, 0);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, shuffled_order(1000, 42, 0));
  EXPECT_NE(p, shuffled_order(1000, 43, 0));
  EXPECT_NE(p, shuffled_order(1000, 42, 1));
  int fixed = 0;
  for (int64_t i = 0; i < 1000; ++i) fixed += p[i] == i;
  EXPECT_LT(fixed, 10);  // a uniform permutation has ~1 fixed point
}

TEST(SequentialLoader, DataParallelRanksAreDisjoint) {
  auto data = corpus();
  LoaderOptions o0 = opts(SamplingMode::sequential, 2, 10, 9), o1 = o0;
  o0.dp_degree = o1.dp_degree = 2;
  o1.dp_rank = 1;
  DataLoader r0(data, o0), r1(data, o1), whole(data, opts(SamplingMode::sequential, 4, 10, 9));
  for (int k = 0; k < 12; ++k) {
    std::vector<int64_t> both = r0.next().starts;
    const auto s1 = r1.next().starts;
    both.insert(both.end(), s1.begin(), s1.end());
    EXPECT_EQ(both, whole.next().starts);
    EXPECT_EQ(r0.state().position, whole.state().position);
  }
}

// Save the state after k batches (through its JSON text), restore it into a fresh
// loader, and the next batches are bitwise identical.
void check_resume(SamplingMode mode, int64_t k) {
  auto data = corpus();
  LoaderOptions o = opts(mode, 3, 12, 1234);
  o.mask_cross_document_targets = true;
  DataLoader a(data, o);
  for (int64_t i = 0; i < k; ++i) a.next();
  const std::string saved = a.state().to_json().dump();
  std::vector<Batch> expect;
  for (int i = 0; i < 8; ++i) expect.push_back(a.next());

  DataLoader b(data, o);
  b.next();  // wherever it is, load_state overrides it
  const LoaderState s = LoaderState::from_json(nlohmann::json::parse(saved));
  b.load_state(s);
  EXPECT_EQ(b.state(), s);
  for (const Batch& e : expect) expect_same_batch(b.next(), e);
  EXPECT_EQ(a.state(), b.state());
}

TEST(Resume, RandomBitwiseIdentical) {
  check_resume(SamplingMode::random, 0);
  check_resume(SamplingMode::random, 5);
}

TEST(Resume, SequentialBitwiseIdenticalAcrossEpochs) {
  // (N - 1) / 12 windows / 3 per batch: the 8 batches after k cross an epoch end.
  const int64_t per_epoch = ((corpus()->num_tokens() - 1) / 12) / 3;
  check_resume(SamplingMode::sequential, 0);
  check_resume(SamplingMode::sequential, per_epoch - 3);
  check_resume(SamplingMode::sequential, per_epoch);
  check_resume(SamplingMode::sequential, 2 * per_epoch + 1);
}

TEST(LoaderState, JsonRoundTripAndErrors) {
  LoaderState s{.mode = SamplingMode::sequential,
                .seed = 0xFFFFFFFFFFFFull,
                .epoch = 3,
                .position = 40,
                .batch_size = 8,
                .seq_len = 256,
                .dp_degree = 2,
                .shuffle = false,
                .dataset = 0x0123456789abcdefull};
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j["mode"], "sequential");
  EXPECT_EQ(j["dataset"], "0123456789abcdef");
  EXPECT_EQ(LoaderState::from_json(nlohmann::json::parse(j.dump())), s);
  nlohmann::json bad = j;
  bad.erase("position");
  expect_error([&] { LoaderState::from_json(bad); }, {"loader state", "missing field 'position'"});
  bad = j;
  bad["epoch"] = "three";
  expect_error([&] { LoaderState::from_json(bad); }, {"'epoch'", "integer"});
  bad = j;
  bad["mode"] = "shuffled";
  expect_error([&] { LoaderState::from_json(bad); }, {"'mode'", "shuffled", "random | sequential"});
  bad = j;
  bad["dataset"] = "xyz";
  expect_error([&] { LoaderState::from_json(bad); }, {"'dataset'", "16 hex digits"});
  expect_error([&] { LoaderState::from_json(nlohmann::json::array()); },
               {"expected a JSON object"});
}

TEST(Resume, MismatchedStateIsAnError) {
  auto data = corpus();
  DataLoader a(data, opts(SamplingMode::random, 4, 16, 7));
  const LoaderState s = a.state();
  DataLoader other_seed(data, opts(SamplingMode::random, 4, 16, 8));
  expect_error([&] { other_seed.load_state(s); }, {"load_state", "seed 7", "8"});
  DataLoader other_b(data, opts(SamplingMode::random, 2, 16, 7));
  expect_error([&] { other_b.load_state(s); }, {"batch_size 4"});
  DataLoader other_mode(data, opts(SamplingMode::sequential, 4, 16, 7));
  expect_error([&] { other_mode.load_state(s); }, {"mode 'random'"});
  auto changed = TokenDataset::from_documents(
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}}, -1);
  DataLoader other_data(changed, opts(SamplingMode::random, 4, 16, 7));
  expect_error([&] { other_data.load_state(s); }, {"dataset", "tokens changed"});
  DataLoader seq(data, opts(SamplingMode::sequential, 4, 16, 7));
  LoaderState far = seq.state();
  far.position = seq.num_windows() + 1;
  expect_error([&] { seq.load_state(far); }, {"position", "beyond"});
}

TEST(Loader, TooLittleDataIsAnError) {
  auto tiny = TokenDataset::from_documents({{1, 2, 3, 4, 5}}, -1);
  expect_error([&] { DataLoader(tiny, opts(SamplingMode::random, 1, 5, 0)); },
               {"5 tokens", "seq_len + 1 = 6"});
  expect_error([&] { DataLoader(tiny, opts(SamplingMode::sequential, 3, 2, 0)); },
               {"2 windows", "batch of 3"});
  LoaderOptions o = opts(SamplingMode::random, 1, 2, 0);
  o.dp_rank = 2;
  o.dp_degree = 2;
  expect_error([&] { DataLoader(tiny, o); }, {"dp_rank 2"});
}

TEST(ValidationLoader, SameBatchesEveryEvaluation) {
  auto data = corpus();
  const int64_t B = 2, L = 10;
  ValidationLoader v(data, opts(SamplingMode::random, B, L, 99), 0);
  const int64_t W = (data->num_tokens() - 1) / L;
  EXPECT_EQ(v.num_batches(), W / B);
  for (int64_t i = 0; i < v.num_batches(); ++i) {
    const Batch b = v.batch(i);
    EXPECT_EQ(b.starts, (std::vector<int64_t>{(2 * i) * L, (2 * i + 1) * L}));
    expect_same_batch(b, v.batch(i));
  }
  EXPECT_EQ(ValidationLoader(data, opts(SamplingMode::random, B, L, 1), 3).num_batches(), 3);
  expect_error([&] { v.batch(v.num_batches()); }, {"ValidationLoader::batch", "outside"});
  auto tiny = TokenDataset::from_documents({{1, 2, 3, 4, 5}}, -1);
  expect_error([&] { ValidationLoader(tiny, opts(SamplingMode::random, 2, 4, 0)); },
               {"validation split has 5 tokens", "1 windows"});
}

TEST(Loader, TinyShakespeareBatches) {
  ByteTokenizer byte;
  const std::string path = testing::tinyshakespeare_path();
  auto train = load_token_dataset(DatasetSpec::text_file(path), Split::train, 0.1, byte);
  auto val = load_token_dataset(DatasetSpec::text_file(path), Split::validation, 0.1, byte);
  DataLoader loader(train, opts(SamplingMode::random, 8, 256, 42));
  const Batch b = loader.next();
  EXPECT_EQ(b.input.tokens.numel(), 8 * 256);
  EXPECT_EQ(ivec(b.input.cu_seqlens),
            (std::vector<int32_t>{0, 256, 512, 768, 1024, 1280, 1536, 1792, 2048}));
  EXPECT_EQ(b.num_targets, 8 * 256);
  const auto tok = ivec(b.input.tokens), tgt = ivec(b.targets);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 256; ++j) {
      ASSERT_EQ(tok[i * 256 + j], train->tokens()[b.starts[i] + j]);
      ASSERT_EQ(tgt[i * 256 + j], train->tokens()[b.starts[i] + j + 1]);
    }
  ValidationLoader v(val, opts(SamplingMode::random, 8, 256, 42));
  EXPECT_EQ(v.num_batches(), (111540 - 1) / 256 / 8);  // 435 windows -> 54 batches
}

}  // namespace
}  // namespace titan::data
