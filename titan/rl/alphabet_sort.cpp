#include "titan/rl/alphabet_sort.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/rl/difflib.h"
#include "titan/rl/json_config.h"
#include "titan/rl/text.h"

namespace titan::rl {

using nlohmann::json;

void AlphabetSortConfig::validate() const {
  TITAN_CHECK(name_pool == 0 || (name_pool >= 2 && name_pool <= 300),
              "AlphabetSortConfig: name_pool must be 0 (all) or in [2, 300], got {}", name_pool);
  TITAN_CHECK(num_samples >= 1, "AlphabetSortConfig: num_samples must be >= 1, got {}", num_samples);
  TITAN_CHECK(min_turns >= 1 && min_turns <= max_turns,
              "AlphabetSortConfig: need 1 <= min_turns <= max_turns, got {} and {}", min_turns, max_turns);
  TITAN_CHECK(min_names >= 1 && min_names <= max_names,
              "AlphabetSortConfig: need 1 <= min_names <= max_names, got {} and {}", min_names, max_names);
  TITAN_CHECK(max_turns == 1 || (min_new_names >= 1 && min_new_names <= max_new_names),
              "AlphabetSortConfig: need 1 <= min_new_names <= max_new_names, got {} and {}", min_new_names,
              max_new_names);
  const int64_t most = max_names + static_cast<int64_t>(max_turns - 1) * std::max(max_new_names, 0);
  TITAN_CHECK(most <= 200, "AlphabetSortConfig: up to {} names per sample; at most 200 supported", most);
  TITAN_CHECK(name_pool == 0 || most <= int64_t{name_pool} * name_pool,
              "AlphabetSortConfig: name_pool {} gives {} distinct names, fewer than the {} a sample can need",
              name_pool, int64_t{name_pool} * name_pool, most);
  TITAN_CHECK(std::isfinite(similarity_power) && similarity_power > 0,
              "AlphabetSortConfig: similarity_power must be > 0, got {}", similarity_power);
  TITAN_CHECK(similarity == "lines" || similarity == "text",
              "AlphabetSortConfig: similarity must be 'lines' or 'text', got '{}'", similarity);
  TITAN_CHECK(std::isfinite(sft_wrong_key_frac) && sft_wrong_key_frac >= 0 && sft_wrong_key_frac <= 1,
              "AlphabetSortConfig: sft_wrong_key_frac must be in [0, 1], got {}", sft_wrong_key_frac);
  TITAN_CHECK(std::isfinite(sft_untagged_frac) && sft_untagged_frac >= 0 &&
                  sft_wrong_key_frac + sft_untagged_frac <= 1,
              "AlphabetSortConfig: sft_untagged_frac must be >= 0 with sft_wrong_key_frac + sft_untagged_frac <= 1, "
              "got {} and {}", sft_untagged_frac, sft_wrong_key_frac);
}

AlphabetSortConfig AlphabetSortConfig::from_json(const json& j) {
  AlphabetSortConfig c;
  JsonConfigReader r(j, "alphabet_sort config");
  r.read("seed", c.seed);
  r.read("num_samples", c.num_samples);
  r.read("min_turns", c.min_turns);
  r.read("max_turns", c.max_turns);
  r.read("min_names", c.min_names);
  r.read("max_names", c.max_names);
  r.read("min_new_names", c.min_new_names);
  r.read("max_new_names", c.max_new_names);
  r.read("similarity_power", c.similarity_power);
  r.read("similarity", c.similarity);
  r.read("name_pool", c.name_pool);
  r.read("sft_wrong_key_frac", c.sft_wrong_key_frac);
  r.read("sft_untagged_frac", c.sft_untagged_frac);
  r.finish();
  c.validate();
  return c;
}

namespace {

// Sequential 32-bit draws from Philox keyed by seed, on stream `index`.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t index) : seed_(seed), stream_(index) {}
  uint32_t next_u32() {
    if (have_ == 0) {
      buf_ = philox_draw(seed_, counter_++, stream_);
      have_ = 4;
    }
    return buf_[static_cast<size_t>(4 - have_--)];
  }
  // Uniform in [0, n), n >= 1 (64-bit multiply-shift).
  int64_t below(int64_t n) {
    const uint64_t u = (static_cast<uint64_t>(next_u32()) << 32) | next_u32();
    return static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(n)) >> 64);
  }
  int uniform_int(int lo, int hi) { return lo + static_cast<int>(below(hi - lo + 1)); }

 private:
  uint64_t seed_, stream_, counter_ = 0;
  PhiloxCounter buf_{};
  int have_ = 0;
};

