// The request lines of `titan generate --input FILE` (JSONL, one request per line):
//   {"prompt": "text"} or {"prompt_token_ids": [1, 2, ...]}, plus optional sampling
//   fields over the command-line defaults: n, max_tokens, temperature, top_p, top_k,
//   min_p, seed, logprobs, ignore_eos, stop (a string or a list of strings),
//   stop_token_ids (a list of token ids).
// Integers must be JSON integers in the field's range (1.5, 1e20 and -1 for a seed
// are errors, never truncated or wrapped); floats must be finite numbers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/infer/sampling_params.h"

namespace titan::infer {

struct JsonlRequest {
  std::optional<std::string> prompt;       // "prompt", to be encoded by the caller
  std::vector<int32_t> prompt_token_ids;   // "prompt_token_ids" when there is no "prompt"
  SamplingParams params;                   // defaults overridden by the line's fields (not validated)
};

// Parses one non-blank line. `where` names it in errors ("<file>:<line>: ..."):
// invalid JSON (nesting bounded, message cut short), not an object, no prompt,
// a field of the wrong type or out of range.
JsonlRequest parse_request_line(std::string_view line, const SamplingParams& defaults, const std::string& where);

// Every non-blank line of `text` (lines numbered from 1 in errors as "<name>:<n>").
std::vector<JsonlRequest> parse_request_jsonl(std::string_view text, const SamplingParams& defaults,
                                              const std::string& name);

}  // namespace titan::infer
