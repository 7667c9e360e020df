#include "titan/models/mixers/linear_state.h"

#include <cstring>

#include "titan/ops/linear_attention.h"

namespace titan::models {

LinearMixerState::LinearMixerState(const ForwardBatch& batch, LayerCache* cache, int64_t T, const std::string& who)
    : batch_(batch), cache_(cache) {
  if (!batch.is_paged()) return;
  TITAN_CHECK(cache != nullptr && cache->state.size() == 2 && batch.state_slots.defined() &&
                  batch.cu_seqlens.defined(),
              "{}: the generator path needs the layer's state slots (cache_spec) and the batch's state_slots "
              "and cu_seqlens", who);
  cu_ = batch.cu_seqlens.to_vector<int64_t>();
  slots_ = batch.state_slots.to_vector<int64_t>();
  TITAN_CHECK(cu_.size() == slots_.size() + 1 && cu_.back() == T,
              "{}: cu_seqlens ({} entries, last {}) does not match {} state slots and {} tokens", who, cu_.size(),
              cu_.back(), slots_.size(), T);
  const int32_t* pp = batch.positions.data<int32_t>();
  for (size_t n = 0; n + 1 < cu_.size(); ++n) start_.push_back(cu_[n] < cu_[n + 1] ? pp[cu_[n]] : 0);
  if (batch.snapshot_slots.defined()) {
    snap_slot_ = batch.snapshot_slots.to_vector<int64_t>();
    snap_pos_ = batch.snapshot_pos.to_vector<int64_t>();
    TITAN_CHECK(snap_slot_.size() == slots_.size() && snap_pos_.size() == slots_.size(),
                "{}: snapshot_slots / snapshot_pos need {} entries", who, slots_.size());
  }
}

// Generator: each sequence's tail (W - 1, C) is its row of the "conv_tail" state; it is
// gathered, advanced by causal_conv1d_cached and written back. A snapshot receives the
// tail as it stands before absolute position snap_pos: the W - 1 inputs before it, from
// the old tail and this step's rows.
Tensor LinearMixerState::conv1d(const Tensor& x, const Tensor& w) const {
  if (!batch_.is_paged()) return causal_conv1d(x, w, batch_.cu_seqlens);
  const int64_t N = static_cast<int64_t>(slots_.size()), C = x.size(1), Wm1 = w.size(1) - 1;
  if (Wm1 == 0) return causal_conv1d(x, w, batch_.cu_seqlens);
  const int64_t row = Wm1 * C;
  Tensor& tails = cache_->state[0];
  TITAN_CHECK(tails.numel() / tails.size(0) == row, "conv1d state: row of {} floats, the layer needs {}",
              tails.numel() / tails.size(0), row);
  Tensor xc = x.contiguous();
  Tensor tail = Tensor::empty({N, Wm1, C});
  float* tp = tail.data<float>();
  float* pool = tails.data<float>();
  for (int64_t n = 0; n < N; ++n) std::memcpy(tp + n * row, pool + slots_[n] * row, sizeof(float) * row);
  const float* xp = xc.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    if (snap_slot_.empty() || snap_slot_[n] < 0) continue;
    float* dst = pool + snap_slot_[n] * row;
    for (int64_t i = 0; i < Wm1; ++i) {
      const int64_t p = snap_pos_[n] - Wm1 + i;  // an input before start is old tail row p - start + W - 1
      const float* src = p >= start_[n] ? xp + (cu_[n] + p - start_[n]) * C : tp + n * row + (p - start_[n] + Wm1) * C;
      std::memcpy(dst + i * C, src, sizeof(float) * C);
    }
  }
  Tensor out = causal_conv1d_cached(xc, w, batch_.cu_seqlens, tail);
  for (int64_t n = 0; n < N; ++n) std::memcpy(pool + slots_[n] * row, tp + n * row, sizeof(float) * row);
  return out;
}

Tensor LinearMixerState::delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                    const Tensor& beta) const {
  if (!batch_.is_paged())
    return g.dim() == 3 ? chunk_kda(q, k, v, g, beta, batch_.cu_seqlens)
                        : chunk_gated_delta_rule(q, k, v, g, beta, batch_.cu_seqlens);
  const int64_t N = static_cast<int64_t>(slots_.size());
  return gated_delta_rule_slots(q, k, v, g, beta, batch_.cu_seqlens, Tensor::from_vector(start_, {N}),
                                cache_->state[1], batch_.state_slots, batch_.snapshot_slots, batch_.snapshot_pos);
}

}  // namespace titan::models