struct Person {
  std::string first, last;
  std::string display() const { return first + last; }
};

std::vector<std::vector<std::string>> string_lists(const json& j, std::string_view what, const std::string& id) {
  TITAN_CHECK(j.is_array() && !j.empty(), "alphabet_sort: sample '{}': {} must be a non-empty array of arrays",
              id, what);
  std::vector<std::vector<std::string>> out;
  for (const json& turn : j) {
    TITAN_CHECK(turn.is_array(), "alphabet_sort: sample '{}': {} must hold arrays of strings", id, what);
    std::vector<std::string> names;
    for (const json& n : turn) {
      TITAN_CHECK(n.is_string(), "alphabet_sort: sample '{}': {} must hold arrays of strings", id, what);
      names.push_back(n.get<std::string>());
    }
    out.push_back(std::move(names));
  }
  return out;
}

std::string sort_by_of(const TaskSample& s) {
  TITAN_CHECK(s.prompt.is_object() && s.prompt.contains("sort_by") && s.prompt["sort_by"].is_string(),
              "alphabet_sort: sample '{}': prompt.sort_by must be \"first\" or \"last\"", s.id);
  std::string by = s.prompt["sort_by"].get<std::string>();
  TITAN_CHECK(by == "first" || by == "last", "alphabet_sort: sample '{}': prompt.sort_by must be \"first\" or "
              "\"last\", got '{}'", s.id, by);
  return by;
}

std::vector<std::vector<std::string>> turns_of(const TaskSample& s) {
  TITAN_CHECK(s.prompt.is_object() && s.prompt.contains("new_names_per_turn"),
              "alphabet_sort: sample '{}': missing prompt.new_names_per_turn", s.id);
  return string_lists(s.prompt["new_names_per_turn"], "prompt.new_names_per_turn", s.id);
}

std::vector<std::vector<std::string>> expected_of(const TaskSample& s) {
  TITAN_CHECK(s.reference.is_object() && s.reference.contains("expected"),
              "alphabet_sort: sample '{}': missing reference.expected", s.id);
  return string_lists(s.reference["expected"], "reference.expected", s.id);
}

std::string join(const std::vector<std::string>& xs, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i) out += sep;
    out += xs[i];
  }
  return out;
}

// k names at evenly spaced positions of the list (all of it when k is 0).
std::vector<std::string_view> name_pool(std::span<const std::string_view> all, int k) {
  if (k <= 0) return {all.begin(), all.end()};
  std::vector<std::string_view> out;
  const int64_t n = static_cast<int64_t>(all.size());
  for (int64_t i = 0; i < k; ++i) out.push_back(all[static_cast<size_t>(i * n / k)]);
  return out;
}

}  // namespace

