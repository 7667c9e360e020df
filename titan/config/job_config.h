// JobConfig: the typed configuration of a titan.cpp run, in TorchTitan's sections
// (DESIGN.md §4). Each section lists its fields once, X(type, name, default, doc);
// adding a field is adding one line (see titan/config/reflect.h). Recipes
// (recipes.h) fill a whole JobConfig; TOML files and --section.field=value
// overrides change single fields (resolve.h).
//
// Conventions: counts are steps/tokens/rows as named; 0 in a "0 = ..." field means
// the stated automatic value (use the effective_* helpers below). Paths that name
// input data (dataset_path, tokenizer_path) are resolved with resolve_data_path().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/config/reflect.h"

namespace titan::config {

TITAN_CONFIG_ENUM(ComputeDType, f32, bf16)
TITAN_CONFIG_ENUM(ActivationCheckpoint, none, full)
TITAN_CONFIG_ENUM(ModelInit, family, gpt2)
TITAN_CONFIG_ENUM(OptimizerName, adamw, muon)
TITAN_CONFIG_ENUM(MuonAdjustLr, original, match_rms_adamw)
TITAN_CONFIG_ENUM(DecayType, cosine, linear, wsd, constant)
TITAN_CONFIG_ENUM(AsyncMode, disabled, async)
TITAN_CONFIG_ENUM(RLAlgorithm, grpo, dapo)

// fp32 peak FLOP/s per core of the machine classes the kernels were measured on; the
// MFU denominator (times the job's threads) when metrics.peak_flops is 0 (auto), picked
// by the ISA the kernels run (kernels::cpu::cpu_isa()). Each thread runs 12 independent
// FMA chains, timed by its own CPU time; two threads at once sum to twice one.
// Method and program: docs/benchmarks-history.md, section "config: fp32 peak FLOP/s".
//  - AVX2: AMD EPYC Zen3, 91-94 GFLOP/s per core (2 FMA pipes x 8 lanes x 2 x ~2.9 GHz);
//  - AVX-512: AMD EPYC Zen5, 258-261 GFLOP/s per core (2 pipes x 16 lanes x 2 x ~4.1 GHz).
inline constexpr double kPeakFlopsPerCoreAvx2 = 91.5e9;
inline constexpr double kPeakFlopsPerCoreAvx512 = 259.5e9;

#define TITAN_JOB_FIELDS(X)                                                                              \
  X(std::string, dump_folder, "", "output directory (checkpoints, metrics.jsonl, config.toml); empty = outputs/<recipe>") \
  X(std::string, description, "", "one line saying what this run is")

#define TITAN_MODEL_FIELDS(X)                                                                            \
  X(std::string, name, "llama3", "model family, e.g. llama3 | qwen3 (looked up in the model registry)")  \
  X(std::string, flavor, "debugmodel", "preset the shape fields below came from; the shape fields are what is built") \
  X(std::string, hf_config, "", "Hugging Face config.json; when set, the model shape is read from it instead of the fields below") \
  X(std::string, tokenizer_path, "", "HF tokenizer.json or SentencePiece .model; empty = byte-level tokens (V=256)") \
  X(std::vector<std::string>, transforms, {}, "model-config transforms applied in order after recipe, TOML and CLI (titan train --list-transforms)") \
  X(std::vector<std::string>, overrides, {}, "component overrides component=impl[:glob of module paths], e.g. attention=reference:layers.0.* (titan train --list-overrides); resolved to component=impl:glob") \
  X(std::vector<std::string>, applied_transforms, {}, "transforms already applied to this config, in order (recorded by resolve_config, not re-run)") \
  X(ComputeDType, compute_dtype, ComputeDType::f32, "compute dtype of matmul inputs and activations (f32 accumulation; master weights stay f32)") \
  X(int64_t, vocab_size, 0, "vocabulary size V (embedding and lm_head rows); 0 = the tokenizer's size") \
  X(int64_t, dim, 256, "model width D")                                                                  \
  X(int, n_layers, 6, "number of decoder layers")                                                        \
  X(int, n_heads, 8, "query heads H")                                                                    \
  X(int, n_kv_heads, 0, "key/value heads Hkv (grouped-query attention); 0 = n_heads")                     \
  X(int, head_dim, 0, "per-head width Dh; 0 = dim / n_heads")                                            \
  X(int64_t, ffn_hidden_dim, 768, "SwiGLU hidden width F")                                               \
  X(double, rope_theta, 10000.0, "RoPE base frequency")                                                  \
  X(double, norm_eps, 1e-5, "RMSNorm epsilon")                                                           \
  X(bool, tie_embeddings, false, "lm_head shares the token-embedding matrix")                            \
  X(bool, qk_norm, false, "RMSNorm on each query and key head before RoPE (Qwen3)")                   \
  X(ModelInit, init, ModelInit::family, "parameter init: family = TorchTitan's for model.name | gpt2 = nanoGPT's normal(0.02), residual outputs 0.02/sqrt(2L)")

#define TITAN_TRAINING_FIELDS(X)                                                                   \
  X(std::string, dataset, "text",                                                                  \
    "dataset format of dataset_path: text = one UTF-8 file read as a single token stream; "        \
    "rl_task_sft = demonstrations of training.task (loss on assistant tokens)")                    \
  X(std::string, dataset_path, "tinyshakespeare/input.txt",                                        \
    "dataset file; relative paths: current dir, then the shared data dir")                         \
  X(int64_t, seq_len, 256, "tokens per training row (context length T)")                           \
  X(int64_t, local_batch_size, 8, "rows per microbatch on each data-parallel rank")                \
  X(int64_t, global_batch_size, 0,                                                                 \
    "rows per optimizer step over all ranks (multiple of local × dp; more = grad accumulation); " \
    "0 = local × dp")                                                                              \
  X(int64_t, steps, 1000, "number of optimizer steps")                                             \
  X(double, max_norm, 1.0, "clip the global gradient L2 norm to this value; 0 = no clipping")      \
  X(int64_t, seed, 42, "seed of parameter init and data order (Philox key)")                       \
  X(bool, skip_nonfinite_steps, false,                                                             \
    "a step whose loss or gradient norm is NaN/inf makes no update and the run goes on; "         \
    "false = the run stops with an error naming the step (the last checkpoint stays as it was)")  \
  X(ActivationCheckpoint, activation_checkpoint, ActivationCheckpoint::none,                       \
    "recompute activations in backward: none | full (per layer)")                                  \
  X(int64_t, host_cache_mb, 2048,                                                                  \
    "MiB of freed host blocks (>= 1 MiB each) kept for reuse by the next steps instead of fresh "  \
    "zero pages (titan/core/host_alloc.h); 0 = off")                                               \
  X(std::string, task, "",                                                                         \
    "dataset rl_task_sft: the RL task whose demonstrations are the data (alphabet_sort | gsm8k | " \
    "mbpp | humaneval)")                                                                           \
  X(std::string, task_config, "",                                                                  \
    "dataset rl_task_sft: JSON object of task settings for make_task, e.g. {\"max_names\": 4}; "   \
    "empty = defaults")

#define TITAN_VALIDATION_FIELDS(X)                                                                       \
  X(bool, enabled, true, "evaluate the loss on the validation split during training")                   \
  X(int64_t, freq, 250, "evaluate every this many optimizer steps (and after the last)")                \
  X(int64_t, steps, 20, "batches per evaluation (each local_batch_size × seq_len); 0 = the whole split") \
  X(double, split_fraction, 0.1, "fraction of the dataset held out for validation, taken from its end")

#define TITAN_OPTIMIZER_FIELDS(X)                                                                        \
  X(OptimizerName, name, OptimizerName::adamw, "adamw | muon (Muon on 2-D hidden weights, AdamW on the rest)") \
  X(double, lr, 3e-4, "peak learning rate (after warmup)")                                               \
  X(double, beta1, 0.9, "AdamW first-moment decay")                                                      \
  X(double, beta2, 0.95, "AdamW second-moment decay")                                                    \
  X(double, eps, 1e-8, "AdamW denominator epsilon")                                                      \
  X(double, weight_decay, 0.1, "decoupled weight decay (AdamW style, multiplied by lr)")                 \
  X(bool, no_decay_norms, true, "exclude norm weights from weight decay")                               \
  X(bool, no_decay_biases, true, "exclude biases from weight decay")                                    \
  X(bool, no_decay_embeddings, false, "exclude token embeddings (and a tied lm_head) from weight decay") \
  X(double, muon_momentum, 0.95, "Muon momentum coefficient")                                           \
  X(bool, muon_nesterov, true, "Muon uses Nesterov momentum")                                           \
  X(int, muon_ns_steps, 5, "Newton–Schulz iterations orthogonalising each Muon update")                 \
  X(MuonAdjustLr, muon_adjust_lr, MuonAdjustLr::match_rms_adamw, "Muon lr scaling: original (sqrt(max(1, rows/cols))) | match_rms_adamw (0.2 sqrt(max(rows, cols)))")

#define TITAN_LR_SCHEDULER_FIELDS(X)                                                                     \
  X(int64_t, warmup_steps, 100, "linear warmup from 0 to optimizer.lr over this many steps")             \
  X(DecayType, decay_type, DecayType::cosine, "after warmup: cosine | linear | wsd (stable, then linear over decay_ratio) | constant") \
  X(double, decay_ratio, 0.2, "wsd only: fraction of training.steps spent in the final decay")           \
  X(double, min_lr, 0.0, "learning rate reached at training.steps (absolute, not a factor)")

#define TITAN_CHECKPOINT_FIELDS(X)                                                                       \
  X(bool, enable, false, "save training-state checkpoints")                                              \
  X(std::string, folder, "checkpoint", "checkpoint directory, relative to job.dump_folder")               \
  X(int64_t, interval, 500, "save every this many steps (and after the last)")                           \
  X(int64_t, keep_latest_k, 3, "keep only the newest k checkpoints; 0 = keep all")                      \
  X(bool, resume, true, "resume from the newest complete checkpoint in folder if there is one")          \
  X(AsyncMode, async_mode, AsyncMode::disabled, "disabled | async (write in a background thread after a snapshot)") \
  X(bool, export_hf, false, "also write the final weights as Hugging Face safetensors")                 \
  X(std::string, initial_load_path, "", "titan train: a Hugging Face export folder (config.json + model.safetensors) whose weights replace the initial ones before step 0, e.g. a previous run's <dump>/hf (TorchTitan's initial_load_path); its config must match the model's shape; a resumed checkpoint wins; empty = init from training.seed")

#define TITAN_METRICS_FIELDS(X)                                                                \
  X(int64_t, log_freq, 10, "print a console line every this many steps")                       \
  X(bool, jsonl, true, "append one JSON object per step to <dump_folder>/metrics.jsonl")       \
  X(bool, enable_tensorboard, false,                                                           \
    "also write every metrics.jsonl key as a TensorBoard scalar to <dump_folder>/<save_tb_folder>") \
  X(std::string, save_tb_folder, "tb", "TensorBoard event folder under dump_folder")           \
  X(double, peak_flops, 0.0,                                                                   \
    "peak FLOP/s of the whole job for MFU; 0 = auto: the measured fp32 peak per core for the " \
    "kernels' ISA x threads")

#define TITAN_GENERATOR_FIELDS(X)                                                                 \
  X(int64_t, kv_cache_bytes, int64_t{1} << 30, "bytes reserved for the paged KV cache")           \
  X(int64_t, host_cache_bytes, -1,                                                                \
    "freed activation blocks kept for reuse while the engine lives; -1 = auto (5 % of weights + " \
    "KV pool, <= 256 MiB), 0 = none")                                                             \
  X(int64_t, kv_block_size, 32,                                                                   \
    "tokens per KV-cache block; also the attention KV block of the trainer (parity)")             \
  X(int64_t, max_num_seqs, 64, "most sequences in one engine step")                               \
  X(int64_t, max_num_batched_tokens, 2048, "most tokens (prefill + decode) in one engine step")   \
  X(bool, enable_prefix_caching, true, "reuse KV blocks of identical prompt prefixes")            \
  X(double, temperature, 1.0, "sampling temperature; 0 = greedy")                                 \
  X(double, top_p, 1.0, "nucleus sampling mass; 1 = off")                                         \
  X(int, top_k, 0, "sample among the k most likely tokens; 0 = off")                              \
  X(double, min_p, 0.0, "drop tokens below min_p × the top probability; 0 = off")                 \
  X(int64_t, max_tokens, 256, "most generated tokens per request")                                \
  X(int64_t, seed, 0, "sampling seed (Philox key; each request draws from its own counter stream)")

#define TITAN_RL_FIELDS(X)                                                                               \
  X(RLAlgorithm, algorithm, RLAlgorithm::grpo, "grpo | dapo (policy-gradient loss and its aggregation)") \
  X(int64_t, group_size, 8, "completions sampled per prompt (the advantage group)")                      \
  X(int64_t, rollouts_per_step, 64, "completions per RL step; a multiple of group_size")                 \
  X(int64_t, max_offpolicy_steps, 0, "how many policy versions a rollout may lag the trainer; 0 = on-policy") \
  X(double, epsilon_low, 0.2, "PPO clip: ratio lower bound 1 - epsilon_low")                             \
  X(double, epsilon_high, 0.2, "PPO clip: ratio upper bound 1 + epsilon_high (DAPO clip-higher: 0.28)")  \
  X(double, kl_coef, 0.0, "weight of the KL penalty to the reference model; 0 = no reference model")     \
  X(std::string, ref_model, "", "checkpoint of the reference policy for the KL term; empty = the initial policy") \
  X(bool, dynamic_sampling, false, "DAPO: drop groups whose rewards are all equal and sample more")       \
  X(int64_t, overlong_buffer_len, 0, "DAPO soft overlong penalty: tokens before max_tokens where it ramps in; 0 = off") \
  X(double, overlong_penalty_factor, 1.0, "DAPO soft overlong penalty at max_tokens (reward units)")      \
  X(bool, std_normalize, true, "divide group-relative advantages by the group's reward std")             \
  X(int64_t, val_freq, 10, "evaluate on the environment's validation set every this many RL steps; 0 = never") \
  X(std::string, env, "gsm8k", "environment (task and reward) name")                                     \
  X(int, max_turns, 1, "most assistant turns per rollout")                                               \
  X(int64_t, max_total_tokens, 2048, "most tokens per rollout over all turns (prompt included)")           \
  X(std::string, env_config, "", "JSON object of task settings for make_task(env, ...), e.g. {\"max_names\": 4}; empty = the task's defaults") \
  X(std::string, init_from, "", "initial policy: a Hugging Face export folder (config.json + model.safetensors), e.g. outputs/alphabet_sort_sft/hf; empty = random init (training.seed)") \
  X(int64_t, val_samples, 64, "validation episodes (the first n of the environment's validation split, greedy) per val_reward") \
  X(int64_t, microbatch_tokens, 4096, "most packed tokens per trainer forward/backward (gradients accumulate over microbatches)") \
  X(int64_t, max_sampling_rounds, 4, "DAPO dynamic sampling: most generation rounds per step to fill rollouts_per_step") \
  X(double, max_error_fraction, 0.5, "the run stops with an error when more than this share of a step's rollouts failed (status error or a reward function that raised); 1 = never") \
  X(int, num_generators, 1, "generator replicas (TitanRL's num_generators): under mpirun each runs on its own rank after the trainer's ranks; on one process the generator shares the rank")

#define TITAN_PARALLELISM_FIELDS(X)                                                                      \
  X(int, data_parallel_replicate_degree, 1, "dp_replicate: data-parallel replicas (HSDP's outer dimension; each holds a full, or dp_shard-sharded, copy)") \
  X(int, data_parallel_shard_degree, -1, "dp_shard: FSDP ranks sharding parameters, gradients and optimizer state on dim 0; -1 = the rest of the world") \
  X(std::string, fsdp_reshard_after_forward, "default", "FSDP: free each block's gathered weights after its forward and gather them again for its backward: default (= always) | always | never (keep them until the block's backward: one all-gather per block instead of two)") \
  X(int, tensor_parallel_degree, 1, "tp: tensor-parallel ranks (Megatron colwise/rowwise)")               \
  X(bool, enable_sequence_parallel, true, "with tp > 1: norms and residuals sharded on the sequence over tp") \
  X(int, pipeline_parallel_degree, 1, "pp: pipeline stages (layer ranges) over ranks")                    \
  X(std::string, pipeline_parallel_schedule, "1F1B", "pipeline schedule: GPipe | 1F1B | Interleaved1F1B")  \
  X(int64_t, pipeline_parallel_microbatch_size, 1, "rows per pipeline microbatch")                         \
  X(int64_t, pipeline_parallel_layers_per_stage, 0, "layers per pipeline stage, the embedding and the LM head counting one each (TorchTitan's); 0 = 1 stage per rank, 2 for Interleaved1F1B") \
  X(int, context_parallel_degree, 1, "cp: ranks splitting each sequence (head-tail balanced for causal attention)") \
  X(int, expert_parallel_degree, 1, "ep: ranks sharding the routed experts of MoE layers (carved from dp_shard × cp; tokens dispatched by all-to-all)")

struct JobSection { TITAN_CONFIG_BODY(JobSection, TITAN_JOB_FIELDS) };
struct ModelConfig { TITAN_CONFIG_BODY(ModelConfig, TITAN_MODEL_FIELDS) };
struct TrainingConfig { TITAN_CONFIG_BODY(TrainingConfig, TITAN_TRAINING_FIELDS) };
struct ValidationConfig { TITAN_CONFIG_BODY(ValidationConfig, TITAN_VALIDATION_FIELDS) };
struct OptimizerConfig { TITAN_CONFIG_BODY(OptimizerConfig, TITAN_OPTIMIZER_FIELDS) };
struct LRSchedulerConfig { TITAN_CONFIG_BODY(LRSchedulerConfig, TITAN_LR_SCHEDULER_FIELDS) };
struct CheckpointConfig { TITAN_CONFIG_BODY(CheckpointConfig, TITAN_CHECKPOINT_FIELDS) };
struct MetricsConfig { TITAN_CONFIG_BODY(MetricsConfig, TITAN_METRICS_FIELDS) };
struct GeneratorConfig { TITAN_CONFIG_BODY(GeneratorConfig, TITAN_GENERATOR_FIELDS) };
struct RLConfig { TITAN_CONFIG_BODY(RLConfig, TITAN_RL_FIELDS) };
struct ParallelismConfig { TITAN_CONFIG_BODY(ParallelismConfig, TITAN_PARALLELISM_FIELDS) };

#define TITAN_JOB_SECTIONS(X)                                                                            \
  X(JobSection, job, {}, "job: where outputs go and what this run is")                                   \
  X(ModelConfig, model, {}, "model: architecture, tokenizer and compute dtype")                          \
  X(TrainingConfig, training, {}, "training: data, batch shape, steps, gradient clipping")               \
  X(ValidationConfig, validation, {}, "validation: held-out loss during training")                       \
  X(OptimizerConfig, optimizer, {}, "optimizer: AdamW / Muon hyperparameters")                           \
  X(LRSchedulerConfig, lr_scheduler, {}, "lr_scheduler: warmup and decay of the learning rate")          \
  X(CheckpointConfig, checkpoint, {}, "checkpoint: saving and resuming training state")                  \
  X(MetricsConfig, metrics, {}, "metrics: console lines, metrics.jsonl, MFU")                            \
  X(GeneratorConfig, generator, {}, "generator: inference engine (KV cache, scheduling, sampling)")      \
  X(RLConfig, rl, {}, "rl: RL post-training (GRPO / DAPO rollouts, advantages, loss)")                   \
  X(ParallelismConfig, parallelism, {}, "parallelism: how ranks split the work")

struct JobConfig { TITAN_CONFIG_BODY(JobConfig, TITAN_JOB_SECTIONS) };

// Values of the "0 = automatic" fields.
inline int effective_n_kv_heads(const ModelConfig& m) { return m.n_kv_heads ? m.n_kv_heads : m.n_heads; }
inline int effective_head_dim(const ModelConfig& m) {
  return m.head_dim ? m.head_dim : static_cast<int>(m.dim / (m.n_heads ? m.n_heads : 1));
}
// Data-parallel ranks of the layout on world_size ranks: data_parallel_replicate_degree ×
// data_parallel_shard_degree, where a shard degree of -1 takes the rest of the world
// (world_size / the product of the other degrees, at least 1). The layout itself is
// checked by titan::distributed::ParallelDims.
int64_t dp_degree(const JobConfig& c, int world_size = 1);
// Rows per optimizer step over all ranks: training.global_batch_size, or local × dp when 0.
int64_t effective_global_batch_size(const JobConfig& c, int world_size = 1);
// Microbatches per optimizer step on each rank (gradient accumulation steps).
int64_t grad_accum_steps(const JobConfig& c, int world_size = 1);

// Checks value ranges and cross-field constraints (batch divisibility, head
// counts, probabilities). Throws titan::Error naming the field(s), the value and
// what is expected, e.g. "training.global_batch_size=10 must be a multiple of ...".
// The [parallelism] degrees are checked one by one here (>= 1; dp_shard -1 or >= 1);
// their product against the world size and the model's shape is ParallelDims' check.
void validate(const JobConfig& c);

}  // namespace titan::config
