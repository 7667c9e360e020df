#include "titan/distributed/pipeline.h"

#include <chrono>
#include <cmath>
#include <map>

#include "titan/autograd/checkpoint.h"
#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/distributed/context_parallel.h"
#include "titan/distributed/expert_parallel.h"
#include "titan/distributed/fsdp.h"
#include "titan/distributed/tensor_parallel.h"
#include "titan/nn/hooks.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/ops/reduce.h"
#include "titan/optim/grad_clip.h"
#include "titan/optim/kernels.h"

namespace titan::distributed {

namespace {
using Clock = std::chrono::steady_clock;

// The tokens and targets this rank runs of a batch: all of them, or under CP this cp
// rank's (ContextParallel::shard, which also sets the layout for the attention calls).
ContextParallel::Local local_batch(ContextParallel* cp, const data::Batch& b) {
  if (cp) return cp->shard(b.input, b.targets, b.seq_len);
  return {b.input, b.targets};
}
}  // namespace

struct Pipeline::Pending {
  Tensor buffer;  // kept alive until the send completes
  std::unique_ptr<PendingSend> send;
};

Pipeline::Pipeline(models::Decoder& model, const DeviceMesh& mesh, PipelinePlan plan, TensorParallel* tp)
    : model_(model), mesh_(mesh), group_(mesh.group(MeshDim::pp)), plan_(std::move(plan)), tp_(tp) {
  TITAN_CHECK(tp == nullptr || mesh.size(MeshDim::tp) > 1, "pipeline: tensor parallelism on a mesh with tp=1");
  TITAN_CHECK(plan_.pp == mesh.size(MeshDim::pp), "pipeline: a plan for {} pp ranks on a mesh with pp={}", plan_.pp,
              mesh.size(MeshDim::pp));
  TITAN_CHECK(!plan_.stages.empty() && plan_.stages.back().end_layer == static_cast<int64_t>(model.layers.size()),
              "pipeline: the plan's stages cover {} layers, the model has {}",
              plan_.stages.empty() ? 0 : plan_.stages.back().end_layer, model.layers.size());
  TITAN_CHECK(model.output != nullptr, "pipeline: the model's LM head is tied to its embedding");
  rank_ = group_.rank();
  mine_.assign(static_cast<size_t>(plan_.num_stages()), false);
  for (int s : plan_.stages_of_rank(rank_)) mine_[static_cast<size_t>(s)] = true;
  // The other stages' parameters lose their buffers (the handles, and their shapes, stay).
  for (auto& [name, t] : model_.named_parameters())
    if (!owns(name)) t.unsafe_impl()->storage.reset();
}

Pipeline::~Pipeline() {
  // Sends still in flight here mean an error interrupted a schedule and the job is
  // ending (the CLI aborts it): leak them rather than block on a peer that may never
  // receive, or free a buffer MPI may still read.
  for (auto& p : pending_) (void)p.release();
}

int Pipeline::stage_of_parameter(const std::string& name) const {
  if (name.rfind("tok_embeddings.", 0) == 0) return 0;
  if (name.rfind("layers.", 0) == 0) {
    const int64_t layer = std::stoll(name.substr(7, name.find('.', 7) - 7));
    for (int s = 0; s < plan_.num_stages(); ++s)
      if (layer >= plan_.stages[s].first_layer && layer < plan_.stages[s].end_layer) return s;
  }
  return plan_.num_stages() - 1;  // norm, output
}

bool Pipeline::owns(const std::string& name) const { return mine_[static_cast<size_t>(stage_of_parameter(name))]; }

std::vector<std::pair<std::string, Tensor>> Pipeline::parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : model_.named_parameters())
    if (owns(name)) out.emplace_back(name, t);
  return out;
}

std::vector<std::pair<std::string, const nn::Module*>> Pipeline::blocks() const {
  std::vector<std::pair<std::string, const nn::Module*>> out;
  for (int s : plan_.stages_of_rank(rank_))
    for (int64_t l = plan_.stages[s].first_layer; l < plan_.stages[s].end_layer; ++l)
      out.emplace_back("layers." + std::to_string(l), model_.layers[static_cast<size_t>(l)]);
  return out;
}

bool Pipeline::holds_last_stage() const { return mine_.back(); }

