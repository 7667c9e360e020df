// Data loaders: which samples form each batch, deterministically by seed, with a
// small state the trainer checkpoints to resume bitwise identically.
//
//   auto train = load_token_dataset(spec, Split::train, 0.1, *tok, cache_options);
//   DataLoader loader(train, {.mode = SamplingMode::random, .batch_size = 8, .seq_len = 256, .seed
//   = 42}); Batch b = loader.next();                    // b.input (ForwardBatch), b.targets
//   nlohmann::json s = loader.state().to_json();   // into the checkpoint
//   ...
//   loader.load_state(LoaderState::from_json(s));  // next() continues identically
//
// Modes (samples are seq_len + 1 stream tokens, packed by pack_batch, packing.h):
//   random      nanoGPT's get_batch: sample i of batch k on data-parallel rank r
//               starts at u * (N - L) >> 64, u the 64-bit Philox 4x32-10 draw keyed
//               by seed at counter (k, tag, r*B + i). Any batch is a pure function
//               of (seed, k), so the state is just the batch count k.
//   sequential  non-overlapping windows w*L (w < W = (N - 1) / L; window w reads
//               tokens [w*L, w*L + L]), visited in a per-epoch order: a Fisher–Yates
//               shuffle drawn from Philox(seed, epoch) (or in order with
//               shuffle = false). Each batch takes the next B * dp windows of the
//               order, rank r the r-th B of them; windows left when fewer than
//               B * dp remain are skipped and the next epoch begins.
// Philox: titan/core/philox.h (Salmon et al., SC'11). The bounded draw u*n >> 64
// (Lemire) has a bias below n / 2^64.
//
// ValidationLoader: the validation split cut into the same sequential windows,
// in order, never shuffled: batch i is the same every evaluation.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/data/packing.h"
#include "titan/data/token_cache.h"

namespace titan::data {

enum class SamplingMode { random, sequential };
std::string_view to_string(SamplingMode m);  // "random" | "sequential"
SamplingMode parse_sampling_mode(std::string_view s, std::string_view what = "sampling mode");

struct LoaderOptions {
  SamplingMode mode = SamplingMode::random;
  int64_t batch_size = 8;  // samples per batch on this rank (B)
  int64_t seq_len = 256;   // tokens per sample (L)
  uint64_t seed = 42;
  bool shuffle = true;                       // sequential: shuffle the window order of each epoch
  int64_t dp_rank = 0;                       // this rank in [0, dp_degree)
  int64_t dp_degree = 1;                     // data-parallel ranks drawing disjoint samples
  bool mask_cross_document_targets = false;  // packing.h
};

// A loader's position, plus what it must match to be restored.
struct LoaderState {
  SamplingMode mode = SamplingMode::random;
  uint64_t seed = 0;
  int64_t epoch = 0;  // sequential: current epoch (random: always 0)
  int64_t position =
      0;  // random: batches drawn; sequential: windows of this epoch consumed (all ranks)
  int64_t batch_size = 0, seq_len = 0, dp_degree = 1;
  bool shuffle = true;
  uint64_t dataset = 0;  // TokenDataset::fingerprint() of the data

  // {"mode": "random", "seed": 42, "epoch": 0, "position": 17, "batch_size": 8,
  //  "seq_len": 256, "dp_degree": 1, "shuffle": true, "dataset": "<16 hex digits>"}
  nlohmann::json to_json() const;
  // titan::Error naming the missing or mistyped field.
  static LoaderState from_json(const nlohmann::json& j);
  bool operator==(const LoaderState&) const = default;
};

class DataLoader {
 public:
  // titan::Error when the data cannot give one batch (fewer than seq_len + 1 tokens;
  // sequential: fewer than batch_size * dp_degree windows), or for a bad option.
  DataLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options);

  Batch next();                              // the next batch of this rank; advances
  std::vector<int64_t> peek_starts() const;  // its sample starts, without advancing
  LoaderState state() const;
  // Restores a state from state(). titan::Error naming the field when mode, seed,
  // batch_size, seq_len, dp_degree, shuffle or the dataset differ from this loader's,
  // or the position is out of range.
  void load_state(const LoaderState& s);

  const LoaderOptions& options() const { return opt_; }
  int64_t num_windows() const;  // random: N - L start offsets; sequential: W
  const TokenDataset& data() const { return *data_; }

 private:
  std::vector<int64_t> epoch_order(int64_t epoch) const;    // sequential window order
  std::pair<int64_t, int64_t> next_epoch_position() const;  // after any epoch rollover
  std::vector<int64_t> starts_at(const std::vector<int64_t>& order, int64_t position) const;

  std::shared_ptr<const TokenDataset> data_;
  LoaderOptions opt_;
  int64_t epoch_ = 0, position_ = 0;
  std::vector<int64_t> order_;  // sequential: window order of order_epoch_
  int64_t order_epoch_ = -1;
};

class ValidationLoader {
 public:
  // max_batches = 0: every full batch of the split. titan::Error when the split has
  // fewer than batch_size * dp_degree windows of seq_len + 1 tokens.
  ValidationLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options,
                   int64_t max_batches = 0);
  int64_t num_batches() const { return num_batches_; }
  // Batch i in [0, num_batches()) of this rank: windows (i*dp + r)*B .. +B.
  Batch batch(int64_t i) const;

 private:
  std::shared_ptr<const TokenDataset> data_;
  LoaderOptions opt_;
  int64_t num_batches_ = 0;
};

// The Fisher–Yates permutation of [0, n) for (seed, epoch) used by sequential mode.
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace titan::data
