#include "titan/distributed/fsdp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "titan/autograd/function.h"
#include "titan/core/error.h"
#include "titan/distributed/reduction.h"
#include "titan/nn/hooks.h"
#include "titan/optim/grad_clip.h"
#include "titan/optim/kernels.h"

namespace titan::distributed {

namespace {

using Clock = std::chrono::steady_clock;

struct Timer {
  FsdpStats& s;
  Clock::time_point t0 = Clock::now();
  explicit Timer(FsdpStats& st) : s(st) {}
  ~Timer() { s.comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
};

// The module's full parameter tensor gets a fresh buffer / loses it. Its TensorImpl,
// and so every handle to it (the module's, autograd's saved ones), stays the same.
void allocate_full(Tensor& t) {
  t.unsafe_impl()->storage = std::make_shared<Storage>(t.nbytes(), Device::cpu());
}
void free_full(Tensor& t) { t.unsafe_impl()->storage.reset(); }

}  // namespace

struct FullyShard::Param {
  std::string name;
  Tensor full;   // the module's parameter; holds a buffer only while its unit is gathered
  Tensor shard;  // this rank's rows, the optimizer's leaf
  int64_t row_elems = 1;
  std::vector<ShardRange> ranges;  // rows of each dp_shard index
  int64_t numel() const { return full.numel(); }
};

struct FullyShard::Unit {
  std::string prefix;  // "" = root
  const nn::Module* module = nullptr;
  std::vector<Param*> params;
  std::vector<std::unique_ptr<Param>> owned;
  bool gathered = false;
  size_t index = 0;
};

class FullyShard::Hook final : public nn::ForwardHook {
 public:
  Hook(FullyShard* fs, size_t unit) : fs_(fs), unit_(unit) {}
  void pre_forward(const nn::Module&) override { fs_->unshard(*fs_->units_[unit_]); }
  Tensor post_forward(const nn::Module&, Tensor out) override {
    const bool backward_follows = autograd::GradMode::enabled() && out.requires_grad();
    fs_->post_forward(unit_, backward_follows);
    if (!backward_follows) return out;
    // The output's gradient reaches this node before any node of the block (it has a
    // smaller seq than all of them and a larger one than the block's): gather the
    // block's parameters again for its backward there (a no-op when they were kept).
    Tensor y = out.detach();
    FullyShard* fs = fs_;
    const size_t unit = unit_;
    autograd::record_fn("FsdpPreBackward", {out}, {y}, [fs, unit](const std::vector<Tensor>& g) {
      fs->pre_backward(unit);
      return std::vector<Tensor>{g[0]};
    });
    return y;
  }

