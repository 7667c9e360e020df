#include "titan/rl/long_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/rl/json_config.h"
#include "titan/rl/text.h"

namespace titan::rl {

using nlohmann::json;

namespace {

constexpr std::string_view kDefaultSystem = "Find the value of the key in the list. Reply with <answer>VALUE</answer>.";
constexpr uint64_t kValidationStream = uint64_t{1} << 40;

// Sequential uniform draws from Philox 4x32-10 keyed by seed on one stream.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  int64_t below(int64_t n) {  // uniform in [0, n), n >= 1 (64-bit multiply-shift)
    const PhiloxCounter c = philox_draw(seed_, counter_++, stream_);
    const uint64_t u = (static_cast<uint64_t>(c[0]) << 32) | c[1];
    return static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(n)) >> 64);
  }

 private:
  uint64_t seed_, stream_, counter_ = 0;
};

// A lower-case key of 2-3 consonant-vowel syllables, e.g. "keprau".
std::string make_key(Draws& d) {
  static constexpr std::string_view kOnsets[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"};
  static constexpr std::string_view kVowels[] = {"a", "e", "i", "o", "u", "au", "ei"};
  const int syllables = 2 + static_cast<int>(d.below(2));
  std::string s;
  for (int i = 0; i < syllables; ++i) {
    s += kOnsets[d.below(std::size(kOnsets))];
    s += kVowels[d.below(std::size(kVowels))];
  }
  return s;
}

// One of the 52 ASCII letters.
std::string make_letter_key(Draws& d) {
  static constexpr std::string_view kLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  return std::string(1, kLetters[static_cast<size_t>(d.below(static_cast<int64_t>(kLetters.size())))]);
}

const json& pairs_of(const TaskSample& s) {
  TITAN_CHECK(s.prompt.is_object() && s.prompt.contains("pairs") && s.prompt["pairs"].is_array() &&
                  s.prompt.contains("query") && s.prompt["query"].is_string(),
              "long_context: sample '{}': prompt.pairs (an array) and prompt.query (a string) are required", s.id);
  return s.prompt["pairs"];
}

std::string answer_of(const TaskSample& s) {
  TITAN_CHECK(s.reference.is_object() && s.reference.contains("answer") && s.reference["answer"].is_string(),
              "long_context: sample '{}': reference.answer must be a string", s.id);
  return s.reference["answer"].get<std::string>();
}

// The strings of the array a (the sample's `what`); titan::Error naming it when an
// element is not a string.
std::vector<std::string> strings_of(const json& a, const char* what, const TaskSample& s) {
  std::vector<std::string> out;
  for (const json& e : a) {
    TITAN_CHECK(e.is_string(), "long_context: sample '{}': {} must be strings", s.id, what);
    out.push_back(e.get<std::string>());
  }
  return out;
}

// The values asked for, in turn order (reference.answers, or [reference.answer]).
std::vector<std::string> answers_of(const TaskSample& s) {
  if (!s.prompt.is_object() || !s.prompt.contains("queries")) return {answer_of(s)};
  TITAN_CHECK(s.reference.is_object() && s.reference.contains("answers") && s.reference["answers"].is_array(),
              "long_context: sample '{}': reference.answers (an array) is required with prompt.queries", s.id);
  return strings_of(s.reference["answers"], "reference.answers", s);
}

class LongContextSource final : public SampleSource {
 public:
  LongContextSource(LongContextConfig cfg, bool validation) : cfg_(std::move(cfg)), validation_(validation) {}
  std::string name() const override { return validation_ ? "long_context/validation" : "long_context/train"; }
  int64_t size() const override { return validation_ ? cfg_.num_validation : cfg_.num_samples; }
  TaskSample get(int64_t i) const override {
    TITAN_CHECK(i >= 0 && i < size(), "{} source: index {} outside [0, {})", name(), i, size());
    return make_long_context_sample(cfg_, i, validation_);
  }

 private:
  LongContextConfig cfg_;
  bool validation_;
};

}  // namespace

