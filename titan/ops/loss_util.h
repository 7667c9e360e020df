// Pieces shared by the fused losses (titan/ops/loss.cpp: linear_cross_entropy,
// titan/ops/lm_head_bf16.cpp: linear_cross_entropy_bf16): target checks, the
// reduction of per-row losses, and the expected_grad hint's eager gradients.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/ops/loss.h"

namespace titan::ops_detail {

// Validates targets (T) and returns them as a contiguous i64 tensor; every target must be
// in [0, V) or (when allow_ignore) equal ignore_index. titan::Error naming op otherwise.
Tensor check_loss_targets(const char* op, const Tensor& targets, int64_t T, int64_t V, int64_t ignore_index,
                          bool allow_ignore = true);

// Per-row losses (T) -> the reduction: none (as they are), sum, or mean over the rows
// whose target is not ignore_index (0/0 = NaN when all are ignored).
Tensor reduce_loss_rows(const Tensor& rows, const Tensor& y, int64_t ignore_index, Reduction r);

// titan::Error unless expected_grad is 0 or a finite float > 0.
void check_expected_grad(const char* op, double expected_grad);

// The gradients (dh (T, D) and dw (V, D), each defined when that input needs grad) a
// fused loss computes with its forward for the upstream value `grad` (expected_grad).
struct EagerGrads {
  float grad;
  Tensor dh, dw;
};

// EagerGrads to fill in the forward when the hint applies (gradients needed,
// expected_grad > 0, reduction sum or none); null otherwise.
std::shared_ptr<EagerGrads> make_eager_grads(bool grad, double expected_grad, Reduction r, bool gh, bool gw,
                                             int64_t T, int64_t D, int64_t V);

// In the backward: releases eager (used once) and returns its gradients when every
// upstream value (T, contiguous f32) equals eager->grad bitwise; empty otherwise (the
// caller recomputes).
std::vector<Tensor> take_eager_grads(std::shared_ptr<EagerGrads>& eager, const Tensor& upstream);

}  // namespace titan::ops_detail
