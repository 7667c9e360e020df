#include "titan/distributed/expert_parallel.h"

#include <chrono>
#include <cstring>

#include "titan/autograd/function.h"
#include "titan/core/error.h"
#include "titan/distributed/dtensor.h"
#include "titan/distributed/reduction.h"
#include "titan/models/ffn/moe.h"
#include "titan/optim/grad_clip.h"
#include "titan/optim/kernels.h"

namespace titan::distributed {

namespace {

using Clock = std::chrono::steady_clock;

struct Timer {
  EpStats& s;
  Clock::time_point t0 = Clock::now();
  explicit Timer(EpStats& st) : s(st) {}
  ~Timer() { s.comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
};

// Rows of `t` (contiguous (n, D) f32) exchanged over `g`: send_rows[j] rows to rank j,
// recv_rows[j] from rank j, returned as one tensor per source rank.
std::vector<Tensor> exchange_rows(ProcessGroup& g, const Tensor& t, const std::vector<int64_t>& send_rows,
                                  const std::vector<int64_t>& recv_rows, int64_t D, EpStats& st) {
  const int n = g.size();
  std::vector<size_t> sc(n), so(n), rc(n), ro(n);
  size_t s_tot = 0, r_tot = 0;
  for (int j = 0; j < n; ++j) {
    sc[j] = static_cast<size_t>(send_rows[j] * D) * 4;
    so[j] = s_tot;
    s_tot += sc[j];
    rc[j] = static_cast<size_t>(recv_rows[j] * D) * 4;
    ro[j] = r_tot;
    r_tot += rc[j];
  }
  Tensor c = t.contiguous();
  std::vector<unsigned char> recv(r_tot);
  {
    Timer tm(st);
    g.all_to_allv_bytes(c.data_ptr(), sc, so, recv.data(), rc, ro);
  }
  st.a2a_bytes += static_cast<int64_t>(r_tot - rc[g.rank()]);
  std::vector<Tensor> out(n);
  for (int j = 0; j < n; ++j) {
    out[j] = Tensor::empty({recv_rows[j], D});
    if (rc[j]) std::memcpy(out[j].data_ptr(), recv.data() + ro[j], rc[j]);
  }
  return out;
}

Tensor concat_rows(const std::vector<Tensor>& parts, int64_t D) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Tensor out = Tensor::empty({rows, D});
  size_t off = 0;
  for (const Tensor& p : parts) {
    Tensor c = p.contiguous();
    const size_t nb = static_cast<size_t>(c.numel()) * 4;
    if (nb) std::memcpy(static_cast<unsigned char*>(out.data_ptr()) + off, c.data_ptr(), nb);
    off += nb;
  }
  return out;
}

void allocate_full(Tensor& t) { t.unsafe_impl()->storage = std::make_shared<Storage>(t.nbytes(), Device::cpu()); }
void free_full(Tensor& t) { t.unsafe_impl()->storage.reset(); }

}  // namespace

struct ExpertParallel::Param {
  std::string name;
  Tensor full;                 // the module's (E, ...) parameter; a buffer only between unshard_all/reshard_all
  Tensor shard;                // (E/ep, ...) local experts: the optimizer's leaf
  std::vector<Tensor> source;  // per ep peer: a leaf sharing shard's storage; its grad = that peer's piece
};

class ExpertParallel::Dispatch final : public models::ExpertCompute {
 public:
  Dispatch(ExpertParallel* ep, Param* w1, Param* w2, Param* w3, int64_t E) : ep_(ep), w_{w1, w2, w3}, E_(E) {}

