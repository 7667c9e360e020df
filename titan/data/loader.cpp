#include "titan/data/loader.h"

#include <nlohmann/json.hpp>
#include <numeric>
#include <utility>

#include "titan/core/error.h"
#include "titan/core/philox.h"

namespace titan::data {

namespace {

// Philox stream tags keep the loader's draws apart from other users of the seed
// (parameter init, dropout) that key Philox with the same seed.
constexpr uint64_t kRandomTag = 0x44415441;   // "DATA"
constexpr uint64_t kShuffleTag = 0x53485546;  // "SHUF"

// A 64-bit draw for (seed, offset, stream) mapped to [0, n): floor(u * n / 2^64).
int64_t bounded_draw(uint64_t seed, uint64_t offset, uint64_t stream, int64_t n) {
  const PhiloxCounter c = philox_draw(seed, offset, stream);
  const uint64_t u = static_cast<uint64_t>(c[0]) | (static_cast<uint64_t>(c[1]) << 32);
  return static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(n)) >> 64);
}

void check_options(const LoaderOptions& o, const char* who) {
  TITAN_CHECK(o.batch_size >= 1, "{}: batch_size must be >= 1, got {}", who, o.batch_size);
  TITAN_CHECK(o.seq_len >= 1, "{}: seq_len must be >= 1, got {}", who, o.seq_len);
  TITAN_CHECK(o.dp_degree >= 1 && o.dp_rank >= 0 && o.dp_rank < o.dp_degree,
              "{}: dp_rank {} is outside [0, dp_degree = {})", who, o.dp_rank, o.dp_degree);
}

int64_t sequential_windows(const TokenDataset& d, int64_t seq_len) {
  return (d.num_tokens() - 1) / seq_len;
}

PackingOptions packing(const LoaderOptions& o) {
  return {.seq_len = o.seq_len, .mask_cross_document_targets = o.mask_cross_document_targets};
}

}  // namespace

std::string_view to_string(SamplingMode m) {
  return m == SamplingMode::random ? "random" : "sequential";
}

SamplingMode parse_sampling_mode(std::string_view s, std::string_view what) {
  if (s == "random") return SamplingMode::random;
  if (s == "sequential") return SamplingMode::sequential;
  fail("{}: unknown value '{}' (expected random | sequential)", what, s);
}

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  const uint64_t stream = (kShuffleTag << 32) | static_cast<uint32_t>(epoch);
  for (int64_t i = n - 1; i >= 1; --i) {
    const int64_t j = bounded_draw(seed, static_cast<uint64_t>(i), stream, i + 1);
    std::swap(order[i], order[j]);
  }
  return order;
}

// ---- LoaderState

nlohmann::json LoaderState::to_json() const {
  return {{"mode", to_string(mode)},  {"seed", seed},
          {"epoch", epoch},           {"position", position},
          {"batch_size", batch_size}, {"seq_len", seq_len},
          {"dp_degree", dp_degree},   {"shuffle", shuffle},
          {"dataset", hex64(dataset)}};
}

LoaderState LoaderState::from_json(const nlohmann::json& j) {
  TITAN_CHECK(j.is_object(), "loader state: expected a JSON object, got {}", j.type_name());
  auto field = [&](const char* name) -> const nlohmann::json& {
    auto it = j.find(name);
    TITAN_CHECK(it != j.end(), "loader state: missing field '{}'", name);
    return *it;
  };
  auto integer = [&](const char* name) -> int64_t {
    const auto& v = field(name);
    TITAN_CHECK(v.is_number_integer(), "loader state: field '{}' must be an integer, got {}", name,
                v.dump());
    return v.get<int64_t>();
  };
  LoaderState s;
  const auto& mode = field("mode");
  TITAN_CHECK(mode.is_string(), "loader state: field 'mode' must be a string, got {}", mode.dump());
  s.mode = parse_sampling_mode(mode.get<std::string>(), "loader state: field 'mode'");
  const auto& seed = field("seed");
  TITAN_CHECK(seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<int64_t>() >= 0),
              "loader state: field 'seed' must be a non-negative integer, got {}", seed.dump());
  s.seed = seed.get<uint64_t>();
  s.epoch = integer("epoch");
  s.position = integer("position");
  s.batch_size = integer("batch_size");
  s.seq_len = integer("seq_len");
  s.dp_degree = integer("dp_degree");
  const auto& shuffle = field("shuffle");
  TITAN_CHECK(shuffle.is_boolean(), "loader state: field 'shuffle' must be a boolean, got {}",
              shuffle.dump());
  s.shuffle = shuffle.get<bool>();
  const auto& ds = field("dataset");
  TITAN_CHECK(ds.is_string() && ds.get_ref<const std::string&>().size() == 16 &&
                  ds.get_ref<const std::string&>().find_first_not_of("0123456789abcdef") ==
                      std::string::npos,
              "loader state: field 'dataset' must be 16 hex digits, got {}", ds.dump());
  s.dataset = std::stoull(ds.get<std::string>(), nullptr, 16);
  return s;
}

