#include "titan/infer/request_jsonl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/json_read.h"

namespace titan::infer {

namespace {

using json = nlohmann::json;

struct Line {
  const json& j;
  const std::string& where;

  const json* get(const char* key) const {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  }
  // A JSON integer in [lo, hi]; a float (even 2.0), a string or an out-of-range
  // value is an error.
  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo) return static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (x >= lo && x <= hi) return x;
    } else {
      fail("{}: \"{}\" must be an integer, got {}", where, field, json_excerpt(v));
    }
    fail("{}: \"{}\" must be in [{}, {}], got {}", where, field, lo, hi, json_excerpt(v));
  }
  std::vector<int32_t> token_ids(const char* key) const {
    const json& v = *get(key);
    if (!v.is_array()) fail("{}: \"{}\" must be a list of token ids, got {}", where, key, json_excerpt(v));
    std::vector<int32_t> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(static_cast<int32_t>(
          integer(v[i], fmt::format("{}[{}]", key, i), 0, std::numeric_limits<int32_t>::max())));
    return out;
  }
  double number(const char* key) const {
    const json& v = *get(key);
    if (!v.is_number()) fail("{}: \"{}\" must be a number, got {}", where, key, json_excerpt(v));
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail("{}: \"{}\" must be finite, got {}", where, key, json_excerpt(v));
    return x;
  }
  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail("{}: \"{}\" must be a string, got {}", where, field, json_excerpt(v));
    return v.get<std::string>();
  }
};

}  // namespace

JsonlRequest parse_request_line(std::string_view line, const SamplingParams& defaults, const std::string& where) {
  const json j = parse_json(line, where);
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", where, j.type_name());
  const Line l{j, where};
  // A misspelled field would otherwise fall back to its default without a word.
  static const std::vector<std::string> kKnown = {"prompt", "prompt_token_ids", "n", "max_tokens", "temperature",
                                                  "top_p", "top_k", "min_p", "seed", "logprobs", "ignore_eos",
                                                  "stop", "stop_token_ids"};
  for (const auto& [k, v] : j.items())
    if (std::find(kKnown.begin(), kKnown.end(), k) == kKnown.end())
      fail("{}: unknown field \"{}\" (known: {})", where, k, fmt::join(kKnown, ", "));
  JsonlRequest r;
  if (const json* p = l.get("prompt")) {
    r.prompt = l.string(*p, "prompt");
  } else if (l.get("prompt_token_ids")) {
    r.prompt_token_ids = l.token_ids("prompt_token_ids");
  } else {
    fail("{}: expected a \"prompt\" (string) or \"prompt_token_ids\" (list) field", where);
  }
  SamplingParams& p = r.params;
  p = defaults;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (const json* v = l.get("n")) p.n = static_cast<int>(l.integer(*v, "n", 1, kMaxSamples));
  if (const json* v = l.get("max_tokens"))
    p.max_tokens = l.integer(*v, "max_tokens", 1, std::numeric_limits<int64_t>::max());
  if (l.get("temperature")) p.temperature = l.number("temperature");
  if (l.get("top_p")) p.top_p = l.number("top_p");
  if (const json* v = l.get("top_k")) p.top_k = static_cast<int>(l.integer(*v, "top_k", -1, kIntMax));
  if (l.get("min_p")) p.min_p = l.number("min_p");
  if (const json* v = l.get("seed")) {
    if (v->is_number_unsigned()) p.seed = v->get<uint64_t>();
    else p.seed = static_cast<uint64_t>(l.integer(*v, "seed", 0, std::numeric_limits<int64_t>::max()));
  }
  if (const json* v = l.get("logprobs")) p.logprobs = static_cast<int>(l.integer(*v, "logprobs", 0, 20));
  if (const json* v = l.get("ignore_eos")) {
    if (!v->is_boolean()) fail("{}: \"ignore_eos\" must be true or false, got {}", where, json_excerpt(*v));
    p.ignore_eos = v->get<bool>();
  }
  if (const json* v = l.get("stop")) {
    if (v->is_string()) {
      p.stop = {v->get<std::string>()};
    } else if (v->is_array()) {
      p.stop.clear();
      for (size_t i = 0; i < v->size(); ++i) p.stop.push_back(l.string((*v)[i], fmt::format("stop[{}]", i)));
    } else {
      fail("{}: \"stop\" must be a string or a list of strings, got {}", where, json_excerpt(*v));
    }
  }
  if (l.get("stop_token_ids")) {
    const std::vector<int32_t> ids = l.token_ids("stop_token_ids");
    p.stop_token_ids.insert(p.stop_token_ids.end(), ids.begin(), ids.end());
  }
  return r;
}

std::vector<JsonlRequest> parse_request_jsonl(std::string_view text, const SamplingParams& defaults,
                                              const std::string& name) {
  std::vector<JsonlRequest> out;
  size_t pos = 0;
  for (int64_t lineno = 1; pos < text.size(); ++lineno) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    out.push_back(parse_request_line(line, defaults, fmt::format("{}:{}", name, lineno)));
  }
  return out;
}

}  // namespace titan::infer
