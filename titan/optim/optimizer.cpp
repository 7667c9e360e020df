#include "titan/optim/optimizer.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "titan/core/error.h"
#include "titan/optim/grad_clip.h"

namespace titan::optim {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_hyper(const OptimizerConfig& c) {
  auto in01 = [](double x) { return x >= 0.0 && x < 1.0; };
  TITAN_CHECK(c.lr >= 0.0, "Optimizer: optimizer.lr must be >= 0, got {}", c.lr);
  TITAN_CHECK(in01(c.beta1), "Optimizer: optimizer.beta1 must be in [0, 1), got {}", c.beta1);
  TITAN_CHECK(in01(c.beta2), "Optimizer: optimizer.beta2 must be in [0, 1), got {}", c.beta2);
  TITAN_CHECK(c.eps >= 0.0, "Optimizer: optimizer.eps must be >= 0, got {}", c.eps);
  TITAN_CHECK(c.weight_decay >= 0.0, "Optimizer: optimizer.weight_decay must be >= 0, got {}",
              c.weight_decay);
  TITAN_CHECK(c.muon_lr >= 0.0, "Optimizer: optimizer.muon_lr must be >= 0, got {}", c.muon_lr);
  TITAN_CHECK(in01(c.muon_momentum), "Optimizer: optimizer.muon_momentum must be in [0, 1), got {}",
              c.muon_momentum);
  TITAN_CHECK(c.muon_ns_steps >= 1, "Optimizer: optimizer.muon_ns_steps must be >= 1, got {}",
              c.muon_ns_steps);
}

Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::empty({}, DType::i64);
  *t.data<int64_t>() = v;
  return t;
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamRef> params, const OptimizerConfig& cfg) : cfg_(cfg) {
  const std::string name = lower(cfg.name);
  TITAN_CHECK(name == "adamw" || name == "muon",
              "Optimizer: optimizer.name '{}' is not known (expected adamw or muon)", cfg.name);
  check_hyper(cfg);
  const bool use_muon = name == "muon";
  adamw_ = {cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
  muon_.momentum = cfg.muon_momentum;
  muon_.nesterov = cfg.muon_nesterov;
  muon_.ns_steps = cfg.muon_ns_steps;
  muon_.adjust_lr = parse_muon_adjust_lr(cfg.muon_adjust_lr);

  groups_ = {{"adamw_decay", UpdateRule::adamw, cfg.lr, cfg.lr, cfg.weight_decay, {}},
             {"adamw_no_decay", UpdateRule::adamw, cfg.lr, cfg.lr, 0.0, {}},
             {"muon", UpdateRule::muon, 0, 0, cfg.weight_decay, {}}};
  groups_[2].base_lr = groups_[2].lr = cfg.muon_lr > 0.0 ? cfg.muon_lr : cfg.lr;
  std::set<std::string> seen;
  params_.reserve(params.size());
  for (ParamRef& p : params) {
    TITAN_CHECK(!p.name.empty(), "Optimizer: a parameter has an empty name");
    TITAN_CHECK(seen.insert(p.name).second, "Optimizer: parameter '{}' is listed twice", p.name);
    TITAN_CHECK(p.param.defined(), "Optimizer: parameter '{}' is an undefined tensor", p.name);
    TITAN_CHECK(p.param.dtype() == DType::f32, "Optimizer: parameter '{}' has dtype {}, expected f32",
                p.name, dtype_name(p.param.dtype()));
    TITAN_CHECK(p.param.is_contiguous(), "Optimizer: parameter '{}' is not contiguous", p.name);
    const ParamKind kind = classify_param(p.name, p.param.shape());
    size_t g = 0;
    if (use_muon && is_muon_eligible(kind, p.param.dim())) g = 2;
    else if (!gets_weight_decay(kind, p.param.dim(), cfg.decay)) g = 1;
    params_.push_back({std::move(p), kind, groups_[g].rule, g, 0, {}, {}, {}});
  }
  for (size_t i = 0; i < params_.size(); ++i) groups_[params_[i].group].params.push_back(i);
  // Drop empty groups, renumbering the parameters' group indices.
  std::vector<Group> kept;
  for (Group& g : groups_) {
    if (g.params.empty()) continue;
    for (size_t i : g.params) params_[i].group = kept.size();
    kept.push_back(std::move(g));
  }
  groups_ = std::move(kept);
}

void Optimizer::set_lr(size_t group, double lr) {
  TITAN_CHECK(group < groups_.size(), "Optimizer::set_lr: group {} out of range ({} groups)", group,
              groups_.size());
  TITAN_CHECK(lr >= 0.0, "Optimizer::set_lr: lr must be >= 0, got {}", lr);
  groups_[group].lr = lr;
}

std::vector<ParamRef> Optimizer::param_refs() const {
  std::vector<ParamRef> out;
  out.reserve(params_.size());
  for (const Param& p : params_) out.push_back(p.ref);
  return out;
}

void Optimizer::step() {
  // Check every gradient first, so a bad one leaves all parameters untouched.
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    Tensor g = p.ref.param.grad();
    if (!g.defined()) continue;
    TITAN_CHECK(g.dtype() == DType::f32, "Optimizer.step: gradient of '{}' has dtype {}, expected f32",
                p.ref.name, dtype_name(g.dtype()));
    TITAN_CHECK(g.shape() == p.ref.param.shape(),
                "Optimizer.step: gradient of '{}' has shape {}, expected {} (the parameter's)",
                p.ref.name, shape_str(g.shape()), shape_str(p.ref.param.shape()));
    grads[i] = g.contiguous();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    Param& p = params_[i];
    const Group& grp = groups_[p.group];
    const Shape& shape = p.ref.param.shape();
    float* w = p.ref.param.data<float>();
    const float* g = grads[i].data<float>();
    ++p.step;
    if (p.rule == UpdateRule::adamw) {
      if (!p.exp_avg.defined()) {
        p.exp_avg = Tensor::zeros(shape);
        p.exp_avg_sq = Tensor::zeros(shape);
      }
      AdamWHyper h = adamw_;
      h.lr = grp.lr;
      h.weight_decay = grp.weight_decay;
      adamw_step(w, p.exp_avg.data<float>(), p.exp_avg_sq.data<float>(), g, p.ref.param.numel(),
                 p.step, h);
    } else {
      if (!p.momentum_buffer.defined()) p.momentum_buffer = Tensor::zeros(shape);
      MuonHyper h = muon_;
      h.lr = grp.lr;
      h.weight_decay = grp.weight_decay;
      muon_step(w, p.momentum_buffer.data<float>(), g, shape[0], shape[1], h, ws_);
    }
  }
  ++num_steps_;
}

