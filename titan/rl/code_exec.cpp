#include "titan/rl/code_exec.h"

#include <atomic>
#include <fstream>
#include <thread>

#include "titan/config/resolve.h"
#include "titan/core/error.h"
#include "titan/rl/json_config.h"
#include "titan/rl/text.h"

namespace titan::rl {

using nlohmann::json;

CodeExecConfig CodeExecConfig::from_json(const json& j) {
  CodeExecConfig c;
  JsonConfigReader r(j, "code_exec config");
  r.read("python", c.python);
  r.read("timeout_s", c.limits.timeout_s);
  r.read("cpu_s", c.limits.cpu_s);
  r.read("memory_bytes", c.limits.memory_bytes);
  r.read("file_bytes", c.limits.file_bytes);
  r.read("max_processes", c.limits.max_processes);
  r.read("output_bytes", c.limits.output_bytes);
  r.read("test_timeout_s", c.test_timeout_s);
  r.read("include_challenge_tests", c.include_challenge_tests);
  r.finish();
  TITAN_CHECK(!c.python.empty() && c.python[0] == '/', "code_exec config: 'python' must be an absolute path, got '{}'",
              c.python);
  TITAN_CHECK(c.test_timeout_s >= 0, "code_exec config: 'test_timeout_s' must be >= 0, got {}", c.test_timeout_s);
  return c;
}

namespace {

// Universal newlines, as Python reads source: "\r\n" and a lone "\r" become "\n".
std::string crlf_to_lf(std::string s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') continue;
      out += '\n';
      continue;
    }
    out += s[i];
  }
  return out;
}

template <class Fn>
void for_each_jsonl(const std::string& path, const char* who, Fn&& fn) {
  std::ifstream in(path);
  TITAN_CHECK(in.good(), "{}: cannot open '{}'", who, path);
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail("{}: {}:{}: malformed JSON: {}", who, path, lineno, e.what());
    }
    TITAN_CHECK(j.is_object(), "{}: {}:{}: expected a JSON object", who, path, lineno);
    fn(j, lineno);
  }
}

const json& field(const json& j, const char* key, json::value_t type, const char* who, const std::string& path,
                  int64_t lineno) {
  TITAN_CHECK(j.contains(key) && j[key].type() == type, "{}: {}:{}: key '{}' must be a {}", who, path, lineno, key,
              json(type).type_name());
  return j[key];
}

std::vector<std::string> string_list(const json& j, const char* key, const char* who, const std::string& path,
                                     int64_t lineno) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  TITAN_CHECK(j[key].is_array(), "{}: {}:{}: key '{}' must be an array of strings", who, path, lineno, key);
  for (const json& t : j[key]) {
    TITAN_CHECK(t.is_string(), "{}: {}:{}: key '{}' must be an array of strings", who, path, lineno, key);
    out.push_back(crlf_to_lf(t.get<std::string>()));
  }
  return out;
}

std::string mbpp_split(int64_t task_id) {
  if (task_id <= 10) return "prompt";
  if (task_id <= 510) return "test";
  if (task_id <= 600) return "validation";
  return "train";
}

const json& ref(const TaskSample& s, const char* key) {
  TITAN_CHECK(s.reference.is_object() && s.reference.contains(key),
              "code_exec: sample '{}' has no reference.{}", s.id, key);
  return s.reference[key];
}

std::string kind_of(const TaskSample& s) {
  const json& k = ref(s, "kind");
  TITAN_CHECK(k.is_string() && (k == "mbpp" || k == "humaneval"),
              "code_exec: sample '{}': reference.kind must be \"mbpp\" or \"humaneval\"", s.id);
  return k.get<std::string>();
}

}  // namespace