Tensor Pipeline::stage_forward(int stage, const models::ForwardBatch& batch, const Tensor& x) const {
  // Decoder::forward's arithmetic, restricted to the stage's modules.
  const PipelineStage& st = plan_.stages[static_cast<size_t>(stage)];
  // Under TP the layout (SP or not) of this forward; the embedding's hook sets the same.
  if (tp_) tp_->begin_forward(batch.num_tokens());
  Tensor h = x;
  if (st.embeddings) {
    h = nn::call_forward(*model_.tok_embeddings, [&] { return model_.tok_embeddings->forward(batch.tokens); });
    if (model_.config().embedding_multiplier != 1.0) h = scale(h, model_.config().embedding_multiplier);
  }
  for (int64_t l = st.first_layer; l < st.end_layer; ++l) {
    const models::TransformerBlock* layer = model_.layers[static_cast<size_t>(l)];
    if (model_.activation_checkpoint == models::ActivationCheckpoint::full && autograd::GradMode::enabled()) {
      h = autograd::checkpoint(
          [layer, batch](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{
                nn::call_forward(*layer, [&] { return layer->forward(in[0], batch, nullptr); })};
          },
          {h})[0];
    } else {
      h = nn::call_forward(*layer, [&] { return layer->forward(h, batch, nullptr); });
    }
  }
  return st.head ? model_.norm->forward(h) : h;
}

Tensor Pipeline::recv_hidden(int64_t tokens, int src_rank, int tag) {
  // Under SP each tp rank's activations are its tokens / tp rows of the sequence.
  const int64_t rows = tp_ ? tp_->begin_forward(tokens) : tokens;
  Tensor t = Tensor::empty({rows, model_.config().hidden_size});
  const auto t0 = Clock::now();
  group_.recv(t, src_rank, tag);
  stats_.recv_wait_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return t;
}

void Pipeline::send_hidden(const Tensor& t, int dst_rank, int tag) {
  TITAN_CHECK(t.dtype() == DType::f32, "pipeline: stage activations must be f32, got {}", dtype_name(t.dtype()));
  auto p = std::make_unique<Pending>();
  p->buffer = t.detach().contiguous();
  if (p->buffer.is_same(t)) p->buffer = t.detach().clone();  // the sender may not touch it while in flight
  p->send = group_.isend_bytes(p->buffer.data_ptr(), p->buffer.nbytes(), dst_rank, tag);
  stats_.bytes_sent += static_cast<int64_t>(p->buffer.nbytes());
  pending_.push_back(std::move(p));
}

void Pipeline::wait_sends() {
  for (auto& p : pending_) p->send->wait();
  pending_.clear();
}