void Optimizer::zero_grad(bool set_to_none) { optim::zero_grad(param_refs(), set_to_none); }

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("step", i64_scalar(num_steps_));
  for (const Param& p : params_) {
    if (p.step == 0) continue;
    out.emplace_back(p.ref.name + ".step", i64_scalar(p.step));
    if (p.rule == UpdateRule::adamw) {
      out.emplace_back(p.ref.name + ".exp_avg", p.exp_avg);
      out.emplace_back(p.ref.name + ".exp_avg_sq", p.exp_avg_sq);
    } else {
      out.emplace_back(p.ref.name + ".momentum_buffer", p.momentum_buffer);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  const char* fn = "Optimizer.load_state_dict";
  std::map<std::string, Tensor> m;
  for (const auto& [k, t] : state) {
    TITAN_CHECK(m.emplace(k, t).second, "{}: key '{}' appears twice", fn, k);
    TITAN_CHECK(t.defined(), "{}: key '{}' is an undefined tensor", fn, k);
  }
  auto read_count = [&](const std::string& key) {
    const Tensor& t = m.at(key);
    TITAN_CHECK(t.dtype() == DType::i64 && t.numel() == 1 && t.dim() <= 1,
                "{}: '{}' must be an i64 scalar, got {} {}", fn, key, dtype_name(t.dtype()),
                shape_str(t.shape()));
    const int64_t v = t.item<int64_t>();
    TITAN_CHECK(v >= 0, "{}: '{}' is negative ({})", fn, key, v);
    return v;
  };
  // Each parameter's keys, by its update rule.
  auto fields_of = [](const Param& p) -> std::vector<std::string> {
    if (p.rule == UpdateRule::adamw) return {"step", "exp_avg", "exp_avg_sq"};
    return {"step", "momentum_buffer"};
  };
  std::set<std::string> expected = {"step"};
  for (const Param& p : params_)
    for (const auto& f : fields_of(p)) expected.insert(p.ref.name + "." + f);
  for (const auto& [k, t] : m)
    TITAN_CHECK(expected.count(k),
                "{}: unknown key '{}' (no such parameter, or a state its update rule lacks)", fn, k);
  TITAN_CHECK(m.count("step"), "{}: key 'step' is missing", fn);
  const int64_t num_steps = read_count("step");

  struct Loaded { int64_t step = 0; Tensor a, b; };  // a: exp_avg | momentum_buffer, b: exp_avg_sq
  std::vector<Loaded> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    const std::vector<std::string> fields = fields_of(p);
    size_t present = 0;
    for (const auto& f : fields) present += m.count(p.ref.name + "." + f);
    if (present == 0) continue;
    for (const auto& f : fields)
      TITAN_CHECK(m.count(p.ref.name + "." + f), "{}: key '{}.{}' is missing ({} of {} keys of '{}' present)",
                  fn, p.ref.name, f, present, fields.size(), p.ref.name);
    loaded[i].step = read_count(p.ref.name + ".step");
    TITAN_CHECK(loaded[i].step >= 1, "{}: '{}.step' is 0 but the parameter has state", fn, p.ref.name);
    for (size_t f = 1; f < fields.size(); ++f) {
      const std::string key = p.ref.name + "." + fields[f];
      const Tensor& t = m.at(key);
      TITAN_CHECK(t.dtype() == DType::f32 && t.shape() == p.ref.param.shape(),
                  "{}: '{}' is {} {}, expected f32 {}", fn, key, dtype_name(t.dtype()),
                  shape_str(t.shape()), shape_str(p.ref.param.shape()));
      (f == 1 ? loaded[i].a : loaded[i].b) = t;
    }
  }
  // Everything checked: commit.
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    p.step = loaded[i].step;
    p.exp_avg = p.exp_avg_sq = p.momentum_buffer = Tensor();
    if (p.step == 0) continue;
    if (p.rule == UpdateRule::adamw) {
      p.exp_avg = loaded[i].a.clone();
      p.exp_avg_sq = loaded[i].b.clone();
    } else {
      p.momentum_buffer = loaded[i].a.clone();
    }
  }
  num_steps_ = num_steps;
}

}  // namespace titan::optim