void LongContextConfig::validate() const {
  TITAN_CHECK(num_samples >= 1, "long_context config: num_samples must be >= 1, got {}", num_samples);
  TITAN_CHECK(num_validation >= 1, "long_context config: num_validation must be >= 1, got {}", num_validation);
  TITAN_CHECK(min_pairs >= 1 && min_pairs <= 20000, "long_context config: min_pairs must be in [1, 20000], got {}",
              min_pairs);
  TITAN_CHECK(max_pairs >= min_pairs && max_pairs <= 20000,
              "long_context config: max_pairs must be in [min_pairs={}, 20000], got {}", min_pairs, max_pairs);
  TITAN_CHECK(value_digits >= 1 && value_digits <= 9, "long_context config: value_digits must be in [1, 9], got {}",
              value_digits);
  TITAN_CHECK(key_style == "syllables" || key_style == "letter",
              "long_context config: key_style must be \"syllables\" or \"letter\", got '{}'", key_style);
  TITAN_CHECK(key_style != "letter" || max_pairs <= 52,
              "long_context config: key_style \"letter\" has 52 distinct keys, max_pairs is {}", max_pairs);
  TITAN_CHECK(questions >= 1 && questions <= min_pairs,
              "long_context config: questions must be in [1, min_pairs={}], got {}", min_pairs, questions);
  TITAN_CHECK(reference_reply == "answer" || reference_reply == "quote",
              "long_context config: reference_reply must be \"answer\" or \"quote\", got '{}'", reference_reply);
  TITAN_CHECK(haystack == "pairs" || haystack == "filler",
              "long_context config: haystack must be \"pairs\" or \"filler\", got '{}'", haystack);
  TITAN_CHECK(haystack != "filler" || questions == 1,
              "long_context config: haystack \"filler\" has one needle, so questions must be 1, got {}", questions);
}

LongContextConfig LongContextConfig::from_json(const json& j) {
  LongContextConfig c;
  JsonConfigReader r(j, "long_context config");
  r.read("seed", c.seed);
  r.read("num_samples", c.num_samples);
  r.read("num_validation", c.num_validation);
  r.read("min_pairs", c.min_pairs);
  r.read("max_pairs", c.max_pairs);
  r.read("value_digits", c.value_digits);
  r.read("system_prompt", c.system_prompt);
  r.read("key_style", c.key_style);
  r.read("questions", c.questions);
  r.read("reference_reply", c.reference_reply);
  r.read("haystack", c.haystack);
  r.finish();
  c.validate();
  return c;
}

namespace {

// A filler line of 2-3 made-up words ("tovi mipa"): lower-case letters and spaces only.
std::string make_filler_line(Draws& d) {
  const int words = 2 + static_cast<int>(d.below(2));
  std::string s = make_key(d);
  for (int i = 1; i < words; ++i) s += " " + make_key(d);
  return s;
}

// The "filler" haystack's sample: one needle pair among n - 1 filler lines.
TaskSample make_filler_sample(const LongContextConfig& cfg, Draws& d, int n, int64_t index, bool validation) {
  int64_t vmax = 1;
  for (int i = 0; i < cfg.value_digits; ++i) vmax *= 10;
  std::string key = cfg.key_style == "letter" ? make_letter_key(d) : make_key(d);
  std::string value = fmt::format("{:0{}d}", d.below(vmax), cfg.value_digits);
  json filler = json::array();
  for (int i = 1; i < n; ++i) filler.push_back(make_filler_line(d));
  const int64_t pos = d.below(n);
  TaskSample s;
  s.id = fmt::format("long_context/{}/{}", validation ? "validation" : "train", index);
  s.prompt = json{{"pairs", json::array({json::array({key, value})})}, {"query", key}, {"filler", std::move(filler)}};
  s.reference = json{{"answer", value}, {"position", pos}};
  s.metadata = json{{"index", index}, {"num_pairs", n}};
  return s;
}

}  // namespace

TaskSample make_long_context_sample(const LongContextConfig& cfg, int64_t index, bool validation) {
  TITAN_CHECK(index >= 0, "make_long_context_sample: index must be >= 0, got {}", index);
  Draws d(cfg.seed, (validation ? kValidationStream : 0) + static_cast<uint64_t>(index));
  const int n = cfg.min_pairs + static_cast<int>(d.below(cfg.max_pairs - cfg.min_pairs + 1));
  if (cfg.haystack == "filler") return make_filler_sample(cfg, d, n, index, validation);
  std::set<std::string> used;
  json pairs = json::array();
  int64_t vmax = 1;
  for (int i = 0; i < cfg.value_digits; ++i) vmax *= 10;
  for (int attempts = 0; static_cast<int>(pairs.size()) < n; ++attempts) {
    TITAN_CHECK(attempts < 100 * n + 1000, "make_long_context_sample: cannot draw {} distinct keys", n);
    std::string key = cfg.key_style == "letter" ? make_letter_key(d) : make_key(d);
    if (!used.insert(key).second) continue;
    std::string value = fmt::format("{:0{}d}", d.below(vmax), cfg.value_digits);
    pairs.push_back(json::array({std::move(key), std::move(value)}));
  }
  const int64_t pos = d.below(n);
  TaskSample s;
  s.id = fmt::format("long_context/{}/{}", validation ? "validation" : "train", index);
  s.prompt = json{{"pairs", pairs}, {"query", pairs[static_cast<size_t>(pos)][0]}};
  s.reference = json{{"answer", pairs[static_cast<size_t>(pos)][1]}, {"position", pos}};
  s.metadata = json{{"index", index}, {"num_pairs", n}};
  if (cfg.questions > 1) {
    // Further distinct positions, drawn after the first so that its sample stays the
    // one-question sample.
    std::vector<int64_t> positions{pos};
    while (static_cast<int>(positions.size()) < cfg.questions) {
      const int64_t p = d.below(n);
      if (std::find(positions.begin(), positions.end(), p) == positions.end()) positions.push_back(p);
    }
    json queries = json::array(), answers = json::array();
    for (const int64_t p : positions) {
      queries.push_back(pairs[static_cast<size_t>(p)][0]);
      answers.push_back(pairs[static_cast<size_t>(p)][1]);
    }
    s.prompt["queries"] = std::move(queries);
    s.reference["answers"] = std::move(answers);
  }
  return s;
}