std::vector<double> Pipeline::train(const std::vector<data::Batch>& micro, size_t first, double inv_valid,
                                    FullyShard* fsdp) {
  const int64_t n = plan_.n_microbatches;
  TITAN_CHECK(first + static_cast<size_t>(n) <= micro.size(), "pipeline: {} microbatches from {} of {}", n, first,
              micro.size());
  const int V = plan_.num_stages();
  struct InFlight {
    Tensor input, output, loss;
  };
  std::map<std::pair<int, int64_t>, InFlight> live;
  std::vector<double> losses(static_cast<size_t>(n), 0.0);
  for (const PipelineAction& a : pipeline_actions(plan_, rank_)) {
    const data::Batch& b = micro[first + static_cast<size_t>(a.microbatch)];
    const PipelineStage& st = plan_.stages[static_cast<size_t>(a.stage)];
    // Under CP: this cp rank's tokens of the microbatch; the layout is set again before
    // each action (a backward may recompute attention under activation checkpointing).
    auto [input, targets] = local_batch(cp_, b);
    const models::ContextParallelScope cp_scope(cp_);
    const int64_t T = input.num_tokens();
    if (fsdp) fsdp->unshard_root();
    if (a.kind == PipelineAction::forward) {
      InFlight f;
      if (!st.embeddings) {
        f.input = recv_hidden(T, plan_.rank_of_stage(a.stage - 1), a.stage);
        f.input.requires_grad_(true);
      }
      f.output = stage_forward(a.stage, input, f.input);
      if (st.head && cp_) {
        // CP: the per-token losses of all cp ranks, summed in token order as one rank does.
        Tensor rows = linear_cross_entropy(f.output, model_.lm_head_weight(), targets, -100, 0.0, Reduction::none,
                                           /*expected_grad=*/inv_valid);
        losses[static_cast<size_t>(a.microbatch)] = titan::sum(cp_->gather_rows(rows)).item<double>();
        f.loss = titan::sum(rows);
      } else if (st.head) {
        // The 1-rank trainer's loss: Σ token CE, its backward seeded with float(1 / valid).
        f.loss = tp_ ? tp_->loss(f.output, model_.lm_head_weight(), targets)
                     : linear_cross_entropy(f.output, model_.lm_head_weight(), targets, -100, 0.0,
                                            Reduction::sum, /*expected_grad=*/inv_valid);
        losses[static_cast<size_t>(a.microbatch)] = f.loss.item<double>();
      } else {
        send_hidden(f.output, plan_.rank_of_stage(a.stage + 1), a.stage + 1);
      }
      live[{a.stage, a.microbatch}] = std::move(f);
    } else {
      auto it = live.find({a.stage, a.microbatch});
      TITAN_CHECK(it != live.end(), "pipeline: backward of stage {} microbatch {} before its forward", a.stage,
                  a.microbatch);
      InFlight f = std::move(it->second);
      live.erase(it);
      if (st.head) {
        scale(f.loss, inv_valid).backward();
      } else {
        Tensor dy = recv_hidden(T, plan_.rank_of_stage(a.stage + 1), V + a.stage);
        f.output.backward(dy);
      }
      if (!st.embeddings) {
        Tensor dx = f.input.grad();
        TITAN_CHECK(dx.defined(), "pipeline: stage {} produced no gradient for its input", a.stage);
        send_hidden(dx, plan_.rank_of_stage(a.stage - 1), V + a.stage - 1);
      }
      if (tp_ && fsdp) tp_->reduce_partial_grads();  // FSDP takes each backward's full gradients
      if (fsdp) fsdp->reduce_gradients();
      if (ep_) ep_->reduce_gradients();
    }
  }
  wait_sends();
  const int last = plan_.rank_of_stage(V - 1);
  group_.broadcast_bytes(losses.data(), losses.size() * sizeof(double), last);
  return losses;
}

Tensor Pipeline::forward(const models::ForwardBatch& batch, FullyShard* fsdp) {
  if (fsdp) fsdp->unshard_root();
  const int64_t T = batch.num_tokens();
  Tensor out;
  for (int s : plan_.stages_of_rank(rank_)) {
    const PipelineStage& st = plan_.stages[static_cast<size_t>(s)];
    Tensor x;
    if (!st.embeddings) x = recv_hidden(T, plan_.rank_of_stage(s - 1), s);
    Tensor h = stage_forward(s, batch, x);
    if (st.head)
      out = h;
    else
      send_hidden(h, plan_.rank_of_stage(s + 1), s + 1);
  }
  wait_sends();
  return out;
}

double Pipeline::loss_sum(const data::Batch& batch, FullyShard* fsdp) {
  auto [input, targets] = local_batch(cp_, batch);
  const models::ContextParallelScope cp_scope(cp_);
  Tensor h = forward(input, fsdp);
  double v = 0.0;
  if (h.defined() && cp_)
    v = titan::sum(cp_->gather_rows(linear_cross_entropy(h, model_.lm_head_weight(), targets, -100, 0.0, Reduction::none)))
            .item<double>();
  else if (h.defined())
    v = (tp_ ? tp_->loss(h, model_.lm_head_weight(), targets)
             : linear_cross_entropy(h, model_.lm_head_weight(), targets, -100, 0.0, Reduction::sum))
            .item<double>();
  group_.broadcast_bytes(&v, sizeof v, plan_.rank_of_stage(plan_.num_stages() - 1));
  return v;
}

int32_t Pipeline::broadcast_from_last(int32_t v) {
  group_.broadcast_bytes(&v, sizeof v, plan_.rank_of_stage(plan_.num_stages() - 1));
  return v;
}

