// One sample of a request as the scheduler and the engine track it (internal to
// titan/infer). tokens = prompt + generated; tokens [0, num_computed) have their K/V
// in the cache blocks `blocks` (logical block i = tokens [i·B, (i+1)·B)).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/infer/detokenizer.h"
#include "titan/infer/sampling_params.h"

namespace titan::infer {

enum class SeqStatus { waiting, running, finished };

struct Sequence {
  int64_t request_id = -1;
  int sample_index = 0;
  uint64_t seed = 0;  // Philox key of the request
  uint64_t salt = 0;  // prefix-cache salt: 0 = shared across requests, else per request
  const SamplingParams* params = nullptr;
  const Sequence* leader = nullptr;  // sample 0 of the request (null for sample 0 itself)

  std::vector<int32_t> tokens;
  int64_t num_prompt = 0;
  int64_t num_computed = 0;
  std::vector<int32_t> blocks;
  int32_t state_slot = -1;       // StatePool row of a running sequence (models with state)
  std::vector<uint64_t> hashes;  // block_hash of full blocks [0, hashes.size())
  int64_t num_registered = 0;    // leading blocks already offered to the prefix table
  SeqStatus status = SeqStatus::waiting;
  int64_t num_preemptions = 0;
  int64_t num_cached_tokens = 0;  // tokens served by the prefix cache at first admission
  bool ever_scheduled = false;

  // Outputs.
  std::vector<float> logprobs;
  std::vector<TopLogprobs> top_logprobs;
  std::vector<int32_t> routed_experts;  // MoE: per sampled token, CompletionOutput::routed_experts
  std::string text;
  size_t text_sent = 0, tokens_sent = 0;
  IncrementalDetokenizer detok;
  FinishReason finish = FinishReason::none;
  std::string stop_reason, error;
  bool finish_reported = false;

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
  int64_t len() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace titan::infer