TaskSample make_alphabet_sort_sample(const AlphabetSortConfig& cfg, int64_t index) {
  TITAN_CHECK(index >= 0, "make_alphabet_sort_sample: index must be >= 0, got {}", index);
  const auto firsts = name_pool(alphabet_first_names(), cfg.name_pool);
  const auto lasts = name_pool(alphabet_last_names(), cfg.name_pool);
  SampleRng rng(cfg.seed, static_cast<uint64_t>(index));
  const int num_turns = rng.uniform_int(cfg.min_turns, cfg.max_turns);
  std::vector<int> counts;
  for (int t = 0; t < num_turns; ++t)
    counts.push_back(t == 0 ? rng.uniform_int(cfg.min_names, cfg.max_names)
                            : rng.uniform_int(cfg.min_new_names, cfg.max_new_names));
  const bool by_first = rng.below(2) == 0;

  std::set<std::string> used;
  std::vector<Person> seen;
  json new_names_per_turn = json::array(), expected = json::array(), other_key = json::array();
  // Everything so far, sorted by first or last name, the names new in turn t marked.
  const auto sorted_lines = [&](bool first_key, const std::set<std::string>& new_now) {
    std::vector<Person> sorted = seen;
    std::sort(sorted.begin(), sorted.end(), [&](const Person& a, const Person& b) {
      const std::string af = ascii_lower(a.first), al = ascii_lower(a.last);
      const std::string bf = ascii_lower(b.first), bl = ascii_lower(b.last);
      return first_key ? std::tie(af, al) < std::tie(bf, bl) : std::tie(al, af) < std::tie(bl, bf);
    });
    json lines = json::array();
    for (const Person& p : sorted)
      lines.push_back(new_now.count(p.display()) ? p.display() + std::string(kAlphabetNewMarker) : p.display());
    return lines;
  };
  for (int t = 0; t < num_turns; ++t) {
    std::vector<Person> fresh;
    while (static_cast<int>(fresh.size()) < counts[static_cast<size_t>(t)]) {
      Person p{std::string(firsts[static_cast<size_t>(rng.below(static_cast<int64_t>(firsts.size())))]),
               std::string(lasts[static_cast<size_t>(rng.below(static_cast<int64_t>(lasts.size())))])};
      if (used.insert(p.display()).second) fresh.push_back(std::move(p));
    }
    // Shown in draw order (already random); expected: everything so far, sorted.
    json shown = json::array();
    for (const Person& p : fresh) shown.push_back(p.display());
    new_names_per_turn.push_back(std::move(shown));
    std::set<std::string> new_now;
    if (t > 0)
      for (const Person& p : fresh) new_now.insert(p.display());
    seen.insert(seen.end(), fresh.begin(), fresh.end());
    expected.push_back(sorted_lines(by_first, new_now));
    other_key.push_back(sorted_lines(!by_first, new_now));
  }
  // Uniform in [0, 1) from 53 bits; drawn last so that the names do not depend on it.
  const double u = static_cast<double>(rng.below(int64_t{1} << 53)) / static_cast<double>(int64_t{1} << 53);
  TaskSample s;
  s.id = fmt::format("alphabet_sort/{}", index);
  s.prompt = json{{"sort_by", by_first ? "first" : "last"}, {"new_names_per_turn", std::move(new_names_per_turn)}};
  s.reference = json{{"expected", std::move(expected)}};
  if (u < cfg.sft_wrong_key_frac)
    s.reference["demonstration"] = std::move(other_key);
  else if (u < cfg.sft_wrong_key_frac + cfg.sft_untagged_frac)
    s.reference["untagged"] = true;
  s.metadata = json{{"index", index}, {"seed", cfg.seed}};
  return s;
}

AlphabetSortSource::AlphabetSortSource(AlphabetSortConfig cfg, std::string name)
    : cfg_(std::move(cfg)), name_(std::move(name)) {
  cfg_.validate();
}

TaskSample AlphabetSortSource::get(int64_t i) const {
  TITAN_CHECK(i >= 0 && i < size(), "AlphabetSortSource::get({}): index {} outside [0, {})", name_, i, size());
  return make_alphabet_sort_sample(cfg_, i);
}

std::string_view alphabet_answer_tag(int turn) {
  return turn == 0 ? "alphabetical_sorted" : "combined_alphabetical_sorted";
}

