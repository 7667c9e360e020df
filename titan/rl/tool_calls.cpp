#include "titan/rl/tool_calls.h"

#include <fmt/format.h>

#include "titan/core/error.h"
#include "titan/core/json_read.h"

namespace titan::rl {
namespace {

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// The call in `body`, or the reason it is not one.
ParsedToolCall parse_one(std::string_view body) {
  ParsedToolCall out;
  out.body = std::string(body);
  if (body.size() > kMaxToolCallBytes) {
    out.error = fmt::format("tool call of {} bytes (the limit is {})", body.size(), kMaxToolCallBytes);
    return out;
  }
  nlohmann::json j;
  try {
    j = parse_json(trim(body), "tool call");
  } catch (const Error& e) {
    out.error = e.what();
    return out;
  }
  if (!j.is_object()) {
    out.error = "tool call: expected a JSON object {\"name\": ..., \"arguments\": {...}}, got " + json_excerpt(j);
    return out;
  }
  ToolCall call;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "name") {
      if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
        out.error = "tool call: \"name\" must be a non-empty string, got " + json_excerpt(*it);
        return out;
      }
      call.name = it->get<std::string>();
    } else if (it.key() == "arguments") {
      nlohmann::json args = *it;
      if (args.is_string()) {
        try {
          args = parse_json(args.get_ref<const std::string&>(), "tool call arguments");
        } catch (const Error& e) {
          out.error = e.what();
          return out;
        }
      }
      if (!args.is_object()) {
        out.error = "tool call: \"arguments\" must be a JSON object, got " + json_excerpt(*it);
        return out;
      }
      call.arguments = std::move(args);
    } else {
      out.error = "tool call: unexpected member \"" + excerpt(it.key()) + "\" (expected name and arguments)";
      return out;
    }
  }
  if (call.name.empty()) {
    out.error = "tool call: missing \"name\"";
    return out;
  }
  if (call.arguments.is_null()) call.arguments = nlohmann::json::object();
  out.call = std::move(call);
  return out;
}

}  // namespace

AssistantTurn parse_tool_calls(std::string_view text) {
  AssistantTurn turn;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kToolCallOpen, pos);
    if (open == std::string_view::npos) {
      turn.content.append(text.substr(pos));
      break;
    }
    turn.content.append(text.substr(pos, open - pos));
    const size_t body_begin = open + kToolCallOpen.size();
    const size_t close = text.find(kToolCallClose, body_begin);
    const std::string_view body =
        text.substr(body_begin, close == std::string_view::npos ? std::string_view::npos : close - body_begin);
    ParsedToolCall parsed;
    if (turn.tool_calls.size() >= kMaxToolCallsPerTurn) {
      parsed.body = std::string(body.substr(0, 256));
      parsed.error = fmt::format("more than {} tool calls in one turn", kMaxToolCallsPerTurn);
    } else if (close == std::string_view::npos) {
      parsed.body = std::string(body.substr(0, kMaxToolCallBytes));
      parsed.error = "unterminated <tool_call>: no </tool_call> before the end of the output (cut at max_tokens?)";
    } else {
      parsed = parse_one(body);
    }
    turn.tool_calls.push_back(std::move(parsed));
    if (close == std::string_view::npos) break;
    pos = close + kToolCallClose.size();
  }
  return turn;
}

std::string format_tool_call(const ToolCall& call) {
  // Invalid UTF-8 (possible only in a call built by hand) is written as U+FFFD.
  const auto dump = [](const nlohmann::json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  return std::string(kToolCallOpen) + "\n{\"name\": " + dump(nlohmann::json(call.name)) +
         ", \"arguments\": " + dump(call.arguments) + "}\n" + std::string(kToolCallClose);
}

}  // namespace titan::rl
