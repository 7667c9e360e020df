// cross_entropy / linear_cross_entropy / logprobs over kernels/cpu/loss.h + composed twins.
#include "titan/ops/loss.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "titan/kernels/cpu/loss.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/index.h"
#include "titan/ops/loss_util.h"
#include "titan/ops/matmul.h"
#include "titan/ops/op_util.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan {

using autograd::needs_grad;
using autograd::record_fn;
using namespace ops_detail;
namespace kc = kernels::cpu;

namespace {

// An ignore_index no valid target can equal (targets are validated to lie in [0, V)).
constexpr int64_t kNoIgnore = -1;

void check_scalars(const char* op, double z_loss, double temperature) {
  TITAN_CHECK(std::isfinite(z_loss) && z_loss >= 0, "{}: z_loss must be finite and >= 0, got {}",
              op, z_loss);
  TITAN_CHECK(std::isfinite(temperature) && temperature > 0,
              "{}: temperature must be finite and > 0, got {}", op, temperature);
}

// (T, D) hidden and (V, D) weight; returns {T, D, V}.
struct Dims {
  int64_t T, D, V;
};
Dims check_hidden_weight(const char* op, const Tensor& hidden, const Tensor& weight) {
  check_dtype(op, "hidden", hidden, DType::f32);
  check_dim(op, "hidden", hidden, 2);
  check_f32_or_bf16(op, "weight", weight);
  check_dim(op, "weight", weight, 2);
  TITAN_CHECK(weight.size(1) == hidden.size(1),
              "{}: hidden is {} but weight is {} (weight must be (V, D) with D = {})", op,
              shape_str(hidden.shape()), shape_str(weight.shape()), hidden.size(1));
  TITAN_CHECK(weight.size(0) >= 1, "{}: weight has no rows (V = 0)", op);
  return {hidden.size(0), hidden.size(1), weight.size(0)};
}

}  // namespace

namespace ops_detail {

Tensor check_loss_targets(const char* op, const Tensor& targets, int64_t T, int64_t V, int64_t ignore_index,
                          bool allow_ignore) {
  check_index(op, "targets", targets);
  TITAN_CHECK(targets.shape() == Shape{T}, "{}: 'targets' has shape {}, expected [{}]", op,
              shape_str(targets.shape()), T);
  Tensor y = targets.dtype() == DType::i64 ? contig(targets) : targets.to(DType::i64);
  const int64_t* p = y.data<int64_t>();
  for (int64_t t = 0; t < T; ++t)
    TITAN_CHECK((allow_ignore && p[t] == ignore_index) || (p[t] >= 0 && p[t] < V),
                "{}: targets[{}] = {} is out of range for V = {}{}", op, t, p[t], V,
                allow_ignore ? fmt::format(" (and is not ignore_index {})", ignore_index) : "");
  return y;
}

Tensor reduce_loss_rows(const Tensor& rows, const Tensor& y, int64_t ignore_index, Reduction r) {
  if (r == Reduction::none) return rows;
  Tensor s = sum(rows);
  if (r == Reduction::sum) return s;
  const int64_t* p = y.data<int64_t>();
  int64_t n = 0;
  for (int64_t t = 0; t < y.numel(); ++t) n += p[t] != ignore_index;
  return div(s, Tensor::full({}, static_cast<double>(n)));  // 0/0 = NaN when all are ignored
}

void check_expected_grad(const char* op, double expected_grad) {
  TITAN_CHECK(expected_grad == 0 ||
                  (std::isfinite(static_cast<float>(expected_grad)) && static_cast<float>(expected_grad) > 0),
              "{}: expected_grad must be 0 or a finite float > 0, got {}", op, expected_grad);
}

std::shared_ptr<EagerGrads> make_eager_grads(bool grad, double expected_grad, Reduction r, bool gh, bool gw,
                                             int64_t T, int64_t D, int64_t V) {
  if (!grad || expected_grad <= 0 || r == Reduction::mean) return nullptr;
  return std::make_shared<EagerGrads>(EagerGrads{static_cast<float>(expected_grad),
                                                 gh ? Tensor::empty({T, D}) : Tensor(),
                                                 gw ? Tensor::empty({V, D}) : Tensor()});
}

std::vector<Tensor> take_eager_grads(std::shared_ptr<EagerGrads>& eager, const Tensor& upstream) {
  if (!eager) return {};
  const float* p = upstream.data<float>();
  const float want = eager->grad;
  const bool match = std::all_of(p, p + upstream.numel(),
                                 [&](float v) { return std::memcmp(&v, &want, sizeof(float)) == 0; });
  std::vector<Tensor> out{eager->dh, eager->dw};
  eager.reset();  // used once: a second backward finds the graph freed
  return match ? out : std::vector<Tensor>{};
}

}  // namespace ops_detail

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     double z_loss, Reduction reduction) {
  check_dtype("cross_entropy", "logits", logits, DType::f32);
  check_dim("cross_entropy", "logits", logits, 2);
  check_scalars("cross_entropy", z_loss, 1.0);
  const int64_t T = logits.size(0), V = logits.size(1);
  TITAN_CHECK(V >= 1, "cross_entropy: logits has an empty vocabulary dim (shape {})",
              shape_str(logits.shape()));
  Tensor y = check_loss_targets("cross_entropy", targets, T, V, ignore_index);
  Tensor lc = contig(logits);
  Tensor rows = Tensor::empty({T}), lse = Tensor::empty({T});
  const float z = static_cast<float>(z_loss);
  kc::cross_entropy_logits_fwd(rows.data<float>(), lse.data<float>(), lc.data<float>(),
                               y.data<int64_t>(), T, V, ignore_index, z, 1.0f);
  if (needs_grad({&logits}))
    record_fn("CrossEntropy", {logits}, {rows},
              [lc = lc.detach(), y, lse, T, V, ignore_index, z](const std::vector<Tensor>& g) {
                Tensor gc = contig(g[0]);
                Tensor dl = Tensor::empty({T, V});
                kc::cross_entropy_logits_bwd(dl.data<float>(), gc.data<float>(), lc.data<float>(),
                                             y.data<int64_t>(), lse.data<float>(), T, V,
                                             ignore_index, z, 1.0f);
                return std::vector<Tensor>{dl};
              });
  return reduce_loss_rows(rows, y, ignore_index, reduction);
}

