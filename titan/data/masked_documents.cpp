#include "titan/data/masked_documents.h"

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/loader.h"

namespace titan::data {

void MaskedDocuments::add(std::span<const int32_t> ids, std::span<const uint8_t> mask) {
  TITAN_CHECK(!ids.empty(), "MaskedDocuments::add: document {} is empty", size());
  TITAN_CHECK(ids.size() == mask.size(), "MaskedDocuments::add: document {} has {} tokens but {} mask entries",
              size(), ids.size(), mask.size());
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  loss_mask.insert(loss_mask.end(), mask.begin(), mask.end());
  offsets.push_back(static_cast<int64_t>(tokens.size()));
}

int64_t MaskedDocuments::num_loss_tokens() const {
  int64_t n = 0;
  for (int64_t d = 0; d < size(); ++d)
    for (int64_t i = offsets[d] + 1; i < offsets[d + 1]; ++i) n += loss_mask[i] != 0;
  return n;
}

std::vector<std::pair<int64_t, int64_t>> pack_rows(const MaskedDocuments& docs, std::span<const int64_t> order,
                                                   int64_t seq_len) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  const auto n = static_cast<int64_t>(order.size());
  int64_t begin = 0, used = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t len = std::min(docs.doc_len(order[k]), seq_len);
    if (used + len > seq_len) {
      rows.emplace_back(begin, k);
      begin = k;
      used = 0;
    }
    used += len;
  }
  if (begin < n) rows.emplace_back(begin, n);
  return rows;
}

Batch pack_masked_rows(const MaskedDocuments& docs, const std::vector<std::vector<int64_t>>& rows,
                       const MaskedLoaderOptions& options) {
  const int64_t L = options.seq_len;
  const auto B = static_cast<int64_t>(rows.size());
  TITAN_CHECK(L >= 1 && B >= 1, "pack_masked_rows: need seq_len >= 1 and at least one row (got {} and {})", L, B);
  const int64_t T = B * L;
  TITAN_CHECK(T <= INT32_MAX, "pack_masked_rows: {} rows x seq_len {} overflow the i32 cu_seqlens", B, L);
  Batch out;
  out.seq_len = L;
  out.input.tokens = Tensor::empty({T}, DType::i32);
  out.input.positions = Tensor::empty({T}, DType::i32);
  out.targets = Tensor::empty({T}, DType::i32);
  int32_t* tok = out.input.tokens.data<int32_t>();
  int32_t* pos = out.input.positions.data<int32_t>();
  int32_t* tgt = out.targets.data<int32_t>();
  std::vector<int32_t> cu;
  int64_t num_targets = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t j = b * L;
    const int64_t end = j + L;
    out.starts.push_back(rows[b].empty() ? -1 : rows[b].front());
    for (int64_t d : rows[b]) {
      TITAN_CHECK(d >= 0 && d < docs.size(), "pack_masked_rows: row {} names document {} of {}", b, d, docs.size());
      const int64_t o = docs.offsets[d];
      const int64_t len = std::min(docs.doc_len(d), L);
      TITAN_CHECK(j + len <= end, "pack_masked_rows: the documents of row {} do not fit in {} tokens", b, L);
      cu.push_back(static_cast<int32_t>(j));
      for (int64_t i = 0; i < len; ++i) {
        tok[j + i] = docs.tokens[o + i];
        pos[j + i] = static_cast<int32_t>(i);
        const bool target = i + 1 < len && docs.loss_mask[o + i + 1] != 0;
        tgt[j + i] = target ? docs.tokens[o + i + 1] : options.ignore_index;
        num_targets += target;
      }
      j += len;
    }
    if (j < end) {  // padding: one sequence of its own, no targets
      cu.push_back(static_cast<int32_t>(j));
      for (int64_t i = 0; j < end; ++i, ++j) {
        tok[j] = options.pad_id;
        pos[j] = static_cast<int32_t>(i);
        tgt[j] = options.ignore_index;
      }
    }
  }
  cu.push_back(static_cast<int32_t>(T));
  out.num_targets = num_targets;
  out.input.cu_seqlens = Tensor::from_vector(cu, {static_cast<int64_t>(cu.size())}, DType::i32);
  return out;
}

