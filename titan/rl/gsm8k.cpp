#include "titan/rl/gsm8k.h"

#include <fstream>

#include "titan/config/resolve.h"
#include "titan/core/error.h"
#include "titan/rl/text.h"

namespace titan::rl {

using nlohmann::json;

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// If a number starts at text[i], returns its length, else 0 (see gsm8k.h).
size_t number_at(std::string_view t, size_t i) {
  size_t p = i;
  if (p < t.size() && (t[p] == '-' || t[p] == '+')) {
    if (i > 0 && (is_alnum(t[i - 1]) || t[i - 1] == ')')) return 0;  // "16-3": a minus, not a sign
    ++p;
  }
  if (p < t.size() && t[p] == '.') {  // ".5"
    if (p + 1 < t.size() && is_digit(t[p + 1]) && (p == 0 || !is_digit(t[p - 1]))) {
      size_t q = p + 1;
      while (q < t.size() && is_digit(t[q])) ++q;
      return q - i;
    }
    return 0;
  }
  if (p >= t.size() || !is_digit(t[p])) return 0;
  size_t q = p;
  while (q < t.size() && is_digit(t[q])) ++q;
  if (q - p <= 3) {  // thousands groups: 1,234,567 (a group is exactly 3 digits)
    while (q + 3 < t.size() && t[q] == ',' && is_digit(t[q + 1]) && is_digit(t[q + 2]) && is_digit(t[q + 3]) &&
           (q + 4 == t.size() || !is_digit(t[q + 4])))
      q += 4;
  }
  if (q + 1 < t.size() && t[q] == '.' && is_digit(t[q + 1])) {
    ++q;
    while (q < t.size() && is_digit(t[q])) ++q;
  }
  return q - i;
}

// All numbers of t, left to right (non-overlapping).
std::vector<std::string_view> numbers_in(std::string_view t) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < t.size();) {
    // A number cannot start right after a digit (that digit's number was shorter).
    const bool boundary = i == 0 || !is_digit(t[i - 1]);
    const size_t n = boundary ? number_at(t, i) : 0;
    if (n) {
      out.push_back(t.substr(i, n));
      i += n;
    } else {
      ++i;
    }
  }
  return out;
}

std::optional<std::string> first_number(std::string_view t) {
  for (std::string_view n : numbers_in(t)) return gsm8k_normalize_number(n);
  return std::nullopt;
}

