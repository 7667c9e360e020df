// Tokenizer::apply_chat_template: Qwen3's chat template (tokenizer_config.json
// "chat_template", a Jinja template) written out in C++ for messages without
// tools. Branch by branch it follows the template; the comments quote it.
#include <string>

#include "titan/core/error.h"
#include "titan/data/tokenizer.h"

namespace titan::data {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
std::string_view lstrip_nl(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_nl(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}
// Python's s.split(sep)[-1] and s.split(sep)[0].
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t k = s.rfind(sep);
  return k == std::string_view::npos ? s : s.substr(k + sep.size());
}
std::string_view before_first(std::string_view s, std::string_view sep) {
  const size_t k = s.find(sep);
  return k == std::string_view::npos ? s : s.substr(0, k);
}

}  // namespace

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages,
                                           const ChatTemplateOptions& options) const {
  TITAN_CHECK(token_to_id("<|im_start|>") >= 0 && token_to_id("<|im_end|>") >= 0,
              "apply_chat_template: this {} tokenizer has no <|im_start|>/<|im_end|> tokens (only the "
              "Qwen3/ChatML template is built in)",
              kind());
  const int64_t n = static_cast<int64_t>(messages.size());
  for (int64_t i = 0; i < n; ++i) {
    const std::string& r = messages[i].role;
    TITAN_CHECK(r == "system" || r == "user" || r == "assistant" || r == "tool",
                "apply_chat_template: messages[{}].role = '{}' (expected system, user, assistant or tool)", i,
                r);
  }
  std::string out;
  // {%- if messages[0].role == 'system' %} '<|im_start|>system\n' + content + '<|im_end|>\n'
  if (n > 0 && messages[0].role == "system")
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  // The last user query: the last user message that is not a wrapped tool response.
  int64_t last_query = n - 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" &&
        !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      std::string_view reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (m.content.find("</think>") != std::string::npos) {
        // content = content.split('</think>')[-1].lstrip('\n')
        // reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
        content = lstrip_nl(after_last(m.content, "</think>"));
        reasoning = lstrip_nl(after_last(rstrip_nl(before_first(m.content, "</think>")), "<think>"));
      }
      if (i > last_query && (i == n - 1 || !reasoning.empty())) {
        // '<|im_start|>' + role + '\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n')
        out += "<|im_start|>assistant\n<think>\n";
        out += rstrip_nl(lstrip_nl(reasoning));
        out += "\n</think>\n\n";
        out += lstrip_nl(content);
      } else {
        out += "<|im_start|>assistant\n";
        out += content;
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i == n - 1 || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace titan::data
