#include "titan/models/ffn/moe.h"

#include <cmath>
#include <limits>

#include "titan/autograd/function.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/activation.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/grouped_matmul.h"
#include "titan/ops/index.h"
#include "titan/ops/reduce.h"
#include "titan/ops/softmax.h"

namespace titan::models {

namespace {

// The index of the largest v[i] over i in [0, n) not yet taken (ties: the lower index;
// a NaN never wins over a number). -1 when every index is taken.
int64_t argmax_free(const float* v, int64_t n, const std::vector<char>& taken) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (taken[static_cast<size_t>(i)]) continue;
    if (best < 0 || v[i] > v[best]) best = i;
  }
  return best;
}

// out (T, D) = Σ_j w[t, j] · ys[row[t K + j]] in j order (ascending expert index),
// starting from 0. Gradients: dys[row] = w · g; dw[t, j] = Σ_d g[t, d] ys[row, d] (d
// ascending).
Tensor combine_experts(const Tensor& ys, const Tensor& w, const std::vector<int64_t>& row) {
  const int64_t T = w.size(0), K = w.size(1), D = ys.size(1), N = ys.size(0);
  Tensor yc = ys.contiguous(), wc = w.contiguous();
  Tensor out = Tensor::empty({T, D});
  {
    const float* py = yc.data<float>();
    const float* pw = wc.data<float>();
    float* po = out.data<float>();
    parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        float* o = po + t * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
        for (int64_t j = 0; j < K; ++j) {
          const float wt = pw[t * K + j];
          const float* y = py + row[static_cast<size_t>(t * K + j)] * D;
          for (int64_t d = 0; d < D; ++d) o[d] = o[d] + wt * y[d];
        }
      }
    });
  }
  if (autograd::needs_grad({&ys, &w})) {
    autograd::record_fn(
        "CombineExperts", {ys, w}, {out},
        [yc = yc.detach(), wc = wc.detach(), row, T, K, D, N](const std::vector<Tensor>& g) {
          Tensor gc = g[0].contiguous();
          Tensor dys = Tensor::empty({N, D}), dw = Tensor::empty({T, K});
          const float* pg = gc.data<float>();
          const float* py = yc.data<float>();
          const float* pw = wc.data<float>();
          float* pdy = dys.data<float>();
          float* pdw = dw.data<float>();
          parallel_for(T, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t)
              for (int64_t j = 0; j < K; ++j) {
                const int64_t r = row[static_cast<size_t>(t * K + j)];
                const float wt = pw[t * K + j];
                float s = 0.0f;
                for (int64_t d = 0; d < D; ++d) {
                  pdy[r * D + d] = wt * pg[t * D + d];
                  s = s + pg[t * D + d] * py[r * D + d];
                }
                pdw[t * K + j] = s;
              }
          });
          return std::vector<Tensor>{dys, dw};
        });
  }
  return out;
}

// y unchanged; in backward, logits also receive `dlogits` (the aux loss's own gradient,
// computed with the forward: the aux loss enters backward with weight 1).
Tensor attach_aux_grad(const Tensor& y, const Tensor& logits, Tensor dlogits) {
  Tensor out = y.detach().clone();
  if (autograd::needs_grad({&y, &logits}))
    autograd::record_fn("AttachAuxLoss", {y, logits}, {out},
                        [dlogits = std::move(dlogits)](const std::vector<Tensor>& g) {
                          return std::vector<Tensor>{g[0], dlogits};
                        });
  return out;
}

}  // namespace

Router::Router(const TransformerConfig& c, int layer_id)
    : E_(c.num_experts), K_(c.num_experts_per_tok), n_group_(c.n_group), topk_group_(c.topk_group),
      sigmoid_(c.scoring_func == "sigmoid"), topk_softmax_(c.scoring_func == "softmax_topk"),
      norm_topk_prob_(c.norm_topk_prob),
      routed_scaling_factor_(c.routed_scaling_factor), layer_id_(layer_id) {
  gate = register_module("gate", std::make_unique<Linear>(c.hidden_size, c.num_experts, c.router_bias));
}

void Router::init_weights(const nn::InitContext& ctx) { gate->init(ctx, nn::InitRole::in_proj, layer_id_); }

