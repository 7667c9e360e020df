// Fuzz target: the tool-call parser (titan/rl/tool_calls.h) on arbitrary model output.
// Properties: it never throws; every call's body is a piece of the input and the content
// is no longer than the input; every well-formed call, formatted and parsed again, gives
// the same call. (The content may hold a <tool_call> tag: "<tool_" + a call + "call>"
// joins into one.)
#include "tests/fuzz/fuzz_util.h"
#include "titan/rl/tool_calls.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  const rl::AssistantTurn turn = rl::parse_tool_calls(text);
  TITAN_FUZZ_ASSERT(turn.content.size() <= size);
  TITAN_FUZZ_ASSERT(turn.tool_calls.size() <= rl::kMaxToolCallsPerTurn + size / rl::kToolCallOpen.size());
  for (const rl::ParsedToolCall& c : turn.tool_calls) {
    TITAN_FUZZ_ASSERT(c.call.has_value() == c.error.empty());
    TITAN_FUZZ_ASSERT(text.find(c.body) != std::string_view::npos);
    if (!c.call) continue;
    const rl::AssistantTurn again = rl::parse_tool_calls(rl::format_tool_call(*c.call));
    TITAN_FUZZ_ASSERT(again.tool_calls.size() == 1 && again.tool_calls[0].call);
    TITAN_FUZZ_ASSERT(again.tool_calls[0].call->name == c.call->name);
    TITAN_FUZZ_ASSERT(again.tool_calls[0].call->arguments == c.call->arguments);
  }
  return 0;
}