MaskedDocumentLoader::MaskedDocumentLoader(std::shared_ptr<const MaskedDocuments> docs,
                                           const MaskedLoaderOptions& options)
    : docs_(std::move(docs)), opt_(options) {
  TITAN_CHECK(docs_ != nullptr && docs_->size() > 0, "MaskedDocumentLoader: no documents");
  TITAN_CHECK(opt_.batch_size >= 1, "MaskedDocumentLoader: batch_size must be >= 1, got {}", opt_.batch_size);
  TITAN_CHECK(opt_.seq_len >= 2, "MaskedDocumentLoader: seq_len must be >= 2, got {}", opt_.seq_len);
  TITAN_CHECK(num_batches() >= 1,
              "MaskedDocumentLoader: {} documents ({} tokens) fill {} rows of {} tokens, fewer than one batch of {}",
              docs_->size(), docs_->num_tokens(), rows_of(0).size(), opt_.seq_len, opt_.batch_size);
}

const std::vector<std::pair<int64_t, int64_t>>& MaskedDocumentLoader::rows_of(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    if (opt_.shuffle) {
      order_ = shuffled_order(docs_->size(), opt_.seed, epoch);
    } else {
      order_.resize(static_cast<size_t>(docs_->size()));
      std::iota(order_.begin(), order_.end(), int64_t{0});
    }
    rows_ = pack_rows(*docs_, order_, opt_.seq_len);
    cached_epoch_ = epoch;
  }
  return rows_;
}

int64_t MaskedDocumentLoader::num_batches() const {
  return static_cast<int64_t>(rows_of(0).size()) / opt_.batch_size;
}

Batch MaskedDocumentLoader::batch_at(int64_t epoch, int64_t first_row) const {
  const auto& rows = rows_of(epoch);
  std::vector<std::vector<int64_t>> picked(static_cast<size_t>(opt_.batch_size));
  for (int64_t r = 0; r < opt_.batch_size; ++r) {
    const auto [a, b] = rows[static_cast<size_t>(first_row + r)];
    for (int64_t k = a; k < b; ++k) picked[static_cast<size_t>(r)].push_back(order_[static_cast<size_t>(k)]);
  }
  return pack_masked_rows(*docs_, picked, opt_);
}

Batch MaskedDocumentLoader::next() {
  if (position_ + opt_.batch_size > static_cast<int64_t>(rows_of(epoch_).size())) {
    ++epoch_;
    position_ = 0;
    TITAN_CHECK(static_cast<int64_t>(rows_of(epoch_).size()) >= opt_.batch_size,
                "MaskedDocumentLoader: epoch {} packs fewer rows than one batch", epoch_);
  }
  Batch b = batch_at(epoch_, position_);
  position_ += opt_.batch_size;
  return b;
}

Batch MaskedDocumentLoader::batch(int64_t i) const {
  TITAN_CHECK(i >= 0 && i < num_batches(), "MaskedDocumentLoader::batch: index {} outside [0, {})", i,
              num_batches());
  return batch_at(0, i * opt_.batch_size);
}

nlohmann::json MaskedDocumentLoader::state() const {
  return {{"kind", "masked_documents"},     {"seed", opt_.seed},       {"epoch", epoch_},
          {"position", position_},          {"batch_size", opt_.batch_size}, {"seq_len", opt_.seq_len},
          {"shuffle", opt_.shuffle},        {"documents", docs_->size()},   {"tokens", docs_->num_tokens()}};
}

void MaskedDocumentLoader::load_state(const nlohmann::json& s) {
  auto get = [&](const char* key) -> const nlohmann::json& {
    TITAN_CHECK(s.is_object() && s.contains(key), "MaskedDocumentLoader::load_state: field '{}' missing", key);
    return s.at(key);
  };
  TITAN_CHECK(get("kind") == "masked_documents", "MaskedDocumentLoader::load_state: kind is {}, expected "
              "masked_documents", get("kind").dump());
  auto same = [&](const char* key, const nlohmann::json& mine) {
    TITAN_CHECK(get(key) == mine, "MaskedDocumentLoader::load_state: saved {} = {}, this loader has {}", key,
                get(key).dump(), mine.dump());
  };
  same("seed", opt_.seed);
  same("batch_size", opt_.batch_size);
  same("seq_len", opt_.seq_len);
  same("shuffle", opt_.shuffle);
  same("documents", docs_->size());
  same("tokens", docs_->num_tokens());
  const int64_t epoch = get("epoch").get<int64_t>(), position = get("position").get<int64_t>();
  TITAN_CHECK(epoch >= 0 && position >= 0 && position <= static_cast<int64_t>(rows_of(epoch).size()),
              "MaskedDocumentLoader::load_state: epoch {} position {} out of range", epoch, position);
  epoch_ = epoch;
  position_ = position;
}

}  // namespace titan::data