RouterOutput Router::forward(const Tensor& x, const Tensor& bias) const {
  RouterOutput r;
  r.logits = gate->forward(x);
  r.scores = sigmoid_ ? sigmoid(r.logits) : softmax(r.logits, -1);
  const int64_t T = x.size(0), E = E_, K = K_;
  Tensor sc = r.scores.detach().contiguous();
  const float* s = sc.data<float>();
  std::vector<float> b = bias.defined() ? bias.to_vector<float>() : std::vector<float>(static_cast<size_t>(E), 0.0f);
  r.experts.assign(static_cast<size_t>(T * K), 0);
  const bool grouped = sigmoid_ && n_group_ > 1;
  const int64_t gs = E / n_group_;
  parallel_for(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> choice(static_cast<size_t>(E)), gscore(static_cast<size_t>(n_group_));
    std::vector<char> taken(static_cast<size_t>(E)), gtaken(static_cast<size_t>(n_group_));
    for (int64_t t = t0; t < t1; ++t) {
      const float* st = s + t * E;
      for (int64_t e = 0; e < E; ++e) choice[static_cast<size_t>(e)] = sigmoid_ ? st[e] + b[static_cast<size_t>(e)] : st[e];
      if (grouped) {
        // Group score: the sum of its two largest choice values (one for a 1-expert group).
        for (int64_t g = 0; g < n_group_; ++g) {
          std::vector<char> tk(static_cast<size_t>(gs), 0);
          const float* cg = choice.data() + g * gs;
          const int64_t a = argmax_free(cg, gs, tk);
          float sum = cg[a];
          if (gs > 1) {
            tk[static_cast<size_t>(a)] = 1;
            sum = sum + cg[argmax_free(cg, gs, tk)];
          }
          gscore[static_cast<size_t>(g)] = sum;
        }
        std::fill(gtaken.begin(), gtaken.end(), 0);
        for (int64_t i = 0; i < topk_group_; ++i) gtaken[static_cast<size_t>(argmax_free(gscore.data(), n_group_, gtaken))] = 1;
        for (int64_t g = 0; g < n_group_; ++g)
          if (!gtaken[static_cast<size_t>(g)])
            for (int64_t e = g * gs; e < (g + 1) * gs; ++e)
              choice[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
      }
      std::fill(taken.begin(), taken.end(), 0);
      for (int64_t j = 0; j < K; ++j) taken[static_cast<size_t>(argmax_free(choice.data(), E, taken))] = 1;
      int64_t j = 0;
      for (int64_t e = 0; e < E; ++e)
        if (taken[static_cast<size_t>(e)]) r.experts[static_cast<size_t>(t * K + j++)] = static_cast<int32_t>(e);
    }
  });
  std::vector<int64_t> idx(r.experts.begin(), r.experts.end());
  // softmax_topk: the K largest logits are the K largest softmax scores (ties to the
  // lower index either way); the weights are the softmax over those K logits.
  Tensor w = topk_softmax_ ? softmax(gather(r.logits, 1, Tensor::from_vector(idx, {T, K})), -1)
                           : gather(r.scores, 1, Tensor::from_vector(idx, {T, K}));
  if (norm_topk_prob_ && !topk_softmax_) {
    Tensor den = sum(w, 1, /*keepdim=*/true);
    if (sigmoid_) den = add(den, 1e-20);
    w = div(w, den.expand({T, K}));
  }
  if (routed_scaling_factor_ != 1.0) w = scale(w, routed_scaling_factor_);
  r.weights = w;
  return r;
}

GroupedExperts::GroupedExperts(const TransformerConfig& c, int layer_id)
    : oai_(c.expert_act == "swiglu_oai"), alpha_(c.swiglu_alpha), limit_(c.swiglu_limit), layer_id_(layer_id) {
  const int64_t E = c.num_experts, dim = c.hidden_size, hidden = c.moe_intermediate_size;
  w1 = register_parameter("w1", Tensor::zeros({E, hidden, dim}));
  w2 = register_parameter("w2", Tensor::zeros({E, dim, hidden}));
  w3 = register_parameter("w3", Tensor::zeros({E, hidden, dim}));
  if (c.expert_proj_bias) {
    b1 = register_parameter("b1", Tensor::zeros({E, hidden}));
    b2 = register_parameter("b2", Tensor::zeros({E, dim}));
    b3 = register_parameter("b3", Tensor::zeros({E, hidden}));
  }
}

