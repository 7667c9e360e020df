// Packing: fixed-length training samples cut from a token stream, assembled into
// one packed ForwardBatch whose attention never crosses a document boundary.
//
// A sample is seq_len + 1 consecutive stream tokens starting at `start`:
//   inputs  = stream[start .. start + seq_len)
//   targets = stream[start + 1 .. start + seq_len]          (shifted by one)
// Inside a sample, every document start (doc_offsets[d] in (start, start+seq_len))
// opens a new attention sequence: it adds a cu_seqlens entry and positions restart
// at 0. A sample that begins inside a document starts that document's sequence at
// position 0 (TorchTitan's concat-then-split packing does the same).
//
// Targets across a boundary (TorchTitan's behaviour, the default): documents are
// joined by the EOS separator (token_cache.h), the EOS belongs to the document it
// ends, and its target is the first token of the next document — the model is
// trained on that prediction, but attention never sees the previous document.
// With mask_cross_document_targets the target of a document's last token (the EOS)
// becomes ignore_index instead, so no loss crosses a document either.
//
// A batch of B samples is one flat stream of T = B * seq_len tokens (no batch
// dimension in the model, forward_batch.h): sample b occupies tokens
// [b*seq_len, (b+1)*seq_len), cu_seqlens holds every sample boundary and every
// document boundary, so S = B + (documents starting inside samples).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/models/common/forward_batch.h"

namespace titan::data {

inline constexpr int32_t kIgnoreIndex = -100;  // PyTorch cross_entropy's default

struct PackingOptions {
  int64_t seq_len = 0;                       // tokens per sample (context length)
  bool mask_cross_document_targets = false;  // see above
  int32_t ignore_index = kIgnoreIndex;
};

// One training (or validation) batch.
struct Batch {
  models::ForwardBatch input;   // tokens (T) i32, positions (T) i32, cu_seqlens (S+1) i32
  Tensor targets;               // (T) i32, ignore_index where masked
  std::vector<int64_t> starts;  // (B) stream offset of each sample
  int64_t seq_len = 0;
  int64_t num_targets = 0;  // targets != ignore_index (the loss denominator)

  int64_t num_samples() const { return static_cast<int64_t>(starts.size()); }
  int64_t num_tokens() const { return num_samples() * seq_len; }
};

// Packs the samples starting at `starts` (B >= 1) from the stream `tokens` (N) with
// documents `doc_offsets` (D + 1; 0 = first, N = last, increasing). Each start must
// lie in [0, N - seq_len - 1]; titan::Error naming the sample otherwise, and for
// seq_len < 1. Source of the sample layout: nanoGPT get_batch (x = data[i:i+L],
// y = data[i+1:i+1+L]); of the document masking: TorchTitan's document mask /
// varlen cu_seqlens.
Batch pack_batch(std::span<const int32_t> tokens, std::span<const int64_t> doc_offsets,
                 std::span<const int64_t> starts, const PackingOptions& options);

}  // namespace titan::data
