// The generator: a vLLM-style inference engine over the ONE model (DESIGN.md §1.1).
//
//   infer::Engine engine(model, tokenizer.get(), cfg);
//   int64_t id = engine.add_request(prompt_ids, params);
//   while (engine.has_unfinished())
//     for (const RequestOutput& o : engine.step()) ...   // streamed tokens / text
//   // or, blocking: auto outs = engine.generate({ids_a, ids_b}, params);
//
// Each step() schedules prefill chunks and decode tokens of many requests
// (scheduler.h: continuous batching, chunked prefill, preemption by recomputation),
// runs Decoder::forward on them with the paged KV cache (block_pool.h: fixed-size
// blocks, prefix caching), computes logits only for the last row of each sequence
// that reached its end (Decoder::logits, the batch-invariant GEMM), samples
// (sampler.h: Philox keyed by (seed, sample index, position)) and computes the
// sampled tokens' logprobs with THE logprob function's algorithm on the same logit bits
// (titan::logprobs, or logprobs_panels once the LM head is repacked; logprobs_bf16 /
// logprobs_panels_bf16 for a bf16-compute model; temperature-scaled;
// temperature 0 uses 1.0). Every kernel is batch invariant, so a request's tokens and
// logprobs do not depend on which requests share its steps, how its prompt was
// chunked, or whether it was preempted — and the logprobs equal the trainer's for the
// same tokens, bitwise.
//
// Models with linear-attention layers (cache_spec declares per-sequence state) get
// 2 · max_num_seqs state rows (StatePool: one per running sequence plus as many
// prefix-cache snapshots), paid from kv_cache_bytes before the KV blocks.
//
// Bad requests (empty prompt, prompt not shorter than the model's context, token id
// outside the vocabulary, invalid SamplingParams, a prompt needing more KV blocks
// than the pool has) finish with finish_reason "error" and a message; the other
// requests are unaffected. The engine is single-threaded from the caller's view
// (kernels use the thread pool inside).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/host_alloc.h"
#include "titan/infer/block_pool.h"
#include "titan/infer/sampling_params.h"
#include "titan/infer/scheduler.h"
#include "titan/infer/state_pool.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/models/common/decoder.h"

namespace titan::data {
class Tokenizer;
}