namespace {
// y (N, n) + b[g] on the rows of group g (offsets G + 1): b (G, n) gathered per row.
Tensor add_group_bias(const Tensor& y, const Tensor& b, const std::vector<int64_t>& off) {
  std::vector<int64_t> group(static_cast<size_t>(y.size(0)));
  for (size_t g = 0; g + 1 < off.size(); ++g)
    for (int64_t r = off[g]; r < off[g + 1]; ++r) group[static_cast<size_t>(r)] = static_cast<int64_t>(g);
  return add(y, index_select(b, 0, Tensor::from_vector(group, {y.size(0)})));
}
}  // namespace

Tensor swiglu_experts(const Tensor& xs, const Tensor& w1, const Tensor& w2, const Tensor& w3,
                      const std::vector<int64_t>& off) {
  return grouped_linear(swiglu(grouped_linear(xs, w1, off), grouped_linear(xs, w3, off)), w2, off);
}

Tensor GroupedExperts::forward(const Tensor& xs, const std::vector<int64_t>& off) const {
  if (!oai_ && !b1.defined()) return swiglu_experts(xs, w1, w2, w3, off);
  Tensor g = grouped_linear(xs, w1, off), u = grouped_linear(xs, w3, off);
  if (b1.defined()) {
    g = add_group_bias(g, b1, off);
    u = add_group_bias(u, b3, off);
  }
  Tensor y = grouped_linear(oai_ ? swiglu_oai(g, u, alpha_, limit_) : swiglu(g, u), w2, off);
  return b2.defined() ? add_group_bias(y, b2, off) : y;
}

void GroupedExperts::init_weights(const nn::InitContext& ctx) {
  ctx.init(w1, nn::InitRole::in_proj, layer_id_);
  ctx.init(w2, nn::InitRole::out_proj, layer_id_);
  ctx.init(w3, nn::InitRole::up_proj, layer_id_);
  for (Tensor* b : {&b1, &b2, &b3})
    if (b->defined()) nn::InitContext::constant(*b, 0.0);
}

MoE::MoE(const TransformerConfig& c, int layer_id)
    : E_(c.num_experts), K_(c.num_experts_per_tok), aux_coef_(c.router_aux_loss_coef),
      load_balance_coeff_(c.load_balance_coeff), score_before_experts_(c.score_before_experts),
      layer_id_(layer_id) {
  TITAN_CHECK(c.scoring_func == "sigmoid" || c.load_balance_coeff == 0.0,
              "model config: load_balance_coeff = {} needs scoring_func = sigmoid (the bias is the sigmoid "
              "router's e_score_correction_bias)", c.load_balance_coeff);
  TITAN_CHECK(c.load_balance_coeff >= 0.0, "model config: load_balance_coeff must be >= 0, got {}",
              c.load_balance_coeff);
  TITAN_CHECK(c.router_aux_loss_coef >= 0.0, "model config: router_aux_loss_coef must be >= 0, got {}",
              c.router_aux_loss_coef);
  if (c.scoring_func == "sigmoid")
    TITAN_CHECK(c.num_experts_per_tok <= c.topk_group * (c.num_experts / c.n_group),
                "model config: num_experts_per_tok ({}) exceeds the experts of topk_group ({}) groups of {}",
                c.num_experts_per_tok, c.topk_group, c.num_experts / c.n_group);
  router = register_module("router", std::make_unique<Router>(c, layer_id));
  experts = register_module("experts", std::make_unique<GroupedExperts>(c, layer_id));
  if (c.n_shared_experts > 0)
    shared_experts = register_module(
        "shared_experts",
        std::make_unique<FeedForward>(c.hidden_size, c.n_shared_experts * c.moe_intermediate_size, layer_id));
  if (c.scoring_func == "sigmoid") expert_bias = register_buffer("expert_bias", Tensor::zeros({c.num_experts}));
  reset_stats();
  pending_load_.assign(static_cast<size_t>(E_), 0);
}