std::vector<TaskSample> load_mbpp(const std::string& path, bool include_challenge_tests) {
  const char* who = "load_mbpp";
  std::vector<TaskSample> out;
  for_each_jsonl(path, who, [&](const json& j, int64_t lineno) {
    const std::string text = field(j, "text", json::value_t::string, who, path, lineno).get<std::string>();
    const std::string code = crlf_to_lf(field(j, "code", json::value_t::string, who, path, lineno).get<std::string>());
    TITAN_CHECK(j.contains("task_id") && j["task_id"].is_number_integer(), "{}: {}:{}: key 'task_id' must be an integer",
                who, path, lineno);
    const int64_t task_id = j["task_id"].get<int64_t>();
    std::string setup;
    if (j.contains("test_setup_code")) {
      TITAN_CHECK(j["test_setup_code"].is_string(), "{}: {}:{}: key 'test_setup_code' must be a string", who, path,
                  lineno);
      setup = crlf_to_lf(j["test_setup_code"].get<std::string>());
    }
    std::vector<std::string> tests = string_list(j, "test_list", who, path, lineno);
    TITAN_CHECK(!tests.empty(), "{}: {}:{}: key 'test_list' must be a non-empty array", who, path, lineno);
    const std::vector<std::string> shown = tests;
    if (include_challenge_tests)
      for (std::string& t : string_list(j, "challenge_test_list", who, path, lineno)) tests.push_back(std::move(t));
    TaskSample s;
    s.id = fmt::format("mbpp/{}", task_id);
    s.prompt = json{{"text", text}, {"tests_shown", shown}};
    s.reference = json{{"kind", "mbpp"}, {"solution", code}, {"tests", tests}, {"setup", setup}};
    s.metadata = json{{"file", path}, {"line", lineno}, {"task_id", task_id}, {"split", mbpp_split(task_id)}};
    out.push_back(std::move(s));
  });
  TITAN_CHECK(!out.empty(), "load_mbpp: '{}' has no samples", path);
  return out;
}

std::vector<TaskSample> load_humaneval(const std::string& path) {
  const char* who = "load_humaneval";
  std::vector<TaskSample> out;
  for_each_jsonl(path, who, [&](const json& j, int64_t lineno) {
    auto str = [&](const char* key) { return field(j, key, json::value_t::string, who, path, lineno).get<std::string>(); };
    const std::string task_id = str("task_id");
    const std::string prompt = str("prompt"), entry = str("entry_point");
    TaskSample s;
    const size_t slash = task_id.find('/');
    s.id = "humaneval/" + (slash == std::string::npos ? task_id : task_id.substr(slash + 1));
    s.prompt = json{{"prompt", prompt}, {"entry_point", entry}};
    s.reference = json{{"kind", "humaneval"}, {"solution", str("canonical_solution")}, {"prompt", prompt},
                       {"test", str("test")}, {"entry_point", entry}};
    s.metadata = json{{"file", path}, {"line", lineno}, {"task_id", task_id}, {"split", "test"}};
    out.push_back(std::move(s));
  });
  TITAN_CHECK(!out.empty(), "load_humaneval: '{}' has no samples", path);
  return out;
}

std::string mbpp_path() { return config::shared_data_dir() + "/mbpp/mbpp.jsonl"; }
std::string humaneval_path() { return config::shared_data_dir() + "/humaneval/HumanEval.jsonl"; }

std::string code_from_reply(std::string_view reply) {
  if (auto code = extract_fenced_code(reply, "python")) return *code;
  return std::string(reply);
}

std::string program_for(const TaskSample& sample, std::string_view reply) {
  const std::string code = code_from_reply(reply);
  if (kind_of(sample) == "mbpp") return code;
  const std::string prompt = ref(sample, "prompt").get<std::string>();
  const std::string entry = ref(sample, "entry_point").get<std::string>();
  if (code.find("def " + entry + "(") != std::string::npos) return prompt + "\n" + code;
  return prompt + code;
}