// The content of the last \boxed{...} with balanced braces, or nullopt.
std::optional<std::string_view> last_boxed(std::string_view t) {
  const size_t at = t.rfind("\\boxed{");
  if (at == std::string_view::npos) return std::nullopt;
  const size_t start = at + 7;
  int depth = 1;
  for (size_t i = start; i < t.size(); ++i) {
    if (t[i] == '{') ++depth;
    if (t[i] == '}' && --depth == 0) return t.substr(start, i - start);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> gsm8k_normalize_number(std::string_view s) {
  std::string c;
  for (char ch : s)
    if (ch != '$' && ch != ',') c += ch;
  bool neg = false;
  size_t p = 0;
  if (p < c.size() && (c[p] == '-' || c[p] == '+')) neg = c[p++] == '-';
  std::string ip, fp;
  while (p < c.size() && is_digit(c[p])) ip += c[p++];
  if (p < c.size() && c[p] == '.') {
    ++p;
    while (p < c.size() && is_digit(c[p])) fp += c[p++];
    if (fp.empty()) return std::nullopt;
  }
  if (p != c.size() || (ip.empty() && fp.empty())) return std::nullopt;
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  const size_t nz = ip.find_first_not_of('0');
  std::string out;
  if (neg && !(nz == std::string::npos && fp.empty())) out.push_back('-');
  if (nz == std::string::npos) {
    out.push_back('0');
  } else {
    out.append(ip, nz, std::string::npos);
  }
  if (!fp.empty()) {
    out.push_back('.');
    out.append(fp);
  }
  return out;
}

bool gsm8k_same_number(std::string_view a, std::string_view b) {
  const auto na = gsm8k_normalize_number(a), nb = gsm8k_normalize_number(b);
  return na && nb && *na == *nb;
}

std::optional<std::string> gsm8k_extract_answer(std::string_view text) {
  if (const size_t at = text.rfind("####"); at != std::string_view::npos)
    if (auto n = first_number(text.substr(at + 4))) return n;
  if (const auto boxed = last_boxed(text))
    if (auto n = first_number(*boxed)) return n;
  const auto all = numbers_in(text);
  if (all.empty()) return std::nullopt;
  return gsm8k_normalize_number(all.back());
}

std::vector<TaskSample> load_gsm8k(const std::string& path, const std::string& split) {
  std::ifstream in(path);
  TITAN_CHECK(in.good(), "load_gsm8k: cannot open '{}'", path);
  std::vector<TaskSample> out;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail("load_gsm8k: {}:{}: malformed JSON: {}", path, lineno, e.what());
    }
    for (const char* key : {"question", "answer"})
      TITAN_CHECK(j.is_object() && j.contains(key) && j[key].is_string(),
                  "load_gsm8k: {}:{}: key '{}' must be a string", path, lineno, key);
    const std::string solution = j["answer"].get<std::string>();
    const size_t at = solution.rfind("####");
    TITAN_CHECK(at != std::string::npos, "load_gsm8k: {}:{}: answer has no '####'", path, lineno);
    const auto answer = gsm8k_normalize_number(strip(std::string_view(solution).substr(at + 4)));
    TITAN_CHECK(answer.has_value(), "load_gsm8k: {}:{}: the text after '####' is not a number: '{}'", path, lineno,
                solution.substr(at + 4));
    TaskSample s;
    s.id = fmt::format("gsm8k/{}/{}", split, out.size());
    s.prompt = json{{"question", j["question"]}};
    s.reference = json{{"answer", *answer}, {"solution", solution}};
    s.metadata = json{{"file", path}, {"line", lineno}, {"split", split}};
    out.push_back(std::move(s));
  }
  TITAN_CHECK(!out.empty(), "load_gsm8k: '{}' has no samples", path);
  return out;
}

std::string gsm8k_path(const std::string& split) {
  TITAN_CHECK(split == "train" || split == "test", "gsm8k_path: split must be 'train' or 'test', got '{}'", split);
  return config::shared_data_dir() + "/gsm8k/" + split + ".jsonl";
}

std::vector<ChatMessage> Gsm8kEnv::init(const TaskSample& sample) {
  TITAN_CHECK(sample.prompt.is_object() && sample.prompt.contains("question") &&
                  sample.prompt["question"].is_string(),
              "Gsm8kEnv::init: sample '{}' has no string prompt.question", sample.id);
  std::vector<ChatMessage> out;
  if (!cfg_.system_prompt.empty()) out.push_back(ChatMessage{"system", cfg_.system_prompt, std::nullopt});
  std::string user = sample.prompt["question"].get<std::string>();
  if (!cfg_.instruction.empty()) user += "\n\n" + cfg_.instruction;
  out.push_back(ChatMessage{"user", std::move(user), std::nullopt});
  return out;
}

double gsm8k_reward(const Rollout& r) {
  TITAN_CHECK(r.sample.reference.is_object() && r.sample.reference.contains("answer") &&
                  r.sample.reference["answer"].is_string(),
              "gsm8k_reward: sample '{}' has no string reference.answer", r.sample.id);
  TITAN_CHECK(!r.completions.empty(), "gsm8k_reward: rollout of sample '{}' has no completion", r.sample.id);
  const auto got = gsm8k_extract_answer(r.completions.back());
  if (!got) return 0.0;
  return gsm8k_same_number(*got, r.sample.reference["answer"].get<std::string>()) ? 1.0 : 0.0;
}

std::string gsm8k_reference_reply(const TaskSample& sample) {
  TITAN_CHECK(sample.reference.is_object() && sample.reference.contains("solution") &&
                  sample.reference["solution"].is_string(),
              "gsm8k_reference_reply: sample '{}' has no string reference.solution", sample.id);
  const std::string sol = sample.reference["solution"].get<std::string>();
  std::string out;
  for (size_t i = 0; i < sol.size();) {
    if (sol.compare(i, 2, "<<") == 0) {
      const size_t end = sol.find(">>", i + 2);
      if (end != std::string::npos) {
        i = end + 2;
        continue;
      }
    }
    out += sol[i++];
  }
  return out;
}

}  // namespace titan::rl
