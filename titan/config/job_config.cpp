#include "titan/config/job_config.h"

#include <algorithm>
#include <cmath>

#include "titan/config/limits.h"
#include "titan/core/error.h"

namespace titan::config {

namespace {

template <class T>
void positive(T v, const char* key) {
  TITAN_CHECK(v > 0, "{}={} must be > 0", key, v);
}
template <class T>
void non_negative(T v, const char* key) {
  TITAN_CHECK(v >= 0, "{}={} must be >= 0", key, v);
}
void in_unit(double v, const char* key, bool closed_right) {
  TITAN_CHECK(v >= 0.0 && (closed_right ? v <= 1.0 : v < 1.0), "{}={} must be in [0, 1{}", key, v,
              closed_right ? "]" : ")");
}

template <class T>
void at_most(T v, int64_t limit, const char* key) {
  TITAN_CHECK(static_cast<int64_t>(v) <= limit, "{}={} exceeds the limit of {}", key, v, limit);
}

void validate_model(const ModelConfig& m) {
  positive(m.dim, "model.dim");
  positive(m.n_layers, "model.n_layers");
  positive(m.n_heads, "model.n_heads");
  non_negative(m.n_kv_heads, "model.n_kv_heads");
  non_negative(m.head_dim, "model.head_dim");
  non_negative(m.vocab_size, "model.vocab_size");
  positive(m.ffn_hidden_dim, "model.ffn_hidden_dim");
  at_most(m.dim, kMaxHiddenSize, "model.dim");
  at_most(m.n_layers, kMaxLayers, "model.n_layers");
  at_most(m.n_heads, kMaxHeads, "model.n_heads");
  at_most(m.n_kv_heads, kMaxHeads, "model.n_kv_heads");
  at_most(m.head_dim, kMaxHeadDim, "model.head_dim");
  at_most(m.vocab_size, kMaxVocabSize, "model.vocab_size");
  at_most(m.ffn_hidden_dim, kMaxIntermediateSize, "model.ffn_hidden_dim");
  TITAN_CHECK(m.rope_theta > 0.0, "model.rope_theta={} must be > 0", m.rope_theta);
  TITAN_CHECK(m.norm_eps > 0.0, "model.norm_eps={} must be > 0", m.norm_eps);
  if (m.head_dim == 0)
    TITAN_CHECK(m.dim % m.n_heads == 0, "model.dim={} must be divisible by model.n_heads={} when model.head_dim=0",
                m.dim, m.n_heads);
  const int kv = effective_n_kv_heads(m);
  TITAN_CHECK(m.n_heads % kv == 0, "model.n_heads={} must be a multiple of model.n_kv_heads={}", m.n_heads, kv);
  TITAN_CHECK(effective_head_dim(m) % 2 == 0, "model head_dim={} must be even (RoPE rotates pairs)",
              effective_head_dim(m));
}

void validate_training(const JobConfig& c) {
  const TrainingConfig& t = c.training;
  TITAN_CHECK(!t.dataset_path.empty() || (t.dataset != "text" && t.dataset != "jsonl"),
              "training.dataset_path is empty (training.dataset={} reads a file)", t.dataset);
  positive(t.seq_len, "training.seq_len");
  positive(t.local_batch_size, "training.local_batch_size");
  non_negative(t.global_batch_size, "training.global_batch_size");
  non_negative(t.steps, "training.steps");
  non_negative(t.max_norm, "training.max_norm");
  TITAN_CHECK(t.host_cache_mb >= 0 && t.host_cache_mb <= (int64_t{1} << 30),
              "training.host_cache_mb={} must be in [0, 2^30] (MiB)", t.host_cache_mb);
  // The data-parallel degree of one rank's view: data_parallel_shard_degree = -1 counts
  // as 1 here (a necessary condition); ParallelDims repeats the check with the world size.
  const int64_t dp = dp_degree(c);
  int64_t per_micro = 0;
  TITAN_CHECK(!__builtin_mul_overflow(t.local_batch_size, dp, &per_micro),
              "training.local_batch_size={} × data-parallel degree {} overflows int64", t.local_batch_size, dp);
  TITAN_CHECK(effective_global_batch_size(c) % per_micro == 0,
              "training.global_batch_size={} must be a multiple of training.local_batch_size × "
              "data-parallel degree = {}",
              t.global_batch_size, per_micro);
  const ValidationConfig& v = c.validation;
  positive(v.freq, "validation.freq");
  non_negative(v.steps, "validation.steps");
  in_unit(v.split_fraction, "validation.split_fraction", false);
  TITAN_CHECK(!v.enabled || v.split_fraction > 0.0,
              "validation.enabled=true needs validation.split_fraction > 0 (got {})", v.split_fraction);
}

void validate_optim(const JobConfig& c) {
  const OptimizerConfig& o = c.optimizer;
  non_negative(o.lr, "optimizer.lr");
  in_unit(o.beta1, "optimizer.beta1", false);
  in_unit(o.beta2, "optimizer.beta2", false);
  TITAN_CHECK(o.eps > 0.0, "optimizer.eps={} must be > 0", o.eps);
  non_negative(o.weight_decay, "optimizer.weight_decay");
  in_unit(o.muon_momentum, "optimizer.muon_momentum", false);
  positive(o.muon_ns_steps, "optimizer.muon_ns_steps");
  const LRSchedulerConfig& s = c.lr_scheduler;
  non_negative(s.warmup_steps, "lr_scheduler.warmup_steps");
  in_unit(s.decay_ratio, "lr_scheduler.decay_ratio", true);
  non_negative(s.min_lr, "lr_scheduler.min_lr");
  TITAN_CHECK(s.min_lr <= o.lr, "lr_scheduler.min_lr={} must be <= optimizer.lr={}", s.min_lr, o.lr);
}

void validate_io(const JobConfig& c) {
  const CheckpointConfig& k = c.checkpoint;
  TITAN_CHECK(!k.folder.empty(), "checkpoint.folder is empty");
  positive(k.interval, "checkpoint.interval");
  non_negative(k.keep_latest_k, "checkpoint.keep_latest_k");
  positive(c.metrics.log_freq, "metrics.log_freq");
  TITAN_CHECK(c.metrics.peak_flops >= 0.0 && std::isfinite(c.metrics.peak_flops),
              "metrics.peak_flops={} must be finite and >= 0 (0 = auto)", c.metrics.peak_flops);
}

void validate_generator(const GeneratorConfig& g) {
  positive(g.kv_cache_bytes, "generator.kv_cache_bytes");
  TITAN_CHECK(g.host_cache_bytes >= -1,
              "generator.host_cache_bytes={} must be >= -1 (-1 = auto, 0 = none)",
              g.host_cache_bytes);
  positive(g.kv_block_size, "generator.kv_block_size");
  positive(g.max_num_seqs, "generator.max_num_seqs");
  positive(g.max_num_batched_tokens, "generator.max_num_batched_tokens");
  non_negative(g.temperature, "generator.temperature");
  TITAN_CHECK(g.top_p > 0.0 && g.top_p <= 1.0, "generator.top_p={} must be in (0, 1]", g.top_p);
  non_negative(g.top_k, "generator.top_k");
  in_unit(g.min_p, "generator.min_p", true);
  positive(g.max_tokens, "generator.max_tokens");
}

void validate_parallelism(const ParallelismConfig& p) {
  positive(p.data_parallel_replicate_degree, "parallelism.data_parallel_replicate_degree");
  TITAN_CHECK(p.data_parallel_shard_degree == -1 || p.data_parallel_shard_degree >= 1,
              "parallelism.data_parallel_shard_degree={} must be -1 (the rest of the world) or >= 1",
              p.data_parallel_shard_degree);
  positive(p.tensor_parallel_degree, "parallelism.tensor_parallel_degree");
  positive(p.pipeline_parallel_degree, "parallelism.pipeline_parallel_degree");
  positive(p.context_parallel_degree, "parallelism.context_parallel_degree");
  positive(p.expert_parallel_degree, "parallelism.expert_parallel_degree");
  positive(p.pipeline_parallel_microbatch_size, "parallelism.pipeline_parallel_microbatch_size");
  const std::string& s = p.pipeline_parallel_schedule;
  TITAN_CHECK(s == "GPipe" || s == "1F1B" || s == "Interleaved1F1B",
              "parallelism.pipeline_parallel_schedule='{}' is not one of: GPipe, 1F1B, Interleaved1F1B", s);
  const std::string& r = p.fsdp_reshard_after_forward;
  TITAN_CHECK(r == "default" || r == "always" || r == "never",
              "parallelism.fsdp_reshard_after_forward='{}' is not one of: default, always, never", r);
}

void validate_rl(const RLConfig& r) {
  positive(r.group_size, "rl.group_size");
  positive(r.rollouts_per_step, "rl.rollouts_per_step");
  TITAN_CHECK(r.rollouts_per_step % r.group_size == 0,
              "rl.rollouts_per_step={} must be a multiple of rl.group_size={}", r.rollouts_per_step, r.group_size);
  non_negative(r.max_offpolicy_steps, "rl.max_offpolicy_steps");
  non_negative(r.epsilon_low, "rl.epsilon_low");
  non_negative(r.epsilon_high, "rl.epsilon_high");
  non_negative(r.kl_coef, "rl.kl_coef");
  non_negative(r.overlong_buffer_len, "rl.overlong_buffer_len");
  non_negative(r.overlong_penalty_factor, "rl.overlong_penalty_factor");
  non_negative(r.val_freq, "rl.val_freq");
  positive(r.max_turns, "rl.max_turns");
  positive(r.max_total_tokens, "rl.max_total_tokens");
  non_negative(r.val_samples, "rl.val_samples");
  positive(r.microbatch_tokens, "rl.microbatch_tokens");
  positive(r.max_sampling_rounds, "rl.max_sampling_rounds");
  in_unit(r.max_error_fraction, "rl.max_error_fraction", true);
  positive(r.num_generators, "rl.num_generators");
}

// Every floating-point field, wherever it is: NaN and infinities are refused by name
// (the range checks above let +inf through, and a NaN compares false everywhere).
void validate_finite(const JobConfig& c) {
  JobConfig copy = c;
  for (const FieldRef& f : reflect(copy).fields) {
    if (f.kind == FieldKind::f64) {
      const double v = *static_cast<const double*>(f.ptr);
      TITAN_CHECK(std::isfinite(v), "{}={} must be a finite number", f.path, v);
    } else if (f.kind == FieldKind::f64_list) {
      for (double v : *static_cast<const std::vector<double>*>(f.ptr))
        TITAN_CHECK(std::isfinite(v), "{}: {} is not a finite number", f.path, v);
    }
  }
}

}  // namespace

int64_t dp_degree(const JobConfig& c, int world_size) {
  const ParallelismConfig& p = c.parallelism;
  const int64_t replicate = std::max(p.data_parallel_replicate_degree, 1);
  int64_t shard = p.data_parallel_shard_degree;
  if (shard < 1) {
    const int64_t others = replicate * std::max(p.tensor_parallel_degree, 1) *
                           std::max(p.pipeline_parallel_degree, 1) * std::max(p.context_parallel_degree, 1);
    shard = std::max<int64_t>(1, world_size / others);
  }
  return replicate * shard;
}

int64_t effective_global_batch_size(const JobConfig& c, int world_size) {
  return c.training.global_batch_size ? c.training.global_batch_size
                                      : c.training.local_batch_size * dp_degree(c, world_size);
}

int64_t grad_accum_steps(const JobConfig& c, int world_size) {
  return effective_global_batch_size(c, world_size) / (c.training.local_batch_size * dp_degree(c, world_size));
}

void validate(const JobConfig& c) {
  validate_finite(c);
  validate_parallelism(c.parallelism);
  validate_model(c.model);
  validate_training(c);
  validate_optim(c);
  validate_io(c);
  validate_generator(c.generator);
  validate_rl(c.rl);
  TITAN_CHECK(c.rl.overlong_buffer_len <= c.generator.max_tokens,
              "rl.overlong_buffer_len={} must be <= generator.max_tokens={} (the penalty ramps in over the "
              "last overlong_buffer_len tokens before max_tokens; 0 = off)",
              c.rl.overlong_buffer_len, c.generator.max_tokens);
}

}  // namespace titan::config