float Pipeline::grad_norm(const std::vector<optim::ParamRef>& params, FullyShard* fsdp) {
  // ‖g‖² per parameter of the whole model (0 where another rank holds it), then the
  // owners' values added in parameter order: optim::grad_norm's sum.
  const auto all_params = model_.named_parameters();
  const size_t P = all_params.size();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < P; ++i) index[all_params[i].first] = i;
  std::vector<double> mine(P, 0.0);
  std::vector<double> parts, ep_parts;
  if (fsdp) parts = fsdp->grad_norm_sq_parts();
  if (ep_) ep_parts = ep_->grad_norm_sq_parts();
  size_t next_fsdp = 0, next_ep = 0;  // params: FSDP's shards, then EP's (the trainer's order)
  for (size_t k = 0; k < params.size(); ++k) {
    const auto it = index.find(params[k].name);
    TITAN_CHECK(it != index.end() && owns(params[k].name), "pipeline: '{}' is not a parameter of this rank",
                params[k].name);
    double s = 0.0;
    if (ep_ && ExpertParallel::is_expert_parameter(params[k].name)) {
      s = ep_parts.at(next_ep++);
    } else if (fsdp) {
      s = parts.at(next_fsdp++);
    } else {
      Tensor g = params[k].param.grad();
      if (g.defined()) {
        TITAN_CHECK(g.dtype() == DType::f32 && g.shape() == params[k].param.shape(),
                    "grad_norm: gradient of '{}' has dtype {} shape {}, expected f32 {}", params[k].name,
                    dtype_name(g.dtype()), shape_str(g.shape()), shape_str(params[k].param.shape()));
        Tensor c = g.contiguous();
        const float* d = c.data<float>();
        for (int64_t b = 0; b < c.numel(); b += optim::kGradNormBlock)
          s += optim::kernels::sum_squares(d + b, std::min(optim::kGradNormBlock, c.numel() - b));
      }
    }
    mine[it->second] = s;
  }
  if (tp_) {
    // A tp-sharded parameter's ‖g‖²: the tp ranks' pieces added in rank order; a
    // replicated one (the same full gradient on every tp rank) once.
    ProcessGroup& tg = mesh_.group(MeshDim::tp);
    const size_t Q = static_cast<size_t>(tg.size());
    std::vector<double> pieces(P * Q);
    tg.all_gather_bytes(mine.data(), P * sizeof(double), pieces.data());
    for (size_t i = 0; i < P; ++i) {
      if (tp_->placement(all_params[i].first) == TensorParallel::Placement::replicate) continue;
      double s = pieces[i];
      for (size_t q = 1; q < Q; ++q) s += pieces[q * P + i];
      mine[i] = s;
    }
  }
  const int R = group_.size();
  std::vector<double> all(P * static_cast<size_t>(R));
  group_.all_gather_bytes(mine.data(), P * sizeof(double), all.data());
  double total = 0.0;
  for (size_t i = 0; i < P; ++i)
    total += all[static_cast<size_t>(plan_.rank_of_stage(stage_of_parameter(all_params[i].first))) * P + i];
  return static_cast<float>(std::sqrt(total));
}

float Pipeline::clip_grad_norm_(const std::vector<optim::ParamRef>& params, double max_norm, FullyShard* fsdp) {
  const float total = grad_norm(params, fsdp);
  optim::scale_grads_for_norm_(params, total, max_norm);
  return total;
}

void Pipeline::gather_parameters(FullyShard* fsdp) {
  if (fsdp) fsdp->unshard_all();
  if (ep_) ep_->unshard_all();
  // Only the pp group of world rank 0 (every other coordinate 0) takes part; with tp,
  // that of every tp coordinate.
  for (MeshDim d : {MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp, MeshDim::tp})
    if (mesh_.coord(d) != 0 && !(d == MeshDim::tp && tp_)) return;
  autograd::NoGradGuard ng;
  const int tag = 2 * plan_.num_stages();
  for (auto& [name, t] : model_.named_parameters()) {
    const int owner = plan_.rank_of_stage(stage_of_parameter(name));
    if (owner == 0) continue;
    if (rank_ == owner) {
      group_.send(t, 0, tag);
    } else if (rank_ == 0) {
      t.unsafe_impl()->storage = std::make_shared<Storage>(t.nbytes(), Device::cpu());
      Tensor dst = t;
      group_.recv(dst, owner, tag);
    }
  }
}

}  // namespace titan::distributed
