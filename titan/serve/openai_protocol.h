// OpenAI's completions and chat-completions API on top of infer::SamplingParams and
// infer::RequestOutput: request parsing and validation, response and stream-chunk
// bodies, and the error body. Source of the shapes: the OpenAI API reference
// (https://platform.openai.com/docs/api-reference/completions, /chat, /errors) and
// vLLM's extensions (top_k, min_p, ignore_eos, stop_token_ids,
// include_stop_str_in_output, return_tokens_as_token_ids,
// chat_template_kwargs.enable_thinking).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "titan/infer/sampling_params.h"

namespace titan::data {
class Tokenizer;
}

namespace titan::serve {

// A request the server refuses: HTTP status and OpenAI's error fields
// ({"error": {"message", "type", "param", "code"}}).
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

// {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
nlohmann::json error_body(const ApiError& e);

// Server-wide limits (the `titan serve` flags).
struct ServeLimits {
  int64_t max_body_bytes = 1 << 20;   // request body (bytes); larger -> 413
  int64_t max_prompt_tokens = 0;      // per prompt, after the chat template; 0 = context - 1
  int64_t max_tokens = 4096;          // the largest max_tokens a request may ask for
  int64_t max_concurrent_requests = 128;  // generation requests in flight; more -> 429
  int max_n = 16;                     // samples per prompt
  int max_prompts = 64;               // prompts in one completions request
};

// What the API needs to know about the served model.
struct ServedModel {
  std::string name;                    // the "model" field requests must carry
  int64_t context = 0;                 // max_position_embeddings (tokens)
  int64_t vocab_size = 0;
  const data::Tokenizer* tokenizer = nullptr;
  int32_t bos_id = -1;                 // prepended to text prompts when >= 0
  std::vector<int32_t> stop_token_ids;  // format stop tokens (llama2.c: BOS)
  int64_t created = 0;                 // unix seconds, for /v1/models
};

enum class Endpoint { completions, chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  std::vector<std::vector<int32_t>> prompts;  // token ids, one per prompt (chat: one)
  infer::SamplingParams params;
  bool stream = false, include_usage = false;
  bool logprobs = false;  // return the sampled tokens' logprobs (params.logprobs = top-N)
  bool tokens_as_ids = false;  // logprobs name tokens "token_id:<id>" (return_tokens_as_token_ids)
  int64_t prompt_tokens = 0;  // sum over prompts
};

// Parses and validates a request body for endpoint. Throws ApiError (400 for bad JSON,
// a missing or mistyped field, an unsupported field or value, a prompt over the limit
// or the context, max_tokens over the limit; 404 for an unknown model).
ApiRequest parse_request(Endpoint endpoint, const std::string& body, const ServedModel& model,
                         const ServeLimits& limits);

// One choice's result, as accumulated from the engine's outputs.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  std::vector<infer::TopLogprobs> top_logprobs;
  std::string finish_reason;  // "stop" | "length" | "abort"
};

// The non-streaming response body (object "text_completion" or "chat.completion").
// choices[i] has index i (prompt p, sample j: i = p * n + j).
nlohmann::json response_body(const ApiRequest& req, const ServedModel& model, const std::string& id,
                             int64_t created, const std::vector<ChoiceResult>& choices, int64_t completion_tokens);

// One streamed chunk for choice index: the delta text, its tokens' logprobs (when
// requested), finish_reason when it ends (empty: null). first: the choice's first
// chunk (chat: carries the role).
nlohmann::json stream_chunk(const ApiRequest& req, const ServedModel& model, const std::string& id,
                            int64_t created, int index, bool first, const std::string& text,
                            const std::vector<int32_t>& token_ids, const std::vector<float>& logprobs,
                            const std::vector<infer::TopLogprobs>& top_logprobs, const std::string& finish_reason);
// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const ApiRequest& req, const ServedModel& model, const std::string& id, int64_t created,
                           int64_t completion_tokens);

// A JSON dump that replaces invalid UTF-8 (a byte token's partial character) with U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace titan::serve