void MoE::init_weights(const nn::InitContext& ctx) {
  router->init_weights(ctx);
  experts->init_weights(ctx);
  if (shared_experts) shared_experts->init_weights(ctx);
  if (expert_bias.defined()) nn::InitContext::constant(expert_bias, 0.0);
}

void MoE::repack_for_decode() {
  if (shared_experts) shared_experts->repack_for_decode();
}

void MoE::reset_stats() {
  stats_ = MoEStats{};
  stats_.tokens_per_expert.assign(static_cast<size_t>(E_), 0);
}

Tensor MoE::forward(const Tensor& x, const ForwardBatch& batch, LayerCache*) const {
  const int64_t T = x.size(0), E = E_, K = K_;
  RouterOutput r = router->forward(x, expert_bias);
  // Dispatch: rows sorted by expert, tokens ascending within an expert.
  std::vector<int64_t> counts(static_cast<size_t>(E), 0);
  for (int32_t e : r.experts) ++counts[static_cast<size_t>(e)];
  std::vector<int64_t> offsets(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) offsets[static_cast<size_t>(e + 1)] = offsets[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
  std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1), token_of(static_cast<size_t>(T * K)),
      row_of(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t rw = cursor[static_cast<size_t>(r.experts[static_cast<size_t>(t * K + j)])]++;
      token_of[static_cast<size_t>(rw)] = t;
      row_of[static_cast<size_t>(t * K + j)] = rw;
    }
  Tensor xs = index_select(x, 0, Tensor::from_vector(token_of, {T * K}));
  Tensor combine_w = r.weights;
  if (score_before_experts_) {
    // Llama 4: row rw (token t, choice j) enters its expert as w[t, j] * x_t.
    std::vector<int64_t> choice_of(static_cast<size_t>(T * K));
    for (int64_t i = 0; i < T * K; ++i) choice_of[static_cast<size_t>(row_of[static_cast<size_t>(i)])] = i;
    Tensor wrow = index_select(r.weights.contiguous().view({T * K}), 0, Tensor::from_vector(choice_of, {T * K}));
    xs = mul(xs, wrow.view({T * K, 1}).expand({T * K, x.size(1)}));
    combine_w = Tensor::full({T, K}, 1.0);
  }
  Tensor ys = expert_compute ? expert_compute->forward(xs, offsets) : experts->forward(xs, offsets);
  Tensor out = combine_experts(ys, combine_w, row_of);
  if (shared_experts) out = add(out, shared_experts->forward(x));

  if (batch.routed_experts && static_cast<size_t>(layer_id_) < batch.routed_experts->size())
    (*batch.routed_experts)[static_cast<size_t>(layer_id_)] = Tensor::from_vector(r.experts, {T, K});

  if (!autograd::GradMode::enabled()) return out;
  // Training forward: loads, entropy, and the optional sequence aux loss.
  Tensor sc = r.scores.detach().contiguous();
  const float* s = sc.data<float>();
  double ent = 0;
  for (int64_t t = 0; t < T; ++t) {
    double z = 0, h = 0;
    for (int64_t e = 0; e < E; ++e) z += s[t * E + e];
    for (int64_t e = 0; e < E; ++e) {
      const double p = s[t * E + e] / z;
      if (p > 0) h -= p * std::log(p);
    }
    ent += h;
  }
  for (int64_t e = 0; e < E; ++e) {
    stats_.tokens_per_expert[static_cast<size_t>(e)] += counts[static_cast<size_t>(e)];
    pending_load_[static_cast<size_t>(e)] += counts[static_cast<size_t>(e)];
  }
  stats_.tokens += T;
  stats_.entropy_sum += ent;
  if (aux_coef_ <= 0.0 || batch.is_paged()) return out;

  // Sequence aux loss and its gradient w.r.t. the logits (f held constant).
  std::vector<int32_t> cu = {0, static_cast<int32_t>(T)};
  if (batch.cu_seqlens.defined()) cu = batch.cu_seqlens.to_vector<int32_t>();
  const int64_t S = static_cast<int64_t>(cu.size()) - 1;
  const bool sig = expert_bias.defined();
  std::vector<float> dl(static_cast<size_t>(T * E), 0.0f);
  double aux = 0;
  std::vector<double> f(static_cast<size_t>(E)), P(static_cast<size_t>(E)), gp(static_cast<size_t>(E));
  for (int64_t q = 0; q < S; ++q) {
    const int64_t a = cu[static_cast<size_t>(q)], bnd = cu[static_cast<size_t>(q + 1)], Ts = bnd - a;
    if (Ts <= 0) continue;
    std::fill(f.begin(), f.end(), 0.0);
    std::fill(P.begin(), P.end(), 0.0);
    for (int64_t t = a; t < bnd; ++t) {
      for (int64_t j = 0; j < K; ++j) f[static_cast<size_t>(r.experts[static_cast<size_t>(t * K + j)])] += 1.0;
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += s[t * E + e];
      for (int64_t e = 0; e < E; ++e) P[static_cast<size_t>(e)] += s[t * E + e] / z;
    }
    for (int64_t e = 0; e < E; ++e) {
      f[static_cast<size_t>(e)] *= static_cast<double>(E) / (static_cast<double>(K) * Ts);
      P[static_cast<size_t>(e)] /= static_cast<double>(Ts);
      aux += aux_coef_ * f[static_cast<size_t>(e)] * P[static_cast<size_t>(e)] / S;
    }
    // dL/ds'_{e,t} = alpha f_e / (T_s S); through s' = s / z and the score function.
    for (int64_t t = a; t < bnd; ++t) {
      const float* st = s + t * E;
      double z = 0, dot = 0;
      for (int64_t e = 0; e < E; ++e) z += st[e];
      for (int64_t e = 0; e < E; ++e) {
        gp[static_cast<size_t>(e)] = aux_coef_ * f[static_cast<size_t>(e)] / (static_cast<double>(Ts) * S);
        dot += gp[static_cast<size_t>(e)] * st[e] / z;
      }
      double dsum = 0;  // softmax: Σ ds_e s_e
      std::vector<double> ds(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        ds[static_cast<size_t>(e)] = (gp[static_cast<size_t>(e)] - dot) / z;
        dsum += ds[static_cast<size_t>(e)] * st[e];
      }
      for (int64_t e = 0; e < E; ++e)
        dl[static_cast<size_t>(t * E + e)] = static_cast<float>(
            sig ? ds[static_cast<size_t>(e)] * st[e] * (1.0 - st[e]) : st[e] * (ds[static_cast<size_t>(e)] - dsum));
    }
  }
  stats_.aux_loss_sum += aux;
  stats_.aux_batches += 1;
  return attach_aux_grad(out, r.logits, Tensor::from_vector(dl, {T, E}));
}

