#include "titan/optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/optim/kernels.h"

namespace titan::optim {

namespace {

// The gradient of p as a contiguous fp32 tensor (undefined if none), checked.
Tensor checked_grad(const ParamRef& p, const char* fn) {
  Tensor g = p.param.grad();
  if (!g.defined()) return g;
  TITAN_CHECK(g.dtype() == DType::f32, "{}: gradient of '{}' has dtype {}, expected f32", fn, p.name,
              dtype_name(g.dtype()));
  TITAN_CHECK(g.shape() == p.param.shape(), "{}: gradient of '{}' has shape {}, expected {}", fn,
              p.name, shape_str(g.shape()), shape_str(p.param.shape()));
  return g.contiguous();
}

}  // namespace

float grad_norm(const std::vector<ParamRef>& params) {
  struct Block { const float* p; int64_t n; };
  std::vector<Block> blocks;
  std::vector<size_t> first_block;  // per parameter, index of its first block
  std::vector<Tensor> keep;         // keeps contiguous copies alive
  first_block.reserve(params.size() + 1);
  for (const ParamRef& p : params) {
    first_block.push_back(blocks.size());
    Tensor g = checked_grad(p, "grad_norm");
    if (!g.defined()) continue;
    keep.push_back(g);
    const float* d = g.data<float>();
    for (int64_t b = 0; b < g.numel(); b += kGradNormBlock)
      blocks.push_back({d + b, std::min(kGradNormBlock, g.numel() - b)});
  }
  first_block.push_back(blocks.size());
  std::vector<double> partial(blocks.size());
  parallel_for_grain(static_cast<int64_t>(blocks.size()), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) partial[i] = kernels::sum_squares(blocks[i].p, blocks[i].n);
  });
  double total = 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    double s = 0.0;
    for (size_t b = first_block[i]; b < first_block[i + 1]; ++b) s += partial[b];
    total += s;
  }
  return static_cast<float>(std::sqrt(total));
}

float clip_grad_norm_(const std::vector<ParamRef>& params, double max_norm) {
  TITAN_CHECK(max_norm > 0.0, "clip_grad_norm_: max_norm must be > 0, got {}", max_norm);
  const float total = grad_norm(params);
  scale_grads_for_norm_(params, total, max_norm);
  return total;
}

void scale_grads_for_norm_(const std::vector<ParamRef>& params, float total, double max_norm) {
  TITAN_CHECK(max_norm > 0.0, "clip_grad_norm_: max_norm must be > 0, got {}", max_norm);
  if (!std::isfinite(total)) return;
  // torch: clip_coef = max_norm / (total_norm + 1e-6), fp32 tensor arithmetic.
  const float coef = static_cast<float>(max_norm) / (total + static_cast<float>(1e-6));
  if (!(coef < 1.0f)) return;
  for (const ParamRef& p : params) {
    Tensor g = p.param.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {  // scale a contiguous copy, then write it back
      Tensor c = g.contiguous();
      float* d = c.data<float>();
      parallel_elementwise(c.numel(), [&](int64_t b, int64_t e) { kernels::scale(d + b, coef, e - b); });
      g.copy_(c);
      continue;
    }
    float* d = g.data<float>();
    parallel_elementwise(g.numel(), [&](int64_t b, int64_t e) { kernels::scale(d + b, coef, e - b); });
  }
}

void zero_grad(const std::vector<ParamRef>& params, bool set_to_none) {
  for (const ParamRef& p : params) {
    if (set_to_none) {
      Tensor t = p.param;  // a handle: zero_grad drops the shared gradient
      t.zero_grad();
    } else {
      Tensor g = p.param.grad();
      if (g.defined()) g.zero_();
    }
  }
}

}  // namespace titan::optim
