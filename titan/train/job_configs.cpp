// The job config's [model], [optimizer] and [lr_scheduler] sections turned into the
// model, optimizer and LR-schedule configs (declared in trainer.h).
#include <algorithm>

#include "titan/config/resolve.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/core/error.h"
#include "titan/models/family.h"
#include "titan/train/trainer.h"

namespace titan::train {

models::TransformerConfig model_config_from_job(const config::JobConfig& job, int64_t tok_vocab) {
  const auto& m = job.model;
  models::TransformerConfig c;
  if (!m.hf_config.empty()) {
    c = models::config_from_hf(load_hf_config(config::resolve_data_path(m.hf_config)));
  } else {
    c.family = m.name;
    c.vocab_size = m.vocab_size > 0 ? m.vocab_size : tok_vocab;
    c.hidden_size = m.dim;
    c.intermediate_size = m.ffn_hidden_dim;
    c.num_hidden_layers = m.n_layers;
    c.num_attention_heads = m.n_heads;
    c.num_key_value_heads = config::effective_n_kv_heads(m);
    c.head_dim = config::effective_head_dim(m);
    c.rope_theta = m.rope_theta;
    c.rms_norm_eps = m.norm_eps;
    c.tie_word_embeddings = m.tie_embeddings;
    c.qk_norm = m.qk_norm;
    c.max_position_embeddings = std::max<int64_t>(job.training.seq_len, 64);
  }
  TITAN_CHECK(c.vocab_size >= tok_vocab,
              "model.vocab_size={} is smaller than the tokenizer's vocabulary ({})", c.vocab_size, tok_vocab);
  TITAN_CHECK(job.training.seq_len <= c.max_position_embeddings,
              "training.seq_len={} is longer than the model's context ({} positions)", job.training.seq_len,
              c.max_position_embeddings);
  c.validate();
  // The model's f32 weights alone (a lower bound of what building it allocates)
  // must fit in this host's memory; computed in double so that no size overflows.
  const double D = c.hidden_size, L = c.num_hidden_layers, Dh = c.head_dim;
  const double params = c.vocab_size * D * (c.tie_word_embeddings ? 1 : 2) +
                        L * (2 * D * c.num_attention_heads * Dh + 2 * D * c.num_key_value_heads * Dh +
                             3 * D * c.intermediate_size);
  const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  TITAN_CHECK(ram <= 0 || 4 * params <= ram,
              "model: {} layers x hidden size {} make {:.3g} parameters, {:.1f} GiB of f32 weights alone, more "
              "than this host's {:.1f} GiB of memory",
              c.num_hidden_layers, c.hidden_size, params, 4 * params / (1 << 30), ram / (1 << 30));
  return c;
}

optim::OptimizerConfig optimizer_config_from_job(const config::JobConfig& job) {
  const auto& o = job.optimizer;
  optim::OptimizerConfig c;
  c.name = o.name == config::OptimizerName::muon ? "muon" : "adamw";
  c.lr = o.lr;
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.eps = o.eps;
  c.weight_decay = o.weight_decay;
  c.decay.decay_norms = !o.no_decay_norms;
  c.decay.decay_biases = !o.no_decay_biases;
  c.decay.decay_embeddings = !o.no_decay_embeddings;
  c.decay.decay_output = !o.no_decay_embeddings || !job.model.tie_embeddings;
  c.muon_momentum = o.muon_momentum;
  c.muon_nesterov = o.muon_nesterov;
  c.muon_ns_steps = o.muon_ns_steps;
  c.muon_adjust_lr = o.muon_adjust_lr == config::MuonAdjustLr::original ? "original" : "match_rms_adamw";
  return c;
}

optim::LRSchedulerConfig lr_config_from_job(const config::JobConfig& job) {
  const auto& s = job.lr_scheduler;
  optim::LRSchedulerConfig c;
  c.warmup_steps = s.warmup_steps;
  c.min_lr = s.min_lr;
  switch (s.decay_type) {
    case config::DecayType::cosine:  // nanoGPT's warmup + cosine to min_lr at training.steps
      c.name = "warmup_cosine";
      c.lr_decay_iters = job.training.steps;
      TITAN_CHECK(job.training.steps > s.warmup_steps,
                  "lr_scheduler.warmup_steps={} must be < training.steps={} with lr_scheduler.decay_type=cosine "
                  "(warmup, then cosine to min_lr at training.steps); lower lr_scheduler.warmup_steps",
                  s.warmup_steps, job.training.steps);
      break;
    case config::DecayType::linear: c.name = "linear"; break;
    case config::DecayType::wsd:
      c.name = "wsd";
      c.decay_ratio = s.decay_ratio;
      break;
    case config::DecayType::constant: c.name = "constant"; break;
  }
  return c;
}

}  // namespace titan::train