namespace titan::infer {

struct EngineConfig {
  int64_t kv_cache_bytes = int64_t{1} << 30;  // KV pool size (generator.kv_cache_bytes)
  int64_t num_kv_blocks = 0;                  // > 0: exactly this many blocks instead
  int block_size = kernels::cpu::kKvBlockSize;  // tokens per block; parity needs kKvBlockSize
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;
  uint64_t seed = 0;                 // seeds of requests without one derive from it
  std::vector<int32_t> eos_token_ids;  // empty: the tokenizer's EOS, else the model config's
  // false (default): sampled-token logprobs from the logits already computed for
  // sampling, through the trainer's vocabulary log-sum-exp kernel (ce_tile_stats on the
  // same logit bits: identical to titan::logprobs on the hidden rows, which
  // cpu_loss_test and parity_test check bitwise) — one LM-head GEMM fewer per step.
  // true: Decoder::logprobs on the hidden rows (titan::logprobs, or logprobs_panels on a
  // repacked LM head, or their bf16 twins: a second LM-head pass; kept as a check).
  bool logprobs_from_hidden = false;
  // Bytes of freed activation blocks that host_alloc may keep for reuse while the engine
  // lives (ScopedHostCacheLimit; generator.host_cache_bytes). Fresh blocks come back
  // from the kernel as zero pages, and their page faults are a large share of a long
  // prefill (docs/benchmarks-history.md, Generator). -1 = auto: 5 %
  // of weights (fp32 bytes) + KV pool, at most 256 MiB (the memory bound, weights + KV
  // pool + 10 %, keeps room for it); 0 = none (the limit stays as others set it).
  int64_t host_cache_bytes = -1;
};

// Counters since construction. A token is a decode token when it is the only token of
// its sequence in the step and was itself generated; all others are prefill (prompt
// chunks and recomputation after preemption).
struct EngineStats {
  int64_t steps = 0, prefill_tokens = 0, decode_tokens = 0, sampled_tokens = 0;
  int64_t preemptions = 0, cached_prompt_tokens = 0, requests = 0;
  double step_s = 0;          // wall time inside step()
  double prefill_step_s = 0;  // wall time of steps that computed any prefill token
  double decode_step_s = 0;   // wall time of steps that computed only decode tokens
  int64_t decode_steps = 0;        // steps that computed only decode tokens
  int64_t decode_only_tokens = 0;  // decode tokens of those steps
  double forward_s = 0, logits_s = 0, sample_s = 0;
};

class Engine {
 public:
  // model and tokenizer (may be null: no text, no stop strings) must outlive the
  // engine. Allocates the KV pool (lazily touched). Throws titan::Error for bad sizes.
  // With a tokenizer smaller than the model's vocabulary (rows padded for tensor
  // parallelism or to a multiple, as Qwen3's 151936 over its tokenizer's 151669), the
  // ids the tokenizer lacks are never sampled nor listed in top logprobs (vLLM's
  // allowed-token rule); logprobs keep the model's full-vocabulary normalizer (THE
  // logprob function, the trainer's bits).
  Engine(const models::Decoder& model, const data::Tokenizer* tokenizer, const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; returns its id (0, 1, ... in call order). Never throws for bad
  // input: such a request finishes with "error" in the next step().
  int64_t add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  // One engine step; returns the requests that produced tokens, text or finished.
  std::vector<RequestOutput> step();
  // Finishes every sample of the request with "abort" (reported by the next step()).
  // Unknown or finished ids are ignored.
  void abort(int64_t request_id);
  bool has_unfinished() const { return !requests_.empty(); }

  // Blocking: adds every prompt, steps until all finish, returns the finished outputs
  // (cumulative fields filled) in input order. Needs no other request in flight.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<SamplingParams>& params);

  const EngineStats& stats() const { return stats_; }
  const BlockPool& block_pool() const { return pool_; }
  const EngineConfig& config() const { return cfg_; }
  int64_t num_kv_blocks() const { return pool_.num_blocks(); }
  // Bytes of the whole cache: the KV blocks and the recurrent-state rows.
  int64_t kv_cache_bytes() const {
    return pool_.num_blocks() * kv_bytes_per_block(model_, cfg_.block_size) +
           states_.num_rows() * state_bytes_per_slot(model_);
  }
  // Bytes of one sequence's recurrent state over all layers (fp32; 0 for a model
  // without linear-attention layers), from the model's cache_spec.
  static int64_t state_bytes_per_slot(const models::Decoder& model);
  const StatePool& state_pool() const { return states_; }
  // Bytes one KV block takes over all layers (fp32), from the model's cache_spec.
  static int64_t kv_bytes_per_block(const models::Decoder& model, int block_size);
  // The host_alloc cache bytes this engine holds (EngineConfig::host_cache_bytes resolved).
  int64_t host_cache_bytes() const;

 private:
  struct Request;
  void validate_request(const Request& r) const;
  void run_step(const StepPlan& plan);
  void append_token(Sequence& s, int32_t token, float logprob, TopLogprobs top);
  void finish_seq(Sequence& s, FinishReason r);
  RequestOutput collect(Request& r);
  double now() const;

  const models::Decoder& model_;
  const data::Tokenizer* tok_;
  EngineConfig cfg_;
  int64_t sample_vocab_ = 0;  // ids [0, sample_vocab_) can be sampled (see the constructor)
  std::vector<int32_t> eos_;
  BlockPool pool_;
  StatePool states_;
  Scheduler sched_;
  models::ModelCache kv_;
  std::map<int64_t, std::unique_ptr<Request>> requests_;
  std::vector<int64_t> touched_;  // requests with news since the last step()
  int64_t next_id_ = 0;
  EngineStats stats_;
  int64_t t0_ns_ = 0;
  // Last, so that it ends first: the KV pool is freed after it, not into the cache.
  std::optional<ScopedHostCacheLimit> host_cache_;
};

}  // namespace titan::infer