  Tensor forward(const Tensor& xs, const std::vector<int64_t>& offsets) override {
    ProcessGroup& g = ep_->mesh_.ep();
    const int I = g.size();
    const int64_t El = E_ / I, D = xs.size(1);
    EpStats& st = ep_->stats_;
    // Per-expert counts to the owners: chunk s of the result = peer s's counts of my experts.
    std::vector<int64_t> counts(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) counts[e] = offsets[e + 1] - offsets[e];
    Tensor rc;
    {
      Timer tm(st);
      rc = g.all_to_all(Tensor::from_vector(counts, {E_}));
    }
    const std::vector<int64_t> peer_counts = rc.to_vector<int64_t>();
    std::vector<int64_t> send_rows(I), recv_rows(I, 0);
    for (int o = 0; o < I; ++o) send_rows[o] = offsets[(o + 1) * El] - offsets[o * El];
    std::vector<std::vector<int64_t>> peer_off(I, std::vector<int64_t>(static_cast<size_t>(El + 1), 0));
    for (int s = 0; s < I; ++s)
      for (int64_t e = 0; e < El; ++e) {
        peer_off[s][e + 1] = peer_off[s][e] + peer_counts[s * El + e];
        recv_rows[s] += peer_counts[s * El + e];
      }
    // Dispatch: one output per peer (each an autograd output of one node).
    std::vector<Tensor> xr = exchange_rows(g, xs, send_rows, recv_rows, D, st);
    const bool grad = autograd::needs_grad({&xs});
    if (grad) {
      ProcessGroup* gp = &g;
      autograd::record_fn("EpDispatch", {xs}, xr,
                          [gp, send_rows, recv_rows, D, &st](const std::vector<Tensor>& gr) {
                            std::vector<Tensor> back =
                                exchange_rows(*gp, concat_rows(gr, D), recv_rows, send_rows, D, st);
                            return std::vector<Tensor>{concat_rows(back, D)};
                          });
    }
    // The local experts on each peer's rows; in a training forward with the peer's own
    // weight leaves, so that each peer's (microbatch's) gradient stays separate.
    const bool train = autograd::GradMode::enabled();
    std::vector<Tensor> yr(I);
    for (int s = 0; s < I; ++s) {
      auto w = [&](int k) { return train ? w_[k]->source[s] : w_[k]->shard.detach(); };
      yr[s] = models::swiglu_experts(xr[s], w(0), w(1), w(2), peer_off[s]);
    }
    // Combine: every peer's outputs back to it, in its row order.
    std::vector<Tensor> back = exchange_rows(g, concat_rows(yr, D), recv_rows, send_rows, D, st);
    Tensor ys = concat_rows(back, D);
    if (autograd::needs_grad(yr)) {
      ProcessGroup* gp = &g;
      autograd::record_fn("EpCombine", yr, {ys}, [gp, send_rows, recv_rows, D, &st](const std::vector<Tensor>& gr) {
        return exchange_rows(*gp, gr[0], send_rows, recv_rows, D, st);
      });
    }
    return ys;
  }

