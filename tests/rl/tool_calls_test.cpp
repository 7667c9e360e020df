// Tool-call parsing (titan/rl/tool_calls.h): what the Qwen3 chat template renders
// (transformers' apply_chat_template on the shipped Qwen3 tokenizer) reads back as the
// calls it was given, and each malformed call is an error entry, never an exception.
#include "titan/rl/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/util/test_files.h"
#include "tests/util/venv_python.h"
#include "titan/config/resolve.h"

namespace titan::rl {
namespace {

using nlohmann::json;

// The assistant turn transformers renders for two calls, one with object arguments,
// one with OpenAI's string-encoded arguments.
std::string hf_rendered_assistant_turn() {
  const std::string dir = test::fresh_dir("tool_calls_hf");
  const std::string script = dir + "/render.py";
  std::ofstream(script) << R"PY(import sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
msgs = [{"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
          {"type": "function", "function": {"name": "search",
            "arguments": {"query": "capital of Ruritania", "k": 3, "filters": {"lang": ["en", "de"]}}}},
          {"type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"2*(3+4)\"}"}}]}]
text = t.apply_chat_template(msgs, tokenize=False)
begin = text.index("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
sys.stdout.write(text[begin:text.index("<|im_end|>", begin)])
)PY";
  const test::ShellResult r = test::run_shell("'" + test::venv_python() + "' '" + script + "' '" +
                                              config::shared_data_dir() + "/qwen3-tokenizer'");
  EXPECT_EQ(r.code, 0) << r.out;
  std::filesystem::remove_all(dir);
  return r.out;
}

TEST(ToolCalls, ReadsWhatTheQwen3TemplateRenders) {
  const std::string text = hf_rendered_assistant_turn();
  ASSERT_NE(text.find("<tool_call>"), std::string::npos) << text;
  const AssistantTurn turn = parse_tool_calls(text);
  ASSERT_EQ(turn.tool_calls.size(), 2u) << text;
  for (const auto& c : turn.tool_calls) ASSERT_TRUE(c.call) << c.error;
  EXPECT_EQ(turn.tool_calls[0].call->name, "search");
  EXPECT_EQ(turn.tool_calls[0].call->arguments,
            json::parse(R"({"query": "capital of Ruritania", "k": 3, "filters": {"lang": ["en", "de"]}})"));
  EXPECT_EQ(turn.tool_calls[1].call->name, "calculator");
  EXPECT_EQ(turn.tool_calls[1].call->arguments, json::parse(R"J({"expression": "2*(3+4)"})J"));
  EXPECT_NE(turn.content.find("Let me look."), std::string::npos);
  EXPECT_EQ(turn.content.find("tool_call"), std::string::npos) << turn.content;
}

TEST(ToolCalls, FormatReadsBack) {
  const ToolCall c{"search", json::parse(R"({"query": "a \"quoted\" é", "n": [1, 2.5, null]})")};
  const AssistantTurn turn = parse_tool_calls("x " + format_tool_call(c) + " y");
  ASSERT_EQ(turn.tool_calls.size(), 1u);
  ASSERT_TRUE(turn.tool_calls[0].call) << turn.tool_calls[0].error;
  EXPECT_EQ(turn.tool_calls[0].call->name, c.name);
  EXPECT_EQ(turn.tool_calls[0].call->arguments, c.arguments);
  EXPECT_EQ(turn.content, "x  y");
}

TEST(ToolCalls, NoArgumentsIsAnEmptyObject) {
  const AssistantTurn turn = parse_tool_calls("<tool_call>{\"name\": \"now\"}</tool_call>");
  ASSERT_EQ(turn.tool_calls.size(), 1u);
  ASSERT_TRUE(turn.tool_calls[0].call) << turn.tool_calls[0].error;
  EXPECT_EQ(turn.tool_calls[0].call->arguments, json::object());
}

TEST(ToolCalls, MalformedCallsAreErrorsWithTheReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": 1}</tool_call>", "malformed JSON"},
      {"<tool_call>[1, 2]</tool_call>", "expected a JSON object"},
      {"<tool_call>{\"arguments\": {}}</tool_call>", "missing \"name\""},
      {"<tool_call>{\"name\": 3}</tool_call>", "\"name\" must be a non-empty string"},
      {"<tool_call>{\"name\": \"\"}</tool_call>", "\"name\" must be a non-empty string"},
      {"<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>", "\"arguments\" must be a JSON object"},
      {"<tool_call>{\"name\": \"a\", \"arguments\": \"{oops\"}</tool_call>", "tool call arguments: malformed JSON"},
      {"<tool_call>{\"name\": \"a\", \"args\": {}}</tool_call>", "unexpected member \"args\""},
      {"<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cut he", "unterminated <tool_call>"},
      {"<tool_call>" + std::string(200, '[') + std::string(200, ']') + "</tool_call>", "nested deeper"},
      {"<tool_call>\"" + std::string(kMaxToolCallBytes, 'a') + "\"</tool_call>", "the limit is"},
  };
  for (const auto& [text, needle] : cases) {
    AssistantTurn turn;
    ASSERT_NO_THROW(turn = parse_tool_calls(text)) << text.substr(0, 80);
    ASSERT_EQ(turn.tool_calls.size(), 1u) << text.substr(0, 80);
    EXPECT_FALSE(turn.tool_calls[0].call) << text.substr(0, 80);
    EXPECT_NE(turn.tool_calls[0].error.find(needle), std::string::npos)
        << text.substr(0, 80) << " -> " << turn.tool_calls[0].error;
    EXPECT_EQ(turn.tool_calls[0].error.find('\n'), std::string::npos) << turn.tool_calls[0].error;
  }
}

TEST(ToolCalls, CallsPastTheLimitAreErrorsAndAStrayCloseIsContent) {
  std::string text = "</tool_call>";
  for (size_t i = 0; i < kMaxToolCallsPerTurn + 2; ++i) text += "<tool_call>{\"name\": \"f\"}</tool_call>";
  const AssistantTurn turn = parse_tool_calls(text);
  ASSERT_EQ(turn.tool_calls.size(), kMaxToolCallsPerTurn + 2);
  for (size_t i = 0; i < turn.tool_calls.size(); ++i)
    EXPECT_EQ(turn.tool_calls[i].call.has_value(), i < kMaxToolCallsPerTurn) << i;
  EXPECT_NE(turn.tool_calls.back().error.find("more than 16 tool calls"), std::string::npos);
  EXPECT_EQ(turn.content, "</tool_call>");
}

}  // namespace
}  // namespace titan::rl
