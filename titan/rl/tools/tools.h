// Tools for tool-use episodes: named functions of a call's JSON arguments that
// return text, and the harness step that turns a parsed call (tool_calls.h) into the
// content of a `tool` message.
//
//   ToolSet tools;
//   tools.add(search_tool(index, 3));
//   tools.add(calculator_tool());
//   ToolResult r = tools.run(parsed_call);   // r.text -> ChatMessage{"tool", r.text}
//
// Failure containment: a malformed call (the parser's error), an unknown tool, wrong
// arguments, and a tool that throws (any exception) or times out give ok = false and
// text "error: <reason>" (one line), which the model sees as the tool's answer; run()
// never throws. Tools are called concurrently from rollout threads and must be
// thread-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/sandbox.h"
#include "titan/rl/tool_calls.h"
#include "titan/rl/tools/search_index.h"

namespace titan::rl {

struct Tool {
  std::string name;         // as the model calls it
  std::string description;  // one line for the system prompt, e.g. "search(query): ..."
  // The result text for the call's arguments (a JSON object); throws titan::Error
  // (or anything) for bad arguments or a failed run.
  std::function<std::string(const nlohmann::json& arguments)> fn;
};

struct ToolResult {
  std::string tool;  // the called name ("" when the call was malformed)
  std::string text;  // the tool message content
  bool ok = false;
  double ms = 0.0;   // wall time of the tool function
};

class ToolSet {
 public:
  // Throws titan::Error for an empty or duplicate name or an empty fn.
  void add(Tool tool);
  ToolResult run(const ParsedToolCall& call) const;
  std::vector<std::string> names() const;
  const std::vector<Tool>& tools() const { return tools_; }

 private:
  std::vector<Tool> tools_;
};

// Wall time (ns) spent in tool functions by every ToolSet::run of this process so far
// (the tools part of an RL step's time is the difference over the step).
int64_t tool_time_ns();

// Tool results longer than this are cut (with a note saying so).
inline constexpr size_t kToolResultMaxBytes = 4096;

// search(query, k?): the k best documents (default_k when absent; 1 <= k <= 10) of
// the index for the query's words, one per line "i. <title>: <body>", or "no
// results". Arguments other than query (string) and k (integer) are errors.
Tool search_tool(std::shared_ptr<const SearchIndex> index, int default_k);

// calculator(expression): calculate() (tools/calculator.h), printed by format_number.
Tool calculator_tool();

// python(code): runs the code with `python -I -S -B main.py` in the sandbox
// (sandbox.h) under `limits`; the result is its stdout, plus its stderr and the exit
// status when it did not exit 0. A timeout, a signal or a sandbox that could not
// start is an error.
Tool python_tool(std::string python, SandboxLimits limits);

// The tool descriptions, one per line (for a system prompt).
std::string describe_tools(const ToolSet& tools);

}  // namespace titan::rl
