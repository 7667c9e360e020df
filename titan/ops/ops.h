// The differentiable op library (DESIGN.md §6): one header per family, torch names.
// Every op validates its arguments (titan::Error naming the op, the argument, and
// expected vs actual), computes with the raw kernels of titan/kernels/cpu/ where one
// exists, and records its backward for autograd. Gradients are f32. Fused ops keep
// their composed twin in titan::composed. View ops (view, reshape, permute, slice,
// expand, ...) are Tensor methods (titan/core/tensor.h, titan/ops/shape.cpp).
#pragma once
#include "titan/ops/activation.h"
#include "titan/ops/attention.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/join.h"
#include "titan/ops/loss.h"
#include "titan/ops/matmul.h"
#include "titan/ops/norm.h"
#include "titan/ops/reduce.h"
#include "titan/ops/rope.h"
#include "titan/ops/softmax.h"
