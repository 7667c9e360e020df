// Per-request sampling parameters and the outputs the engine returns (vLLM's
// SamplingParams / RequestOutput, reduced to what titan's generator implements).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace titan::infer {

// Most samples of one request: each sample is a sequence with its own state in the
// engine, and n beyond this would exhaust host memory before the first step.
inline constexpr int kMaxSamples = 4096;

struct SamplingParams {
  int n = 1;                     // independent samples of the prompt, in [1, kMaxSamples] (share its KV blocks)
  double temperature = 1.0;      // 0 = greedy (argmax, ties to the lower id)
  double top_p = 1.0;            // nucleus mass in (0, 1]; 1 = off
  int top_k = 0;                 // keep the k most likely tokens; 0 (or -1) = off
  double min_p = 0.0;            // drop tokens with p < min_p * p_max; in [0, 1]; 0 = off
  int64_t max_tokens = 256;      // most generated tokens (>= 1)
  std::optional<uint64_t> seed;  // Philox key; unset = drawn from the engine seed at admission
  std::vector<std::string> stop;         // stop strings (not included in the text by default)
  std::vector<int32_t> stop_token_ids;   // extra stop tokens besides EOS
  bool ignore_eos = false;               // keep generating past EOS
  bool include_stop_str_in_output = false;
  int logprobs = 0;              // also return the top-N logprobs of every position (0..20)
  bool detokenize = true;        // produce text (needs a tokenizer)

  // Throws titan::Error naming the field and the valid range ("SamplingParams.top_p
  // must be in (0, 1], got 1.5").
  void validate() const;
  // The temperature the logprobs are computed at: temperature, or 1.0 when greedy.
  double logprob_temperature() const { return temperature > 0 ? temperature : 1.0; }
  bool greedy() const { return temperature == 0.0; }
};

enum class FinishReason { none, stop, length, abort, error };
// "stop" | "length" | "abort" | "error" ("" for none).
const char* finish_reason_name(FinishReason r);

using TopLogprobs = std::vector<std::pair<int32_t, float>>;  // (token id, logprob), best first

// One sample of a request. In the output of Engine::step() the new_* fields hold
// what was produced in that step (streaming); the cumulative fields are filled
// once, in the step in which the sample finishes (and by Engine::generate()).
struct CompletionOutput {
  int index = 0;                       // sample index in [0, n)
  std::vector<int32_t> new_token_ids;  // tokens sampled this step
  std::vector<float> new_logprobs;     // their logprobs (titan::logprobs, temperature-scaled)
  std::vector<TopLogprobs> new_top_logprobs;  // when SamplingParams.logprobs > 0
  std::string new_text;                // text that became final this step

  std::vector<int32_t> token_ids;      // all generated tokens (when finished)
  std::vector<float> logprobs;
  std::vector<TopLogprobs> top_logprobs;
  std::string text;
  // MoE models (when finished): for generated token i, the routers' top-k expert ids
  // (ascending) of the row that sampled it, for every MoE layer in layer order:
  // [i * W, (i + 1) * W), W = MoE layers × num_experts_per_tok. Empty for dense models.
  std::vector<int32_t> routed_experts;

  FinishReason finish_reason = FinishReason::none;
  std::string stop_reason;  // the stop string or "token <id>" that ended it
  std::string error;        // message when finish_reason == error
  bool finished() const { return finish_reason != FinishReason::none; }
};

// Timings in seconds since the engine was created.
struct RequestMetrics {
  double arrival_time = 0;
  double first_scheduled_time = -1;
  double first_token_time = -1;
  double finished_time = -1;
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache (sample 0)
  int64_t num_preemptions = 0;    // over all samples
};

struct RequestOutput {
  int64_t request_id = -1;
  std::vector<int32_t> prompt_token_ids;  // filled when finished
  std::vector<CompletionOutput> outputs;  // the samples with news this step
  bool finished = false;                  // every sample has finished
  RequestMetrics metrics;
};

}  // namespace titan::infer