// ---- DataLoader

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> data, const LoaderOptions& options)
    : data_(std::move(data)), opt_(options) {
  TITAN_CHECK(data_ != nullptr, "DataLoader: no dataset");
  check_options(opt_, "DataLoader");
  const int64_t N = data_->num_tokens();
  TITAN_CHECK(N >= opt_.seq_len + 1,
              "DataLoader: the dataset has {} tokens, fewer than seq_len + 1 = {}", N,
              opt_.seq_len + 1);
  if (opt_.mode == SamplingMode::sequential) {
    const int64_t W = sequential_windows(*data_, opt_.seq_len);
    TITAN_CHECK(W >= opt_.batch_size * opt_.dp_degree,
                "DataLoader: {} tokens give {} windows of seq_len {}, fewer than one batch of {} x "
                "{} ranks",
                N, W, opt_.seq_len, opt_.batch_size, opt_.dp_degree);
  }
}

int64_t DataLoader::num_windows() const {
  return opt_.mode == SamplingMode::random ? data_->num_tokens() - opt_.seq_len
                                           : sequential_windows(*data_, opt_.seq_len);
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (opt_.shuffle) return shuffled_order(num_windows(), opt_.seed, epoch);
  std::vector<int64_t> order(static_cast<size_t>(num_windows()));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

std::pair<int64_t, int64_t> DataLoader::next_epoch_position() const {
  if (opt_.mode == SamplingMode::random) return {0, position_};
  if (position_ + opt_.batch_size * opt_.dp_degree > num_windows()) return {epoch_ + 1, 0};
  return {epoch_, position_};
}

std::vector<int64_t> DataLoader::starts_at(const std::vector<int64_t>& order,
                                           int64_t position) const {
  const int64_t B = opt_.batch_size;
  std::vector<int64_t> starts(static_cast<size_t>(B));
  if (opt_.mode == SamplingMode::random) {
    const int64_t n = num_windows();
    for (int64_t i = 0; i < B; ++i) {
      const auto g = static_cast<uint64_t>(opt_.dp_rank * B + i);
      starts[i] =
          bounded_draw(opt_.seed, static_cast<uint64_t>(position), (kRandomTag << 32) | g, n);
    }
  } else {
    for (int64_t i = 0; i < B; ++i)
      starts[i] = order[position + opt_.dp_rank * B + i] * opt_.seq_len;
  }
  return starts;
}

std::vector<int64_t> DataLoader::peek_starts() const {
  const auto [epoch, position] = next_epoch_position();
  if (opt_.mode == SamplingMode::random || epoch == order_epoch_)
    return starts_at(order_, position);
  return starts_at(epoch_order(epoch), position);
}

Batch DataLoader::next() {
  const auto [epoch, position] = next_epoch_position();
  if (opt_.mode == SamplingMode::sequential && order_epoch_ != epoch) {
    order_ = epoch_order(epoch);
    order_epoch_ = epoch;
  }
  const std::vector<int64_t> starts = starts_at(order_, position);
  epoch_ = epoch;
  position_ = position + (opt_.mode == SamplingMode::random ? 1 : opt_.batch_size * opt_.dp_degree);
  return pack_batch(data_->tokens(), data_->doc_offsets(), starts, packing(opt_));
}

LoaderState DataLoader::state() const {
  LoaderState s;
  s.mode = opt_.mode;
  s.seed = opt_.seed;
  s.epoch = epoch_;
  s.position = position_;
  s.batch_size = opt_.batch_size;
  s.seq_len = opt_.seq_len;
  s.dp_degree = opt_.dp_degree;
  s.shuffle = opt_.shuffle;
  s.dataset = data_->fingerprint();
  return s;
}

void DataLoader::load_state(const LoaderState& s) {
  const LoaderState mine = state();
  TITAN_CHECK(s.mode == mine.mode, "DataLoader::load_state: mode '{}' != the loader's '{}'",
              to_string(s.mode), to_string(mine.mode));
  TITAN_CHECK(s.seed == mine.seed, "DataLoader::load_state: seed {} != the loader's {}", s.seed,
              mine.seed);
  TITAN_CHECK(s.batch_size == mine.batch_size,
              "DataLoader::load_state: batch_size {} != the loader's {}", s.batch_size,
              mine.batch_size);
  TITAN_CHECK(s.seq_len == mine.seq_len, "DataLoader::load_state: seq_len {} != the loader's {}",
              s.seq_len, mine.seq_len);
  TITAN_CHECK(s.dp_degree == mine.dp_degree,
              "DataLoader::load_state: dp_degree {} != the loader's {}", s.dp_degree,
              mine.dp_degree);
  TITAN_CHECK(s.shuffle == mine.shuffle || s.mode == SamplingMode::random,
              "DataLoader::load_state: shuffle {} != the loader's {}", s.shuffle, mine.shuffle);
  TITAN_CHECK(s.dataset == mine.dataset,
              "DataLoader::load_state: dataset {} != the loader's {} (the tokens changed since the "
              "checkpoint)",
              hex64(s.dataset), hex64(mine.dataset));
  TITAN_CHECK(s.position >= 0 && s.epoch >= 0,
              "DataLoader::load_state: negative epoch {} or position {}", s.epoch, s.position);
  TITAN_CHECK(s.mode == SamplingMode::random || s.position <= num_windows(),
              "DataLoader::load_state: position {} beyond the {} windows of an epoch", s.position,
              num_windows());
  TITAN_CHECK(s.mode == SamplingMode::sequential || s.epoch == 0,
              "DataLoader::load_state: random mode has no epochs, got epoch {}", s.epoch);
  epoch_ = s.epoch;
  position_ = s.position;
}

// ---- ValidationLoader

ValidationLoader::ValidationLoader(std::shared_ptr<const TokenDataset> data,
                                   const LoaderOptions& options, int64_t max_batches)
    : data_(std::move(data)), opt_(options) {
  TITAN_CHECK(data_ != nullptr, "ValidationLoader: no dataset");
  check_options(opt_, "ValidationLoader");
  TITAN_CHECK(max_batches >= 0, "ValidationLoader: max_batches must be >= 0, got {}", max_batches);
  const int64_t N = data_->num_tokens();
  const int64_t W = N > opt_.seq_len ? sequential_windows(*data_, opt_.seq_len) : 0;
  const int64_t full = W / (opt_.batch_size * opt_.dp_degree);
  TITAN_CHECK(full >= 1,
              "ValidationLoader: the validation split has {} tokens = {} windows of seq_len {}, "
              "fewer than one "
              "batch of {} x {} ranks",
              N, W, opt_.seq_len, opt_.batch_size, opt_.dp_degree);
  num_batches_ = max_batches == 0 ? full : std::min(full, max_batches);
}

Batch ValidationLoader::batch(int64_t i) const {
  TITAN_CHECK(i >= 0 && i < num_batches_, "ValidationLoader::batch: index {} outside [0, {})", i,
              num_batches_);
  const int64_t B = opt_.batch_size;
  std::vector<int64_t> starts(static_cast<size_t>(B));
  for (int64_t k = 0; k < B; ++k)
    starts[k] = ((i * opt_.dp_degree + opt_.dp_rank) * B + k) * opt_.seq_len;
  return pack_batch(data_->tokens(), data_->doc_offsets(), starts, packing(opt_));
}

}  // namespace titan::data