std::string alphabet_sort_prompt(const TaskSample& sample, int turn) {
  const std::string by = sort_by_of(sample) == "first" ? "FIRST" : "LAST";
  const auto turns = turns_of(sample);
  TITAN_CHECK(turn >= 0 && static_cast<size_t>(turn) < turns.size(),
              "alphabet_sort_prompt: sample '{}' has {} turns, asked for turn {}", sample.id, turns.size(), turn);
  const std::string names = join(turns[static_cast<size_t>(turn)], ", ");
  if (turn == 0) {
    return fmt::format(
        "Sort these names alphabetically by {} name: {}\n\n"
        "Answer in exactly this format, one name per line:\n"
        "<alphabetical_sorted>\nName1\nName2\n...\n</alphabetical_sorted>",
        by, names);
  }
  return fmt::format(
      "Here are more names: {}\n\n"
      "Now sort ALL the names so far (the earlier ones and these) alphabetically by {} name, and mark every "
      "name that is new in this message with `{}` at the end of its line.\n\n"
      "Answer in exactly this format, one name per line:\n"
      "<combined_alphabetical_sorted>\nName1\nName2{}\n...\n</combined_alphabetical_sorted>",
      names, by, strip(kAlphabetNewMarker), kAlphabetNewMarker);
}

std::vector<ChatMessage> AlphabetSortEnv::init(const TaskSample& sample) {
  sort_by_of(sample);  // validates
  num_turns_ = static_cast<int>(turns_of(sample).size());
  sample_ = sample;
  next_turn_ = 1;
  return {ChatMessage{"user", alphabet_sort_prompt(sample_, 0), std::nullopt}};
}

StepResult AlphabetSortEnv::step(const std::string& /*reply*/) {
  TITAN_CHECK(num_turns_ > 0, "AlphabetSortEnv::step: called before init");
  if (next_turn_ >= num_turns_) return StepResult{{}, true};
  const int turn = next_turn_++;
  return StepResult{{ChatMessage{"user", alphabet_sort_prompt(sample_, turn), std::nullopt}}, false};
}

double alphabet_sort_turn_score(std::string_view reply, int turn, const std::vector<std::string>& expected,
                                const AlphabetSortConfig& cfg) {
  const std::vector<std::string> blocks = find_tag_blocks(reply, alphabet_answer_tag(turn));
  if (blocks.empty()) return 0.0;
  std::vector<std::string> predicted;
  for (const std::string& line : split_lines(blocks.back())) {
    const std::string_view s = strip(line);
    if (!s.empty()) predicted.push_back(ascii_lower(s));
  }
  if (predicted.empty()) return 0.0;
  std::vector<std::string> want;
  for (const std::string& line : expected) want.push_back(ascii_lower(line));
  const double ratio =
      cfg.similarity == "text" ? text_ratio(join(predicted, "\n"), join(want, "\n")) : sequence_ratio(predicted, want);
  return std::pow(ratio, cfg.similarity_power);
}

double alphabet_sort_reward(const Rollout& r, const AlphabetSortConfig& cfg) {
  const auto expected = expected_of(r.sample);
  double sum = 0.0;
  for (size_t t = 0; t < expected.size() && t < r.completions.size(); ++t)
    sum += alphabet_sort_turn_score(r.completions[t], static_cast<int>(t), expected[t], cfg);
  return sum / static_cast<double>(expected.size());
}

std::vector<std::string> alphabet_sort_reference_replies(const TaskSample& sample) {
  const auto expected = sample.reference.is_object() && sample.reference.contains("demonstration")
                            ? string_lists(sample.reference["demonstration"], "reference.demonstration", sample.id)
                            : expected_of(sample);
  const bool untagged = sample.reference.is_object() && sample.reference.value("untagged", false);
  std::vector<std::string> out;
  for (size_t t = 0; t < expected.size(); ++t) {
    const std::string_view tag = alphabet_answer_tag(static_cast<int>(t));
    out.push_back(untagged ? join(expected[t], "\n")
                           : fmt::format("<{}>\n{}\n</{}>", tag, join(expected[t], "\n"), tag));
  }
  return out;
}

}  // namespace titan::rl