void MoE::update_expert_bias(const std::function<void(std::vector<int64_t>&)>& sum_loads) {
  if (load_balance_coeff_ > 0.0 && expert_bias.defined()) {
    if (sum_loads) sum_loads(pending_load_);
    double mean = 0;
    for (int64_t v : pending_load_) mean += static_cast<double>(v);
    mean /= static_cast<double>(E_);
    if (mean > 0) {
      std::vector<double> delta(static_cast<size_t>(E_));
      double dm = 0;
      for (int64_t e = 0; e < E_; ++e) {
        const double diff = mean - static_cast<double>(pending_load_[static_cast<size_t>(e)]);
        delta[static_cast<size_t>(e)] = load_balance_coeff_ * ((diff > 0) - (diff < 0));
        dm += delta[static_cast<size_t>(e)];
      }
      dm /= static_cast<double>(E_);
      std::vector<float> b = expert_bias.to_vector<float>();
      for (int64_t e = 0; e < E_; ++e)
        b[static_cast<size_t>(e)] = static_cast<float>(b[static_cast<size_t>(e)] + (delta[static_cast<size_t>(e)] - dm));
      expert_bias.copy_(Tensor::from_vector(b, {E_}));
    }
  }
  std::fill(pending_load_.begin(), pending_load_.end(), 0);
}

}  // namespace titan::models
