#include "titan/rl/weight_sync.h"

#include <cstring>

#include "titan/core/error.h"

namespace titan::rl {

int64_t sync_weights(const models::Decoder& trainer, models::Decoder& generator) {
  const nn::NamedTensors src = trainer.named_parameters();
  const nn::NamedTensors dst = generator.named_parameters();
  TITAN_CHECK(src.size() == dst.size(),
              "sync_weights: trainer has {} parameters but generator has {}", src.size(),
              dst.size());
  // Check everything before writing anything: a mismatch leaves the generator untouched.
  for (size_t i = 0; i < src.size(); ++i) {
    const auto& [sn, s] = src[i];
    const auto& [dn, d] = dst[i];
    TITAN_CHECK(sn == dn,
                "sync_weights: parameter {} is '{}' in the trainer but '{}' in the generator", i,
                sn, dn);
    TITAN_CHECK(s.shape() == d.shape(),
                "sync_weights: parameter '{}' has shape {} in the trainer but {} in the generator",
                sn, shape_str(s.shape()), shape_str(d.shape()));
    TITAN_CHECK(s.dtype() == d.dtype() || (s.dtype() == DType::f32 && d.dtype() == DType::bf16),
                "sync_weights: parameter '{}' has dtype {} in the trainer but {} in the generator "
                "(expected the same dtype, or f32 -> bf16)",
                sn, dtype_name(s.dtype()), dtype_name(d.dtype()));
  }
  int64_t bytes = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const Tensor& s = src[i].second;
    Tensor d = dst[i].second;  // a handle onto the generator's storage
    if (s.dtype() == d.dtype() && s.is_contiguous() && d.is_contiguous())
      std::memcpy(d.data_ptr(), s.data_ptr(), d.nbytes());
    else
      d.copy_(s);  // strided copy; f32 -> bf16 with RNE
    bytes += static_cast<int64_t>(d.nbytes());
  }
  return bytes;
}

bool weights_bitwise_equal(const models::Decoder& a, const models::Decoder& b) {
  const nn::NamedTensors pa = a.named_parameters();
  const nn::NamedTensors pb = b.named_parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto& [na, ta] = pa[i];
    const auto& [nb, tb] = pb[i];
    if (na != nb || ta.shape() != tb.shape() || ta.dtype() != tb.dtype()) return false;
    const Tensor ca = ta.detach().contiguous(), cb = tb.detach().contiguous();
    if (std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace titan::rl