CodeRunResult run_code_tests(const TaskSample& sample, const std::string& program, const CodeExecConfig& cfg) {
  const std::string kind = kind_of(sample);
  json task{{"program", program}, {"test_timeout_s", cfg.test_timeout_s}};
  if (kind == "mbpp") {
    task["tests"] = ref(sample, "tests");
    task["setup"] = ref(sample, "setup");
    task["check"] = nullptr;
  } else {
    task["check"] = json{{"test", ref(sample, "test")},
                         {"entry_point", ref(sample, "entry_point")},
                         {"prompt", ref(sample, "prompt")}};
  }
  CodeRunResult out;
  out.sandbox = run_sandboxed({cfg.python, "-I", "-S", "-B", "harness.py"},
                              {{"harness.py", code_exec_harness_source()}, {"task.json", task.dump()}}, cfg.limits);
  const SandboxResult& sb = out.sandbox;
  json report;
  bool have_report = false;
  if (!sb.result_text.empty() && !sb.result_truncated) {
    try {
      report = json::parse(sb.result_text);
      have_report = report.is_object() && ((report.contains("tests") && report["tests"].is_array()) ||
                                           (report.contains("grader_error") && report["grader_error"].is_string()));
    } catch (const json::exception&) {
      have_report = false;
    }
  }
  if (have_report && report.contains("tests")) {
    for (const json& t : report["tests"]) {
      const bool ok = t.is_object() && t.value("ok", false);
      out.passed += ok ? 1 : 0;
      out.test_errors.push_back(ok || !t.contains("error") || !t["error"].is_string() ? std::string()
                                                                                       : t["error"].get<std::string>());
    }
    out.total = static_cast<int>(out.test_errors.size());
  } else {
    out.total = kind == "mbpp" ? static_cast<int>(ref(sample, "tests").size()) : 0;
  }
  if (!sb.started) {
    out.reason = sb.describe();
  } else if (sb.timed_out || sb.signal != 0) {
    out.reason = sb.describe();
  } else if (!have_report) {
    std::string tail = sb.stderr_text.size() > 300 ? sb.stderr_text.substr(sb.stderr_text.size() - 300)
                                                    : sb.stderr_text;
    out.reason = fmt::format("no test report ({}){}{}", sb.describe(), tail.empty() ? "" : ": ", strip(tail));
  } else if (report.contains("grader_error") && report["grader_error"].is_string()) {
    out.reason = "grader failed: " + report["grader_error"].get<std::string>();
  } else if (report.contains("program_error") && report["program_error"].is_string()) {
    out.reason = "program failed: " + report["program_error"].get<std::string>();
  }
  if (!out.reason.empty()) out.passed = 0;
  out.run_ok = out.reason.empty();
  return out;
}

std::vector<CodeRunResult> run_code_tests_parallel(const std::vector<TaskSample>& samples,
                                                   const std::vector<std::string>& programs,
                                                   const CodeExecConfig& cfg, int workers) {
  TITAN_CHECK(samples.size() == programs.size(), "run_code_tests_parallel: {} samples but {} programs",
              samples.size(), programs.size());
  TITAN_CHECK(workers >= 1, "run_code_tests_parallel: workers must be >= 1, got {}", workers);
  for (const TaskSample& s : samples) kind_of(s);  // validate before starting threads
  std::vector<CodeRunResult> out(samples.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < samples.size();) out[i] = run_code_tests(samples[i], programs[i], cfg);
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return out;
}

double code_exec_reward(const Rollout& r, const CodeExecConfig& cfg) {
  TITAN_CHECK(!r.completions.empty(), "code_exec_reward: rollout of sample '{}' has no completion", r.sample.id);
  const CodeRunResult res = run_code_tests(r.sample, program_for(r.sample, r.completions.back()), cfg);
  TITAN_CHECK(res.run_ok, "code_exec_reward: sample '{}': {}", r.sample.id, res.reason);
  TITAN_CHECK(res.total > 0, "code_exec_reward: sample '{}': no tests ran", r.sample.id);
  return res.fraction();
}

std::vector<ChatMessage> CodeExecEnv::init(const TaskSample& sample) {
  const std::string kind = kind_of(sample);
  std::vector<ChatMessage> out;
  if (!cfg_.system_prompt.empty()) out.push_back(ChatMessage{"system", cfg_.system_prompt, std::nullopt});
  std::string user;
  const json& p = sample.prompt;
  if (kind == "mbpp") {
    TITAN_CHECK(p.is_object() && p.contains("text") && p["text"].is_string() && p.contains("tests_shown") &&
                    p["tests_shown"].is_array(),
                "CodeExecEnv::init: sample '{}' needs prompt.text and prompt.tests_shown", sample.id);
    user = p["text"].get<std::string>() + "\nYour code should pass these tests:\n\n";
    for (const json& t : p["tests_shown"]) user += t.get<std::string>() + "\n";
    user += "\nWrite the Python code in a ```python code block.";
  } else {
    TITAN_CHECK(p.is_object() && p.contains("prompt") && p["prompt"].is_string(),
                "CodeExecEnv::init: sample '{}' needs prompt.prompt", sample.id);
    user = "Complete the following Python function. Reply with the complete function (signature included) in a "
           "```python code block.\n\n```python\n" +
           p["prompt"].get<std::string>() + "```";
  }
  out.push_back(ChatMessage{"user", std::move(user), std::nullopt});
  return out;
}

std::string code_reference_reply(const TaskSample& sample) {
  const std::string kind = kind_of(sample);
  std::string code = ref(sample, "solution").get<std::string>();
  if (kind == "humaneval") code = ref(sample, "prompt").get<std::string>() + code;
  if (code.empty() || code.back() != '\n') code += '\n';
  return "```python\n" + code + "```";
}

}  // namespace titan::rl
