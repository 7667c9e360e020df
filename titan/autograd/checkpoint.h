// Activation checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear
// Memory Cost"; torch.utils.checkpoint, reentrant variant): runs fn without
// recording, keeping only its inputs; in backward, re-runs fn with recording on
// detached copies of the inputs and backpropagates through the recomputed graph.
// Parameters used inside fn receive their gradients during that inner backward.
// fn must be deterministic (titan kernels are), so the recomputation is exact.
#pragma once
#include <functional>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace titan::autograd