namespace {
std::atomic<int64_t> g_ce_recomputes{0};
}  // namespace

int64_t linear_cross_entropy_recomputes() {
  return g_ce_recomputes.load(std::memory_order_relaxed);
}

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index, double z_loss, Reduction reduction,
                            double expected_grad) {
  const Dims d = check_hidden_weight("linear_cross_entropy", hidden, weight);
  check_scalars("linear_cross_entropy", z_loss, 1.0);
  check_expected_grad("linear_cross_entropy", expected_grad);
  Tensor y = check_loss_targets("linear_cross_entropy", targets, d.T, d.V, ignore_index);
  Tensor hc = contig(hidden), wc = contig_f32(weight);
  Tensor rows = Tensor::empty({d.T}), lse = Tensor::empty({d.T});
  const float z = static_cast<float>(z_loss);
  const bool grad = needs_grad({&hidden, &weight});
  const bool gh = hidden.requires_grad(), gw = weight.requires_grad();
  // The gradients for the expected upstream value, computed with the forward (or none).
  std::shared_ptr<EagerGrads> eager = make_eager_grads(grad, expected_grad, reduction, gh, gw, d.T, d.D, d.V);
  if (eager) {
    const std::vector<float> dloss(static_cast<size_t>(d.T), eager->grad);
    kc::cross_entropy_fwd_bwd(
        rows.data<float>(), lse.data<float>(), gh ? eager->dh.data<float>() : nullptr,
        gw ? eager->dw.data<float>() : nullptr, dloss.data(), hc.data<float>(), wc.data<float>(),
        y.data<int64_t>(), d.T, d.D, d.V, ignore_index, z, 1.0f);
  } else {
    kc::cross_entropy_fwd(rows.data<float>(), lse.data<float>(), hc.data<float>(), wc.data<float>(),
                          y.data<int64_t>(), d.T, d.D, d.V, ignore_index, z, 1.0f);
  }
  if (grad)
    record_fn("LinearCrossEntropy", {hidden, weight}, {rows},
              [hc = hc.detach(), wc = wc.detach(), y, lse, d, ignore_index, z, gh, gw,
               eager](const std::vector<Tensor>& g) mutable {
                Tensor gc = contig(g[0]);
                if (std::vector<Tensor> out = take_eager_grads(eager, gc); !out.empty()) return out;
                g_ce_recomputes.fetch_add(1, std::memory_order_relaxed);
                Tensor dh = gh ? Tensor::empty({d.T, d.D}) : Tensor();
                Tensor dw = gw ? Tensor::empty({d.V, d.D}) : Tensor();
                kc::cross_entropy_bwd(
                    gh ? dh.data<float>() : nullptr, gw ? dw.data<float>() : nullptr,
                    gc.data<float>(), hc.data<float>(), wc.data<float>(), y.data<int64_t>(),
                    lse.data<float>(), d.T, d.D, d.V, ignore_index, z, 1.0f, false);
                return std::vector<Tensor>{dh, dw};
              });
  return reduce_loss_rows(rows, y, ignore_index, reduction);
}