std::vector<std::string> long_context_queries(const TaskSample& sample) {
  static_cast<void>(pairs_of(sample));  // checks prompt.query
  if (!sample.prompt.contains("queries")) return {sample.prompt["query"].get<std::string>()};
  const json& q = sample.prompt["queries"];
  TITAN_CHECK(q.is_array() && !q.empty(), "long_context: sample '{}': prompt.queries must be a non-empty array",
              sample.id);
  return strings_of(q, "prompt.queries", sample);
}

std::vector<std::string> long_context_reference_replies(const TaskSample& sample, const std::string& style) {
  const std::vector<std::string> keys = long_context_queries(sample), values = answers_of(sample);
  TITAN_CHECK(keys.size() == values.size(), "long_context: sample '{}': {} queries but {} answers", sample.id,
              keys.size(), values.size());
  std::vector<std::string> out;
  for (size_t i = 0; i < keys.size(); ++i)
    out.push_back((style == "quote" ? keys[i] + ": " + values[i] + "\n" : std::string()) + "<answer>" + values[i] +
                  "</answer>");
  return out;
}

std::string long_context_prompt(const TaskSample& sample) {
  const json& pairs = pairs_of(sample);
  std::string needles;
  for (const json& p : pairs) {
    TITAN_CHECK(p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string(),
                "long_context: sample '{}': each of prompt.pairs must be [key, value] strings", sample.id);
    needles += p[0].get_ref<const std::string&>() + ": " + p[1].get_ref<const std::string&>() + "\n";
  }
  std::string out = needles;
  if (sample.prompt.contains("filler")) {
    const std::vector<std::string> lines = strings_of(sample.prompt["filler"], "prompt.filler", sample);
    const json& position = sample.reference.is_object() ? sample.reference.value("position", json()) : json();
    TITAN_CHECK(position.is_number_integer() && position.get<int64_t>() >= 0 &&
                    position.get<size_t>() <= lines.size(),
                "long_context: sample '{}': a filler haystack needs reference.position in [0, {}]", sample.id,
                lines.size());
    out.clear();
    for (size_t i = 0; i <= lines.size(); ++i) {
      if (i == position.get<size_t>()) out += needles;
      if (i < lines.size()) out += lines[i] + "\n";
    }
  }
  return out + "\nWhat is the value of " + sample.prompt["query"].get<std::string>() + "?";
}

std::vector<ChatMessage> LongContextEnv::init(const TaskSample& sample) {
  queries_ = long_context_queries(sample);
  asked_ = 1;
  return {ChatMessage{"system", system_prompt_.empty() ? std::string(kDefaultSystem) : system_prompt_, std::nullopt},
          ChatMessage{"user", long_context_prompt(sample), std::nullopt}};
}

StepResult LongContextEnv::step(const std::string& /*reply*/) {
  if (asked_ >= queries_.size()) return StepResult{{}, true, false};
  const std::string& key = queries_[asked_++];
  return StepResult{{ChatMessage{"user", "What is the value of " + key + "?", std::nullopt}}, false, false};
}

double long_context_exact_match(const Rollout& r) {
  const std::vector<std::string> want = answers_of(r.sample);
  double right = 0.0;
  for (size_t i = 0; i < want.size() && i < r.completions.size(); ++i) {
    const std::vector<std::string> blocks = find_tag_blocks(r.completions[i], "answer");
    if (!blocks.empty() && strip(blocks.back()) == want[i]) right += 1.0;
  }
  return right / static_cast<double>(want.size());
}

TaskSpec make_long_context_task(const json& config) {
  const LongContextConfig cfg = LongContextConfig::from_json(config);
  const std::string system = cfg.system_prompt, style = cfg.reference_reply;
  return TaskSpec{"long_context",
                  std::make_shared<LongContextSource>(cfg, false),
                  std::make_shared<LongContextSource>(cfg, true),
                  [system] { return std::make_unique<LongContextEnv>(system); },
                  Rubric({RewardFn{"exact_match", 1.0, long_context_exact_match}}, RubricOptions{0.0, 0.0}),
                  cfg.questions,
                  [style](const TaskSample& s) { return long_context_reference_replies(s, style); }};
}

}  // namespace titan::rl
