// Tool calls in model output, in the Qwen3 / Hermes format that Qwen3's chat template
// renders and its models write:
//
//   <tool_call>
//   {"name": "search", "arguments": {"query": "capital of Ruritania"}}
//   </tool_call>
//
// parse_tool_calls splits an assistant turn into its text and its calls. Model output
// is untrusted: every malformed call becomes a ParsedToolCall with an error (which a
// tool-use harness returns to the model as a `tool` message), never an exception.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace titan::rl {

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";

// Bounds on one assistant turn: calls beyond kMaxToolCallsPerTurn are reported as
// errors without being parsed, and a call body longer than kMaxToolCallBytes is
// refused before its JSON is read. JSON nesting is bounded by parse_json's default.
inline constexpr size_t kMaxToolCallsPerTurn = 16;
inline constexpr size_t kMaxToolCallBytes = 64 << 10;

struct ToolCall {
  std::string name;           // non-empty
  nlohmann::json arguments;   // a JSON object ({} when the call gave none)
};

struct ParsedToolCall {
  std::optional<ToolCall> call;  // set when the call is well-formed
  std::string error;             // otherwise the reason, one line, e.g. "malformed JSON: ..."
  std::string body;              // the text between the tags, as written
};

struct AssistantTurn {
  std::string content;                      // the text outside the tool-call blocks
  std::vector<ParsedToolCall> tool_calls;   // in the order written
};

// Splits `text` (one assistant turn, special tokens already removed) into its content
// and its tool calls. A call's body is one JSON object with a string "name" and an
// optional "arguments": an object, or a string holding a JSON object (OpenAI's
// wire form). Errors: malformed JSON (with an excerpt), a body that is not an
// object, a missing or non-string or empty "name", "arguments" of another type,
// other members, a body over kMaxToolCallBytes, more than kMaxToolCallsPerTurn
// calls, and an unterminated <tool_call> (output cut at max_tokens). A stray
// </tool_call> stays in the content.
AssistantTurn parse_tool_calls(std::string_view text);

// The block the chat template renders for a call (parse_tool_calls reads it back as
// the same call): <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
std::string format_tool_call(const ToolCall& call);

}  // namespace titan::rl
