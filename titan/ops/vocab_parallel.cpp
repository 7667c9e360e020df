#include "titan/ops/vocab_parallel.h"

#include <algorithm>
#include <cstring>

#include "titan/ops/op_util.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;

Tensor embedding_vocab_shard(const Tensor& weight, const Tensor& ids, int64_t vocab_start, int64_t vocab_size) {
  check_dtype("embedding_vocab_shard", "weight", weight, DType::f32);
  check_dim("embedding_vocab_shard", "weight", weight, 2);
  check_index("embedding_vocab_shard", "ids", ids);
  const int64_t Vl = weight.size(0), D = weight.size(1);
  TITAN_CHECK(vocab_start >= 0 && vocab_start + Vl <= vocab_size,
              "embedding_vocab_shard: rows [{}, {}) do not fit in a vocabulary of {}", vocab_start, vocab_start + Vl,
              vocab_size);
  std::vector<int64_t> id = index_values(ids);
  for (size_t t = 0; t < id.size(); ++t)
    TITAN_CHECK(id[t] >= 0 && id[t] < vocab_size,
                "embedding: token id {} at position {} is out of range for vocabulary size V = {}", id[t], t,
                vocab_size);
  // Local row of each token, -1 when another rank owns it.
  for (int64_t& v : id) v = v >= vocab_start && v < vocab_start + Vl ? v - vocab_start : -1;
  Shape os = ids.shape();
  os.push_back(D);
  Tensor out = Tensor::zeros(os);
  Tensor wc = contig(weight);
  const float* pw = wc.data<float>();
  float* po = out.data<float>();
  const int64_t T = static_cast<int64_t>(id.size());
  parallel_for_grain(T, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, D)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      if (id[t] >= 0) std::memcpy(po + t * D, pw + id[t] * D, static_cast<size_t>(D) * 4);
  });
  if (needs_grad({&weight})) {
    record_fn("EmbeddingVocabShard", {weight}, {out}, [id = std::move(id), Vl, D](const std::vector<Tensor>& g) {
      Tensor gc = contig(g[0]);
      Tensor dw = Tensor::zeros({Vl, D});
      const float* pg = gc.data<float>();
      float* pd = dw.data<float>();
      const int64_t T = static_cast<int64_t>(id.size());
      // Threads own column ranges; every row is accumulated in token order.
      parallel_for_grain(D, 64, [&](int64_t c0, int64_t c1) {
        for (int64_t t = 0; t < T; ++t) {
          if (id[t] < 0) continue;
          float* dst = pd + id[t] * D;
          const float* src = pg + t * D;
          for (int64_t j = c0; j < c1; ++j) dst[j] += src[j];
        }
      });
      return std::vector<Tensor>{dw};
    });
  }
  return out;
}

}  // namespace titan
