#include "titan/rl/tools/tools.h"

#include <atomic>
#include <chrono>

#include "titan/core/error.h"
#include "titan/rl/rollout.h"
#include "titan/rl/tools/calculator.h"

namespace titan::rl {

using nlohmann::json;

namespace {

std::atomic<int64_t> g_tool_ns{0};

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string cut(std::string s) {
  if (s.size() <= kToolResultMaxBytes) return s;
  const size_t n = s.size();
  s.resize(kToolResultMaxBytes);
  // Do not end inside a UTF-8 sequence.
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
  if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
  return s + fmt::format("\n[output cut at {} of {} bytes]", s.size(), n);
}

// Checks that `args` has only the keys in `known`; titan::Error naming the first other one.
void only_keys(const json& args, std::string_view tool, std::initializer_list<std::string_view> known) {
  for (auto it = args.begin(); it != args.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    TITAN_CHECK(ok, "{}: unknown argument '{}' (expected {})", tool, it.key(), fmt::join(known, ", "));
  }
}

const std::string& string_arg(const json& args, std::string_view tool, const char* key) {
  TITAN_CHECK(args.contains(key), "{}: missing argument '{}'", tool, key);
  const json& v = args[key];
  TITAN_CHECK(v.is_string(), "{}: argument '{}' must be a string, got {}", tool, key, v.type_name());
  return v.get_ref<const std::string&>();
}

}  // namespace

int64_t tool_time_ns() { return g_tool_ns.load(); }

void ToolSet::add(Tool tool) {
  TITAN_CHECK(!tool.name.empty(), "ToolSet::add: empty tool name");
  TITAN_CHECK(static_cast<bool>(tool.fn), "ToolSet::add: tool '{}' has no function", tool.name);
  for (const Tool& t : tools_) TITAN_CHECK(t.name != tool.name, "ToolSet::add: duplicate tool '{}'", tool.name);
  tools_.push_back(std::move(tool));
}

std::vector<std::string> ToolSet::names() const {
  std::vector<std::string> out;
  for (const Tool& t : tools_) out.push_back(t.name);
  return out;
}

ToolResult ToolSet::run(const ParsedToolCall& call) const {
  ToolResult r;
  if (!call.call) {
    r.text = "error: " + one_line(call.error);
    return r;
  }
  r.tool = call.call->name;
  const Tool* tool = nullptr;
  for (const Tool& t : tools_)
    if (t.name == call.call->name) tool = &t;
  if (!tool) {
    r.text = fmt::format("error: unknown tool '{}' (known: {})", one_line(call.call->name), fmt::join(names(), ", "));
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    r.text = cut(tool->fn(call.call->arguments));
    r.ok = true;
  } catch (...) {
    r.text = "error: " + one_line(exception_text());
  }
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  g_tool_ns.fetch_add(ns);
  r.ms = static_cast<double>(ns) / 1e6;
  return r;
}

std::string describe_tools(const ToolSet& tools) {
  std::string out;
  for (const Tool& t : tools.tools()) out += "- " + t.description + "\n";
  return out;
}

Tool search_tool(std::shared_ptr<const SearchIndex> index, int default_k) {
  TITAN_CHECK(index != nullptr, "search_tool: no index");
  TITAN_CHECK(default_k >= 1 && default_k <= 10, "search_tool: default k must be in [1, 10], got {}", default_k);
  return Tool{"search", "search(query): the best matching documents of the knowledge base",
              [index, default_k](const json& args) {
                only_keys(args, "search", {"query", "k"});
                const std::string& query = string_arg(args, "search", "query");
                int k = default_k;
                if (args.contains("k")) {
                  const json& v = args["k"];
                  TITAN_CHECK(v.is_number_integer(), "search: argument 'k' must be an integer, got {}", v.dump());
                  const int64_t kk = v.get<int64_t>();
                  TITAN_CHECK(kk >= 1 && kk <= 10, "search: argument 'k' must be in [1, 10], got {}", kk);
                  k = static_cast<int>(kk);
                }
                const std::vector<SearchHit> hits = index->search(query, k);
                if (hits.empty()) return std::string("no results");
                std::string out;
                for (size_t i = 0; i < hits.size(); ++i)
                  out += fmt::format("{}{}. {}: {}", i ? "\n" : "", i + 1, hits[i].title, hits[i].body);
                return out;
              }};
}

Tool calculator_tool() {
  return Tool{"calculator", "calculator(expression): + - * / ^ and parentheses on numbers", [](const json& args) {
                only_keys(args, "calculator", {"expression"});
                return format_number(calculate(string_arg(args, "calculator", "expression")));
              }};
}

Tool python_tool(std::string python, SandboxLimits limits) {
  TITAN_CHECK(!python.empty() && python[0] == '/', "python_tool: the interpreter must be an absolute path, got '{}'",
              python);
  return Tool{"python", "python(code): runs Python 3 code and returns what it prints",
              [python, limits](const json& args) {
                only_keys(args, "python", {"code"});
                const std::string& code = string_arg(args, "python", "code");
                const SandboxResult r =
                    run_sandboxed({python, "-I", "-S", "-B", "main.py"}, {SandboxFile{"main.py", code}}, limits);
                TITAN_CHECK(r.started, "python: the sandbox could not start: {}", r.error);
                TITAN_CHECK(!r.timed_out, "python: timed out after {} s", limits.timeout_s);
                TITAN_CHECK(!r.memory_exceeded, "python: memory limit of {} bytes exceeded", limits.memory_bytes);
                if (r.ok()) return r.stdout_text;
                std::string out = r.stdout_text;
                if (!out.empty() && out.back() != '\n') out += '\n';
                out += r.stderr_text;
                if (!out.empty() && out.back() != '\n') out += '\n';
                return out + "[" + r.describe() + "]";
              }};
}

}  // namespace titan::rl