 private:
  ExpertParallel* ep_;
  Param* w_[3];
  int64_t E_;
};

bool ExpertParallel::is_expert_parameter(const std::string& name) {
  const std::string key = ".moe.experts.w";
  const size_t at = name.find(key);
  return name.rfind("layers.", 0) == 0 && at != std::string::npos && name.size() == at + key.size() + 1;
}

ExpertParallel::ExpertParallel(models::Decoder& model, const DeviceMesh& mesh,
                               const std::function<bool(int64_t layer)>& holds_layer)
    : mesh_(mesh) {
  const MeshShape& sh = mesh.shape();
  const int I = mesh.ep().size(), i = mesh.ep().rank();
  // Expert-dp group: the ranks with this rank's pp, ep index (dp_shard_in_ep, cp) and tp,
  // ordered by (dp_replicate, dp_shard_mod_ep), i.e. by dp rank.
  const int in_ep = sh.ep / sh.cp, M = sh.dp_shard / in_ep;
  const int s = mesh.coord(MeshDim::dp_shard);
  const int color = ((mesh.coord(MeshDim::pp) * in_ep + s % in_ep) * sh.cp + mesh.coord(MeshDim::cp)) * sh.tp +
                    mesh.coord(MeshDim::tp);
  const int key = mesh.coord(MeshDim::dp_replicate) * M + s / in_ep;
  if (sh.dp_replicate * M > 1) {
    xdp_ = mesh.world().split(color, key);
  }
  autograd::NoGradGuard ng;
  std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
  for (size_t l = 0; l < model.layers.size(); ++l) {
    models::MoE* moe = model.layers[l]->moe;
    if (!moe || (holds_layer && !holds_layer(static_cast<int64_t>(l)))) continue;
    const int64_t E = moe->experts->w1.size(0);
    TITAN_CHECK(moe->experts->plain_swiglu(),
                "parallelism.expert_parallel_degree={} is not supported with expert_proj_bias or expert_act "
                "swiglu_oai (layer {}: the sharded experts run the plain SwiGLU)", I, l);
    TITAN_CHECK(E % I == 0, "parallelism.expert_parallel_degree={} does not divide the {} routed experts of layer {}",
                I, E, l);
    const ShardRange mine = shard_range(E, I, i);
    Param* w[3];
    const char* names[3] = {"w1", "w2", "w3"};
    Tensor* tensors[3] = {&moe->experts->w1, &moe->experts->w2, &moe->experts->w3};
    for (int k = 0; k < 3; ++k) {
      auto p = std::make_unique<Param>();
      p->name = "layers." + std::to_string(l) + ".moe.experts." + names[k];
      p->full = *tensors[k];
      TITAN_CHECK(p->full.dtype() == DType::f32 && p->full.is_contiguous(),
                  "expert parallelism: '{}' must be a contiguous f32 tensor", p->name);
      p->shard = p->full.narrow(0, mine.offset, mine.length).contiguous().clone().detach();
      p->shard.requires_grad_(true);
      for (int q = 0; q < I; ++q) {
        Tensor leaf = p->shard.detach();
        leaf.requires_grad_(true);
        p->source.push_back(leaf);
      }
      free_full(p->full);
      w[k] = p.get();
      params_.push_back(std::move(p));
    }
    moe->expert_compute = std::make_shared<Dispatch>(this, w[0], w[1], w[2], E);
  }
  TITAN_CHECK(!params_.empty() || holds_layer,  // a pipeline stage may hold dense layers only
              "parallelism.expert_parallel_degree={} needs a mixture-of-experts model (this model has no MoE layer)", I);
  // Model order (named_parameters), for the optimizer and the norm.
  std::vector<std::unique_ptr<Param>> ordered;
  for (const auto& [name, t] : named)
    for (auto& p : params_)
      if (p && p->name == name) ordered.push_back(std::move(p));
  TITAN_CHECK(ordered.size() == params_.size(), "expert parallelism: expert parameters not found by name");
  params_ = std::move(ordered);
  for (const auto& p : params_) shards_.emplace_back(p->name, p->shard);
}

ExpertParallel::~ExpertParallel() = default;

void ExpertParallel::reduce_gradients() {
  const int I = mesh_.ep().size();
  const int X = xdp_ ? xdp_->size() : 1;
  // This rank's pieces: per parameter, per ep peer (the peer's microbatch), the local
  // experts' gradient (0 where that peer routed no row here and nothing was recorded).
  size_t per_rank = 0;
  for (const auto& p : params_) per_rank += static_cast<size_t>(p->shard.numel()) * I;
  std::vector<float> mine(per_rank, 0.0f);
  {
    size_t off = 0;
    for (const auto& p : params_) {
      const size_t n = static_cast<size_t>(p->shard.numel());
      for (int q = 0; q < I; ++q) {
        Tensor g = p->source[q].grad();
        if (g.defined()) {
          Tensor c = g.contiguous();
          std::memcpy(mine.data() + off, c.data_ptr(), n * 4);
        }
        p->source[q].zero_grad();
        off += n;
      }
    }
  }
  std::vector<float> all;
  const float* base = mine.data();
  if (X > 1) {
    all.resize(per_rank * X);
    {
      Timer tm(stats_);
      xdp_->all_gather_bytes(mine.data(), per_rank * 4, all.data());
    }
    stats_.reduce_bytes += static_cast<int64_t>(per_rank * 4 * (X - 1));
    base = all.data();
  }
  // dp rank of piece (member x, peer q) = x · I + q: sum in that order onto the shard's gradient.
  size_t off = 0;
  for (const auto& p : params_) {
    const size_t n = static_cast<size_t>(p->shard.numel());
    std::vector<const void*> pieces;
    Tensor acc = p->shard.grad();
    const bool have = acc.defined();
    if (have) {
      acc = acc.contiguous();
      pieces.push_back(acc.data_ptr());
    }
    for (int x = 0; x < X; ++x)
      for (int q = 0; q < I; ++q) pieces.push_back(base + x * per_rank + off + static_cast<size_t>(q) * n);
    Tensor out = Tensor::empty(p->shard.shape());
    reduce_pieces(DType::f32, pieces, static_cast<int64_t>(n), out.data_ptr(), ReduceOp::sum);
    if (have)
      p->shard.grad().copy_(out);
    else
      p->shard.set_grad(out);
    off += n * I;
  }
}

std::vector<double> ExpertParallel::grad_norm_sq_parts() {
  constexpr int64_t B = optim::kGradNormBlock;
  std::vector<double> parts(params_.size(), 0.0);
  for (size_t k = 0; k < params_.size(); ++k) {
    const Param& p = *params_[k];
    // Every rank holds a gradient after reduce_gradients, or none does.
    if (!p.shard.grad().defined()) continue;
    Tensor full;
    {
      Timer tm(stats_);
      full = mesh_.ep().all_gatherv(p.shard.grad().contiguous());
    }
    const float* g = full.data<float>();
    const int64_t n = full.numel();
    double sp = 0.0;
    for (int64_t t0 = 0; t0 < n; t0 += B) sp += optim::kernels::sum_squares(g + t0, std::min(B, n - t0));
    parts[k] = sp;
  }
  return parts;
}

void ExpertParallel::unshard_all() {
  autograd::NoGradGuard ng;
  for (auto& p : params_) {
    Tensor full = mesh_.ep().all_gatherv(p->shard.detach());
    allocate_full(p->full);
    std::memcpy(p->full.data_ptr(), full.data_ptr(), full.nbytes());
  }
}

void ExpertParallel::reshard_all() {
  for (auto& p : params_) free_full(p->full);
}

}  // namespace titan::distributed
