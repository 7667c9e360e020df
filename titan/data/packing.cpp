#include "titan/data/packing.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "titan/core/error.h"

namespace titan::data {

Batch pack_batch(std::span<const int32_t> tokens, std::span<const int64_t> doc_offsets,
                 std::span<const int64_t> starts, const PackingOptions& options) {
  const int64_t L = options.seq_len;
  const auto N = static_cast<int64_t>(tokens.size());
  const auto B = static_cast<int64_t>(starts.size());
  TITAN_CHECK(L >= 1, "pack_batch: seq_len must be >= 1, got {}", L);
  TITAN_CHECK(B >= 1, "pack_batch: no samples (starts is empty)");
  TITAN_CHECK(doc_offsets.size() >= 2 && doc_offsets.front() == 0 && doc_offsets.back() == N,
              "pack_batch: doc_offsets must run from 0 to the token count {} ({} entries given)", N,
              doc_offsets.size());
  const int64_t T = B * L;
  TITAN_CHECK(T <= INT32_MAX,
              "pack_batch: {} samples x seq_len {} = {} tokens overflow the i32 cu_seqlens", B, L,
              T);

  Batch out;
  out.seq_len = L;
  out.starts.assign(starts.begin(), starts.end());
  out.input.tokens = Tensor::empty({T}, DType::i32);
  out.input.positions = Tensor::empty({T}, DType::i32);
  out.targets = Tensor::empty({T}, DType::i32);
  int32_t* tok = out.input.tokens.data<int32_t>();
  int32_t* pos = out.input.positions.data<int32_t>();
  int32_t* tgt = out.targets.data<int32_t>();
  std::vector<int32_t> cu;
  cu.reserve(static_cast<size_t>(B) + 1);
  int64_t num_targets = 0;

  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = starts[b];
    TITAN_CHECK(
        s >= 0 && s + L + 1 <= N,
        "pack_batch: sample {} starts at {}, expected a start in [0, {}] ({} tokens, seq_len {})",
        b, s, N - L - 1, N, L);
    const int64_t base = b * L;
    std::memcpy(tok + base, tokens.data() + s, L * sizeof(int32_t));
    std::memcpy(tgt + base, tokens.data() + s + 1, L * sizeof(int32_t));
    // Document starts d with s < d <= s + L: d < s + L opens a new sequence at
    // j = d - s; every such d (also d == s + L) makes input j - 1 the last token of
    // its document, whose target crosses into the next one.
    auto it = std::upper_bound(doc_offsets.begin(), doc_offsets.end(), s);
    int64_t seg = 0;  // start of the current sequence, relative to the sample
    cu.push_back(static_cast<int32_t>(base));
    for (; it != doc_offsets.end() && *it <= s + L; ++it) {
      const int64_t j = *it - s;
      if (options.mask_cross_document_targets && *it < N) tgt[base + j - 1] = options.ignore_index;
      if (j == L) break;
      for (int64_t k = seg; k < j; ++k) pos[base + k] = static_cast<int32_t>(k - seg);
      seg = j;
      cu.push_back(static_cast<int32_t>(base + j));
    }
    for (int64_t k = seg; k < L; ++k) pos[base + k] = static_cast<int32_t>(k - seg);
  }
  cu.push_back(static_cast<int32_t>(T));
  for (int64_t i = 0; i < T; ++i) num_targets += tgt[i] != options.ignore_index;
  out.num_targets = num_targets;
  out.input.cu_seqlens = Tensor::from_vector(cu, {static_cast<int64_t>(cu.size())}, DType::i32);
  return out;
}

}  // namespace titan::data
