#include "titan/rl/long_context.h"

#include <fmt/format.h>

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
  r.finish();
  c.validate();
  return c;
}

TaskSample make_long_context_sample(const LongContextConfig& cfg, int64_t index, bool validation) {
  TITAN_CHECK(index >= 0, "make_long_context_sample: index must be >= 0, got {}", index);
  Draws d(cfg.seed, (validation ? kValidationStream : 0) + static_cast<uint64_t>(index));
  const int n = cfg.min_pairs + static_cast<int>(d.below(cfg.max_pairs - cfg.min_pairs + 1));
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
  return s;
}

std::string long_context_prompt(const TaskSample& sample) {
  const json& pairs = pairs_of(sample);
  std::string out;
  for (const json& p : pairs) {
    TITAN_CHECK(p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string(),
                "long_context: sample '{}': each of prompt.pairs must be [key, value] strings", sample.id);
    out += p[0].get_ref<const std::string&>() + ": " + p[1].get_ref<const std::string&>() + "\n";
  }
  return out + "\nWhat is the value of " + sample.prompt["query"].get<std::string>() + "?";
}

std::vector<ChatMessage> LongContextEnv::init(const TaskSample& sample) {
  return {ChatMessage{"system", system_prompt_.empty() ? std::string(kDefaultSystem) : system_prompt_, std::nullopt},
          ChatMessage{"user", long_context_prompt(sample), std::nullopt}};
}

double long_context_exact_match(const Rollout& r) {
  const std::string want = answer_of(r.sample);
  if (r.completions.empty()) return 0.0;
  const std::vector<std::string> blocks = find_tag_blocks(r.completions.back(), "answer");
  return !blocks.empty() && strip(blocks.back()) == want ? 1.0 : 0.0;
}

TaskSpec make_long_context_task(const json& config) {
  const LongContextConfig cfg = LongContextConfig::from_json(config);
  const std::string system = cfg.system_prompt;
  return TaskSpec{"long_context",
                  std::make_shared<LongContextSource>(cfg, false),
                  std::make_shared<LongContextSource>(cfg, true),
                  [system] { return std::make_unique<LongContextEnv>(system); },
                  Rubric({RewardFn{"exact_match", 1.0, long_context_exact_match}}, RubricOptions{0.0, 0.0}),
                  1,
                  [](const TaskSample& s) { return std::vector<std::string>{"<answer>" + answer_of(s) + "</answer>"}; }};
}

}  // namespace titan::rl
