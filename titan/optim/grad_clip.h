// Gradient norm, clipping by global L2 norm, and zeroing gradients.
//
// The norm is computed in one fixed order independent of the thread count: every
// gradient is cut into blocks of kGradNormBlock elements; each block's Σg² is summed in
// double (kernels::sum_squares: exact squares, fixed lane order); a parameter's ‖g‖²
// is its block partials added in block order; the total is the parameters' ‖g‖²
// added in parameter order, and the norm is √total rounded to fp32. Threads compute
// block partials only.
#pragma once
#include <cstdint>
#include <vector>

#include "titan/optim/param_groups.h"

namespace titan::optim {

inline constexpr int64_t kGradNormBlock = 4096;

// √(Σ_params ‖grad‖²) in fp32 (as torch.nn.utils.clip_grad_norm_ returns, computed
// more accurately: in double). Parameters without a gradient are skipped. Throws
// titan::Error naming the parameter if a gradient is not fp32 or its shape differs
// from the parameter's.
float grad_norm(const std::vector<ParamRef>& params);

// torch.nn.utils.clip_grad_norm_(params, max_norm) (norm_type 2): total = grad_norm();
// clip_coef = max_norm / (total + 1e-6) in fp32; if clip_coef < 1 every gradient is
// multiplied by it in place. Returns the total norm (before clipping). A non-finite
// total leaves the gradients untouched (the trainer skips or aborts such a step;
// torch would multiply them by NaN). Throws titan::Error on max_norm <= 0 and as
// grad_norm.
float clip_grad_norm_(const std::vector<ParamRef>& params, double max_norm);

// The scaling half of clip_grad_norm_ given the total norm (e.g. one computed over
// sharded gradients): multiplies every gradient by max_norm / (total + 1e-6) when that
// is < 1 and total is finite.
void scale_grads_for_norm_(const std::vector<ParamRef>& params, float total, double max_norm);

// Drops every gradient (set_to_none, torch's default) or fills it with zeros.
void zero_grad(const std::vector<ParamRef>& params, bool set_to_none = true);

}  // namespace titan::optim
