// Masked documents: training documents that carry a per-token loss mask (SFT: the
// loss is on the assistant's tokens only), packed whole into fixed-length rows.
//
//   MaskedDocuments docs;
//   docs.add(ids, mask);                      // mask[i] = 1: token i is a training target
//   MaskedDocumentLoader loader(std::make_shared<const MaskedDocuments>(std::move(docs)),
//                               {.batch_size = 8, .seq_len = 1024, .seed = 7});
//   Batch b = loader.next();                  // b.input (ForwardBatch), b.targets
//
// Packing (the layout of packing.h, with whole documents instead of stream windows):
// an epoch visits the documents in a Fisher–Yates order drawn from Philox (seed,
// epoch) (shuffled_order, loader.h) or in order (shuffle = false) and fills rows of
// seq_len tokens greedily: documents go into the current row while they fit, then a
// new row starts. A document longer than seq_len is cut to its first seq_len tokens.
// Every document is its own attention sequence (a cu_seqlens entry, positions
// restarting at 0), so nothing attends across documents; the unused tail of a row is
// one padding sequence of pad_id tokens. A batch is B consecutive rows; the rows left
// at the end of an epoch that do not fill a batch are skipped (the next epoch begins).
//
// Targets (the mask, stated once): for token i of a document with tokens x and mask m,
//   target[i] = x[i+1]       when i+1 < len and m[i+1] = 1,
//   target[i] = ignore_index otherwise (the document's last token, masked next
//                            tokens, and every padding token).
// So the loss counts exactly the tokens whose mask is 1 (except a document's first
// token, which nothing predicts), and no target crosses a document.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <vector>

#include "titan/data/packing.h"

namespace titan::data {

struct MaskedDocuments {
  std::vector<int32_t> tokens;      // (N) every document, back to back
  std::vector<uint8_t> loss_mask;   // (N) 1: the token is a training target
  std::vector<int64_t> offsets{0};  // (D + 1) document d is [offsets[d], offsets[d+1])

  // Appends a document. titan::Error when it is empty or the sizes differ.
  void add(std::span<const int32_t> ids, std::span<const uint8_t> mask);
  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_loss_tokens() const;
  int64_t doc_len(int64_t d) const { return offsets[d + 1] - offsets[d]; }
};

struct MaskedLoaderOptions {
  int64_t batch_size = 8;  // rows per batch (B)
  int64_t seq_len = 1024;  // tokens per row (L)
  uint64_t seed = 42;
  bool shuffle = true;     // shuffle the document order of each epoch
  int32_t pad_id = 0;      // token of the padding sequence
  int32_t ignore_index = kIgnoreIndex;
};

// The rows of one epoch: row r holds documents rows[r].first .. rows[r].second - 1 of
// `order` (greedy fill, see above).
std::vector<std::pair<int64_t, int64_t>> pack_rows(const MaskedDocuments& docs, std::span<const int64_t> order,
                                                   int64_t seq_len);

// Packs the rows (each a list of document indices) into one Batch (T = rows * L).
Batch pack_masked_rows(const MaskedDocuments& docs, const std::vector<std::vector<int64_t>>& rows,
                       const MaskedLoaderOptions& options);

class MaskedDocumentLoader {
 public:
  // titan::Error when the documents cannot fill one batch, or for bad options.
  MaskedDocumentLoader(std::shared_ptr<const MaskedDocuments> docs, const MaskedLoaderOptions& options);

  Batch next();  // the next batch; advances (into the next epoch after the last full batch)
  // {"kind": "masked_documents", "seed", "epoch", "position" (rows consumed), "batch_size",
  //  "seq_len", "shuffle", "documents" (count), "tokens" (count)}
  nlohmann::json state() const;
  // titan::Error naming the field when the saved state belongs to other data or options.
  void load_state(const nlohmann::json& state);

  // Batch i of the epoch-0 order without advancing (the validation batches when
  // shuffle = false); num_batches() of them per epoch.
  Batch batch(int64_t i) const;
  int64_t num_batches() const;

  const MaskedDocuments& documents() const { return *docs_; }
  const MaskedLoaderOptions& options() const { return opt_; }

 private:
  const std::vector<std::pair<int64_t, int64_t>>& rows_of(int64_t epoch) const;
  Batch batch_at(int64_t epoch, int64_t first_row) const;

  std::shared_ptr<const MaskedDocuments> docs_;
  MaskedLoaderOptions opt_;
  int64_t epoch_ = 0, position_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> order_;
  mutable std::vector<std::pair<int64_t, int64_t>> rows_;
};

}  // namespace titan::data