Tensor logprobs(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                double temperature) {
  const Dims d = check_hidden_weight("logprobs", hidden, weight);
  check_scalars("logprobs", 0.0, temperature);
  Tensor y = check_loss_targets("logprobs", targets, d.T, d.V, kNoIgnore, false);
  Tensor hc = contig(hidden), wc = contig_f32(weight);
  const float inv_t = static_cast<float>(1.0 / temperature);
  Tensor out = Tensor::empty({d.T}), lse = Tensor::empty({d.T});
  kc::logprobs_from_hidden(out.data<float>(), lse.data<float>(), hc.data<float>(), wc.data<float>(),
                           y.data<int64_t>(), d.T, d.D, d.V, inv_t);
  if (needs_grad({&hidden, &weight})) {
    const bool gh = hidden.requires_grad(), gw = weight.requires_grad();
    record_fn("Logprobs", {hidden, weight}, {out},
              [hc = hc.detach(), wc = wc.detach(), y, lse, d, inv_t, gh,
               gw](const std::vector<Tensor>& g) {
                // logprob = −(cross-entropy without z-loss): backprop −g through its kernel.
                Tensor ng = neg(g[0]);
                Tensor dh = gh ? Tensor::empty({d.T, d.D}) : Tensor();
                Tensor dw = gw ? Tensor::empty({d.V, d.D}) : Tensor();
                kc::cross_entropy_bwd(
                    gh ? dh.data<float>() : nullptr, gw ? dw.data<float>() : nullptr,
                    ng.data<float>(), hc.data<float>(), wc.data<float>(), y.data<int64_t>(),
                    lse.data<float>(), d.T, d.D, d.V, kNoIgnore, 0.0f, inv_t, false);
                return std::vector<Tensor>{dh, dw};
              });
  }
  return out;
}

Tensor logprobs_panels(const Tensor& hidden, const Tensor& panels, int64_t vocab_size,
                       const Tensor& targets, double temperature) {
  check_dtype("logprobs_panels", "hidden", hidden, DType::f32);
  check_dim("logprobs_panels", "hidden", hidden, 2);
  const int64_t D = check_panels("logprobs_panels", panels, vocab_size, {&hidden, &panels});
  TITAN_CHECK(hidden.size(1) == D, "logprobs_panels: hidden is {} but the weight has D = {}",
              shape_str(hidden.shape()), D);
  check_scalars("logprobs_panels", 0.0, temperature);
  const int64_t T = hidden.size(0);
  Tensor y = check_loss_targets("logprobs_panels", targets, T, vocab_size, kNoIgnore, false);
  Tensor hc = contig(hidden), out = Tensor::empty({T});
  kc::logprobs_from_hidden_panels(out.data<float>(), nullptr, hc.data<float>(),
                                  panels.data<float>(), y.data<int64_t>(), T, D, vocab_size,
                                  static_cast<float>(1.0 / temperature));
  return out;
}

namespace composed {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     double z_loss, Reduction reduction) {
  check_dtype("cross_entropy", "logits", logits, DType::f32);
  check_dim("cross_entropy", "logits", logits, 2);
  check_scalars("cross_entropy", z_loss, 1.0);
  const int64_t T = logits.size(0), V = logits.size(1);
  Tensor y = check_loss_targets("cross_entropy", targets, T, V, ignore_index);
  // Ignored rows gather column 0 and are masked to 0 afterwards.
  std::vector<int64_t> safe = y.to_vector<int64_t>();
  std::vector<uint8_t> keep(T);
  for (int64_t t = 0; t < T; ++t) {
    keep[t] = safe[t] != ignore_index;
    if (!keep[t]) safe[t] = 0;
  }
  Tensor idx = Tensor::from_vector(safe, {T, 1});
  Tensor lse = titan::logsumexp(logits, -1, true);
  Tensor rows = sub(lse, gather(logits, 1, idx)).reshape({T});
  if (z_loss != 0.0) rows = add(rows, scale(square(lse.reshape({T})), z_loss));
  rows = where(Tensor::from_vector(keep, {T}, DType::u8), rows, Tensor::zeros({}));
  return reduce_loss_rows(rows, y, ignore_index, reduction);
}

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            int64_t ignore_index, double z_loss, Reduction reduction) {
  check_hidden_weight("linear_cross_entropy", hidden, weight);
  return composed::cross_entropy(linear(hidden, weight), targets, ignore_index, z_loss, reduction);
}

Tensor logprobs(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                double temperature) {
  const Dims d = check_hidden_weight("logprobs", hidden, weight);
  check_scalars("logprobs", 0.0, temperature);
  Tensor y = check_loss_targets("logprobs", targets, d.T, d.V, kNoIgnore, false);
  Tensor z = scale(linear(hidden, weight), static_cast<float>(1.0 / temperature));
  return gather(titan::log_softmax(z), 1, y.reshape({d.T, 1})).reshape({d.T});
}

}  // namespace composed

}  // namespace titan