 private:
  FullyShard* fs_;
  size_t unit_;
};

FullyShard::FullyShard(nn::Module& root, const DeviceMesh& mesh,
                       const std::vector<std::pair<std::string, const nn::Module*>>& blocks,
                       const std::function<bool(const std::string&)>& include, bool reshard_after_forward)
    : mesh_(mesh),
      reshard_after_forward_(reshard_after_forward),
      shard_group_(mesh.group({MeshDim::dp_shard, MeshDim::cp})),
      dp_group_(mesh.group({MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp})) {
  units_.push_back(std::make_unique<Unit>());
  for (const auto& [prefix, m] : blocks) {
    auto u = std::make_unique<Unit>();
    u->prefix = prefix + ".";
    u->module = m;
    u->index = units_.size();
    units_.push_back(std::move(u));
  }
  const int S = shard_group_.size(), s = shard_group_.rank();
  autograd::NoGradGuard ng;
  for (auto& [name, t] : root.named_parameters()) {
    if (include && !include(name)) continue;
    TITAN_CHECK(t.dtype() == DType::f32 && t.dim() >= 1 && t.is_contiguous(),
                "fully_shard: parameter '{}' must be a contiguous f32 tensor with dim >= 1 (got {} {})", name,
                dtype_name(t.dtype()), shape_str(t.shape()));
    Unit* unit = units_[0].get();
    for (size_t i = 1; i < units_.size(); ++i)
      if (name.rfind(units_[i]->prefix, 0) == 0) unit = units_[i].get();
    auto p = std::make_unique<Param>();
    p->name = name;
    p->full = t;
    p->row_elems = t.numel() / std::max<int64_t>(1, t.size(0));
    for (int r = 0; r < S; ++r) p->ranges.push_back(shard_range(t.size(0), S, r));
    const ShardRange mine = p->ranges[s];
    p->shard = t.narrow(0, mine.offset, mine.length).contiguous().clone().detach();
    p->shard.requires_grad_(true);
    shards_.emplace_back(name, p->shard);
    params_.push_back(p.get());
    unit->params.push_back(p.get());
    unit->owned.push_back(std::move(p));
  }
  for (auto& u : units_) {
    u->gathered = true;  // the full values are here until now
    reshard(*u);
    if (u->module) nn::set_forward_hook(*u->module, std::make_shared<Hook>(this, u->index));
  }
}

FullyShard::~FullyShard() {
  for (auto& u : units_)
    if (u->module) nn::set_forward_hook(*u->module, nullptr);
}

DTensor FullyShard::sharded_parameter(size_t i) const {
  const Param& p = *params_.at(i);
  TITAN_CHECK(mesh_.size(MeshDim::cp) == 1,
              "fully_shard: a shard over dp_shard × cp (context parallelism) has no DTensor placement yet");
  return DTensor(p.shard.detach(), p.full.shape(), mesh_, {MeshDim::dp_shard}, {Placement::Shard(0)});
}

const Shape& FullyShard::full_shape(size_t i) const { return params_.at(i)->full.shape(); }

ShardRange FullyShard::shard_rows(size_t i) const { return params_.at(i)->ranges.at(shard_group_.rank()); }

void FullyShard::unshard(Unit& u) {
  if (u.gathered || u.params.empty()) {
    u.gathered = true;
    return;
  }
  const int S = shard_group_.size(), s = shard_group_.rank();
  // One all-gather per unit: rank r contributes its rows of every parameter, in order.
  std::vector<size_t> counts(S, 0);
  for (const Param* p : u.params)
    for (int r = 0; r < S; ++r) counts[r] += static_cast<size_t>(p->ranges[r].length * p->row_elems) * 4;
  std::vector<unsigned char> send(counts[s]);
  size_t off = 0;
  for (const Param* p : u.params) {
    const size_t n = static_cast<size_t>(p->shard.numel()) * 4;
    if (n) std::memcpy(send.data() + off, p->shard.data_ptr(), n);
    off += n;
  }
  size_t total = 0;
  std::vector<size_t> base(S);
  for (int r = 0; r < S; ++r) {
    base[r] = total;
    total += counts[r];
  }
  std::vector<unsigned char> recv(total);
  {
    Timer t(stats_);
    shard_group_.all_gatherv_bytes(send.data(), recv.data(), counts);
  }
  stats_.all_gather_bytes += static_cast<int64_t>(total - counts[s]);
  ++stats_.all_gathers;
  std::vector<size_t> at = base;
  for (Param* p : u.params) {
    allocate_full(p->full);
    unsigned char* dst = static_cast<unsigned char*>(p->full.data_ptr());
    for (int r = 0; r < S; ++r) {
      const size_t n = static_cast<size_t>(p->ranges[r].length * p->row_elems) * 4;
      if (n) std::memcpy(dst + static_cast<size_t>(p->ranges[r].offset * p->row_elems) * 4, recv.data() + at[r], n);
      at[r] += n;
    }
  }
  u.gathered = true;
}

void FullyShard::reshard(Unit& u) {
  if (!u.gathered) return;
  for (Param* p : u.params) free_full(p->full);
  u.gathered = false;
}

void FullyShard::post_forward(size_t unit, bool backward_follows) {
  if (reshard_after_forward_ || !backward_follows) reshard(*units_[unit]);
}

void FullyShard::pre_backward(size_t unit) {
  // Blocks after this one have finished their backward (their nodes have larger seq).
  // Resharding after forward, no other block is gathered; without it the blocks before
  // this one still hold their weights for their own backward.
  for (size_t i = 1; i < units_.size(); ++i)
    if (i > unit || (reshard_after_forward_ && i != unit)) reshard(*units_[i]);
  unshard(*units_[unit]);
}

void FullyShard::unshard_root() { unshard(*units_[0]); }

void FullyShard::unshard_all() {
  for (auto& u : units_) unshard(*u);
}

void FullyShard::reshard_all() {
  for (auto& u : units_) reshard(*u);
}

void FullyShard::reduce_gradients() {
  const int S = shard_group_.size(), s = shard_group_.rank();
  const int D = dp_group_.size();
  for (auto& u : units_) {
    std::vector<Param*> active;
    for (Param* p : u->params)
      if (p->full.grad().defined()) active.push_back(p);
    if (active.empty()) continue;
    // Elements of shard index k over the active parameters.
    std::vector<size_t> seg(S, 0);
    for (const Param* p : active)
      for (int k = 0; k < S; ++k) seg[k] += static_cast<size_t>(p->ranges[k].length * p->row_elems);
    // To dp peer q (shard index q % S): its rows of every active gradient.
    std::vector<size_t> sc(D), so(D), rc(D), ro(D);
    size_t send_total = 0;
    for (int q = 0; q < D; ++q) {
      sc[q] = seg[q % S] * 4;
      so[q] = send_total;
      send_total += sc[q];
      rc[q] = seg[s] * 4;
      ro[q] = seg[s] * 4 * q;
    }
    std::vector<unsigned char> send(send_total), recv(seg[s] * 4 * D);
    for (int q = 0; q < D; ++q) {
      size_t off = so[q];
      for (const Param* p : active) {
        const ShardRange r = p->ranges[q % S];
        const size_t n = static_cast<size_t>(r.length * p->row_elems) * 4;
        Tensor g = p->full.grad().contiguous();
        if (n)
          std::memcpy(send.data() + off,
                      static_cast<const unsigned char*>(g.data_ptr()) + static_cast<size_t>(r.offset * p->row_elems) * 4,
                      n);
        off += n;
      }
    }
    {
      Timer t(stats_);
      dp_group_.all_to_allv_bytes(send.data(), sc, so, recv.data(), rc, ro);
    }
    stats_.reduce_bytes += static_cast<int64_t>(seg[s] * 4 * (D - 1));
    ++stats_.reductions;
    // acc = ((acc + piece_0) + piece_1) + ... in dp-rank order.
    const bool have = active.front()->shard.grad().defined();
    for (const Param* p : active)
      TITAN_CHECK(p->shard.grad().defined() == have, "fully_shard: '{}' has {} gradient while '{}' has {}", p->name,
                  p->shard.grad().defined() ? "a" : "no", active.front()->name, have ? "one" : "none");
    std::vector<float> acc;
    std::vector<const void*> pieces;
    if (have) {
      acc.resize(seg[s]);
      size_t off = 0;
      for (const Param* p : active) {
        Tensor g = p->shard.grad().contiguous();
        if (g.numel()) std::memcpy(acc.data() + off, g.data_ptr(), g.numel() * 4);
        off += static_cast<size_t>(g.numel());
      }
      pieces.push_back(acc.data());
    }
    for (int q = 0; q < D; ++q) pieces.push_back(recv.data() + ro[q]);
    std::vector<float> out(seg[s]);
    reduce_pieces(DType::f32, pieces, static_cast<int64_t>(seg[s]), out.data(), ReduceOp::sum);
    size_t off = 0;
    for (Param* p : active) {
      Tensor g = have ? p->shard.grad() : Tensor::empty(p->shard.shape());
      if (g.numel()) std::memcpy(g.data_ptr(), out.data() + off, g.numel() * 4);
      off += static_cast<size_t>(g.numel());
      if (!have) p->shard.set_grad(g);
      p->full.zero_grad();
    }
  }
  reshard_all();
}

void FullyShard::skip_microbatch() {
  unshard(*units_[0]);
  for (size_t i = 1; i < units_.size(); ++i) {  // forward: pre_forward / post_forward hooks
    unshard(*units_[i]);
    post_forward(i, /*backward_follows=*/true);
  }
  for (size_t i = units_.size(); i-- > 1;) pre_backward(i);  // the FsdpPreBackward nodes
  for (Param* p : params_) p->full.set_grad(Tensor::full(p->full.shape(), -0.0));
  reduce_gradients();
}

float FullyShard::grad_norm() {
  double norm_sq = 0.0;
  for (double sp : grad_norm_sq_parts()) norm_sq += sp;
  return static_cast<float>(std::sqrt(norm_sq));
}

std::vector<double> FullyShard::grad_norm_sq_parts() {
  const int S = shard_group_.size(), s = shard_group_.rank();
  constexpr int64_t B = optim::kGradNormBlock;
  // Per rank: the partials of the blocks inside its rows (doubles), then the values of
  // the blocks it shares with other ranks (floats), parameters in order.
  struct Plan {
    std::vector<size_t> partials, frag_floats;  // per rank
  } plan{std::vector<size_t>(S, 0), std::vector<size_t>(S, 0)};
  auto range_of = [](const Param* p, int r) {
    return std::pair<int64_t, int64_t>{p->ranges[r].offset * p->row_elems,
                                       (p->ranges[r].offset + p->ranges[r].length) * p->row_elems};
  };
  std::vector<const Param*> active;
  for (const Param* p : params_)
    if (p->shard.grad().defined()) active.push_back(p);
  for (const Param* p : active) {
    const int64_t n = p->numel();
    for (int r = 0; r < S; ++r) {
      auto [a, b] = range_of(p, r);
      for (int64_t t0 = a / B * B; t0 < b; t0 += B) {
        const int64_t t1 = std::min(t0 + B, n);
        if (t0 >= a && t1 <= b)
          ++plan.partials[r];
        else
          plan.frag_floats[r] += static_cast<size_t>(std::min(b, t1) - std::max(a, t0));
      }
    }
  }
  std::vector<size_t> counts(S);
  for (int r = 0; r < S; ++r) counts[r] = plan.partials[r] * 8 + plan.frag_floats[r] * 4;
  std::vector<unsigned char> send(counts[s]);
  {
    size_t pd = 0, pf = plan.partials[s] * 8;
    for (const Param* p : active) {
      Tensor g = p->shard.grad().contiguous();
      const float* gd = g.numel() ? g.data<float>() : nullptr;
      auto [a, b] = range_of(p, s);
      const int64_t n = p->numel();
      for (int64_t t0 = a / B * B; t0 < b; t0 += B) {
        const int64_t t1 = std::min(t0 + B, n);
        if (t0 >= a && t1 <= b) {
          const double v = optim::kernels::sum_squares(gd + (t0 - a), t1 - t0);
          std::memcpy(send.data() + pd, &v, 8);
          pd += 8;
        } else {
          const int64_t lo = std::max(a, t0), hi = std::min(b, t1);
          std::memcpy(send.data() + pf, gd + (lo - a), static_cast<size_t>(hi - lo) * 4);
          pf += static_cast<size_t>(hi - lo) * 4;
        }
      }
    }
  }
  size_t total = 0;
  std::vector<size_t> base(S);
  for (int r = 0; r < S; ++r) {
    base[r] = total;
    total += counts[r];
  }
  std::vector<unsigned char> recv(total);
  {
    Timer t(stats_);
    shard_group_.all_gatherv_bytes(send.data(), recv.data(), counts);
  }
  // Read back in the same order on every rank.
  std::vector<size_t> pd(S), pf(S);
  for (int r = 0; r < S; ++r) {
    pd[r] = base[r];
    pf[r] = base[r] + plan.partials[r] * 8;
  }
  std::vector<double> parts(params_.size(), 0.0);
  std::vector<float> block(B);
  for (const Param* p : active) {
    const int64_t n = p->numel();
    double sp = 0.0;
    for (int64_t t0 = 0; t0 < n; t0 += B) {
      const int64_t t1 = std::min(t0 + B, n);
      double v = 0.0;
      bool inside = false;
      for (int r = 0; r < S && !inside; ++r) {
        auto [a, b] = range_of(p, r);
        if (t0 >= a && t1 <= b && a < b) {
          std::memcpy(&v, recv.data() + pd[r], 8);
          pd[r] += 8;
          inside = true;
        }
      }
      if (!inside) {
        for (int r = 0; r < S; ++r) {
          auto [a, b] = range_of(p, r);
          const int64_t lo = std::max(a, t0), hi = std::min(b, t1);
          if (lo >= hi) continue;
          std::memcpy(block.data() + (lo - t0), recv.data() + pf[r], static_cast<size_t>(hi - lo) * 4);
          pf[r] += static_cast<size_t>(hi - lo) * 4;
        }
        v = optim::kernels::sum_squares(block.data(), t1 - t0);
      }
      sp += v;
    }
    parts[static_cast<size_t>(std::find(params_.begin(), params_.end(), p) - params_.begin())] = sp;
  }
  return parts;
}

float FullyShard::clip_grad_norm_(double max_norm) {
  const float total = grad_norm();
  std::vector<optim::ParamRef> refs;
  for (const auto& [name, t] : shards_) refs.push_back({name, t});
  optim::scale_grads_for_norm_(refs, total, max_norm);
  return total;
}

std::vector<std::pair<std::string, Tensor>> FullyShard::full_parameters() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Param* p : params_) {
    Timer t(stats_);
    out.emplace_back(p->name, shard_group_.all_gatherv(p->shard.detach()));
  }
  return out;
}

void FullyShard::load_full_parameters(const std::vector<std::pair<std::string, Tensor>>& full) {
  autograd::NoGradGuard ng;
  for (Param* p : params_) {
    const Tensor* src = nullptr;
    for (const auto& [n, t] : full)
      if (n == p->name) src = &t;
    TITAN_CHECK(src != nullptr, "fully_shard: no value for parameter '{}'", p->name);
    TITAN_CHECK(src->shape() == p->full.shape(), "fully_shard: '{}' has shape {}, expected {}", p->name,
                shape_str(src->shape()), shape_str(p->full.shape()));
    const ShardRange r = p->ranges[shard_group_.rank()];
    p->shard.copy_(src->narrow(0, r.offset, r.length));
  }
}

}  // namespace titan::distributed
