#include "titan/rl/compaction.h"

#include <fmt/format.h>

#include "titan/core/error.h"
#include "titan/rl/alphabet_sort.h"
#include "titan/rl/difflib.h"
#include "titan/rl/json_config.h"
#include "titan/rl/text.h"

namespace titan::rl {

using nlohmann::json;

CompactingEnv::CompactingEnv(std::unique_ptr<MessageEnv> inner, CompactionOptions options)
    : inner_(std::move(inner)), options_(std::move(options)) {
  TITAN_CHECK(inner_ != nullptr, "CompactingEnv: no inner environment");
  TITAN_CHECK(options_.context_budget >= 0, "CompactingEnv: context_budget must be >= 0, got {}",
              options_.context_budget);
}

std::vector<ChatMessage> CompactingEnv::init(const TaskSample& sample) {
  std::vector<ChatMessage> first = inner_->init(sample);
  system_.clear();
  for (const ChatMessage& m : first) {
    if (m.role != "system") break;
    system_.push_back(m);
  }
  return first;
}

StepResult CompactingEnv::step(const std::string& reply) {
  if (awaiting_summary_) {
    awaiting_summary_ = false;
    ++compactions_;
    const std::vector<std::string> blocks = find_tag_blocks(reply, options_.summary_tag);
    const std::string summary(strip(blocks.empty() ? std::string_view(reply) : std::string_view(blocks.back())));
    StepResult out;
    out.reset_context = true;
    out.new_messages = system_;
    out.new_messages.push_back(ChatMessage{"user", options_.summary_prefix + summary, std::nullopt});
    for (ChatMessage& m : pending_) out.new_messages.push_back(std::move(m));
    pending_.clear();
    return out;
  }
  StepResult r = inner_->step(reply);
  if (r.done || r.reset_context || options_.context_budget <= 0 || context_tokens_ < options_.context_budget) return r;
  pending_ = std::move(r.new_messages);
  awaiting_summary_ = true;
  return StepResult{{ChatMessage{"user", options_.request, std::nullopt}}, false, false};
}

bool is_summary_turn(const std::vector<ChatMessage>& messages, size_t index, const CompactionOptions& options) {
  return index > 0 && index < messages.size() && messages[index].role == "assistant" &&
         messages[index - 1].role == "user" && messages[index - 1].content == options.request;
}

namespace {

constexpr std::string_view kListTag = "list";

AlphabetSortConfig list_config(const CompactionConfig& c) {
  AlphabetSortConfig a;
  a.seed = c.seed;
  a.num_samples = c.num_samples + c.num_validation;
  a.min_turns = c.min_turns;
  a.max_turns = c.max_turns;
  a.min_names = c.min_names;
  a.max_names = c.max_names;
  a.min_new_names = c.min_new_names;
  a.max_new_names = c.max_new_names;
  a.name_pool = c.name_pool;
  a.validate();
  return a;
}

// The expected sorted list of every turn (alphabet_sort's expected lines without the
// new-name markers).
std::vector<std::vector<std::string>> expected_lists(const TaskSample& s) {
  TITAN_CHECK(s.reference.is_object() && s.reference.contains("expected") && s.reference["expected"].is_array(),
              "compaction: sample '{}': reference.expected must be an array of string lists", s.id);
  std::vector<std::vector<std::string>> out;
  for (const json& turn : s.reference["expected"]) {
    TITAN_CHECK(turn.is_array(), "compaction: sample '{}': reference.expected must be an array of string lists", s.id);
    std::vector<std::string> lines;
    for (const json& l : turn) {
      TITAN_CHECK(l.is_string(), "compaction: sample '{}': reference.expected must be an array of string lists", s.id);
      std::string line = l.get<std::string>();
      if (line.size() >= kAlphabetNewMarker.size() &&
          line.compare(line.size() - kAlphabetNewMarker.size(), kAlphabetNewMarker.size(), kAlphabetNewMarker) == 0)
        line.resize(line.size() - kAlphabetNewMarker.size());
      lines.push_back(std::move(line));
    }
    out.push_back(std::move(lines));
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? "\n" : "") + xs[i];
  return s;
}

// ratio of the reply's <list> (lower-cased non-empty stripped lines, joined) to `want`.
double list_score(std::string_view reply, const std::vector<std::string>& want) {
  const std::vector<std::string> blocks = find_tag_blocks(reply, kListTag);
  if (blocks.empty()) return 0.0;
  std::vector<std::string> got;
  for (const std::string& line : split_lines(blocks.back())) {
    const std::string_view s = strip(line);
    if (!s.empty()) got.push_back(ascii_lower(s));
  }
  if (got.empty()) return 0.0;
  std::vector<std::string> w;
  for (const std::string& l : want) w.push_back(ascii_lower(l));
  return text_ratio(join_lines(got), join_lines(w));
}

std::string default_system_prompt(const TaskSample& s) {
  TITAN_CHECK(s.prompt.is_object() && s.prompt.contains("sort_by") && s.prompt["sort_by"].is_string(),
              "compaction: sample '{}': prompt.sort_by must be a string", s.id);
  return fmt::format("Keep a list of names sorted by {} name. Reply with the whole list in <list>, one name per line.",
                     s.prompt["sort_by"].get<std::string>() == "first" ? "FIRST" : "LAST");
}

class CompactionSource final : public SampleSource {
 public:
  CompactionSource(AlphabetSortConfig cfg, int64_t begin, int64_t n, std::string name)
      : cfg_(std::move(cfg)), begin_(begin), n_(n), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  int64_t size() const override { return n_; }
  TaskSample get(int64_t i) const override {
    TITAN_CHECK(i >= 0 && i < n_, "{} source: index {} outside [0, {})", name_, i, n_);
    TaskSample s = make_alphabet_sort_sample(cfg_, begin_ + i);
    s.id = fmt::format("{}/{}", name_, i);
    return s;
  }

 private:
  AlphabetSortConfig cfg_;
  int64_t begin_, n_;
  std::string name_;
};

// The reference replies of the context: the sorted list of the next turn, or, after
// the compaction request, the list of the last turn as the summary.
GenerateFn reference_policy(const TaskSample& sample, const CompactionOptions& opt) {
  auto lists = std::make_shared<const std::vector<std::vector<std::string>>>(expected_lists(sample));
  auto next = std::make_shared<size_t>(0);
  return [lists, next, opt](const GenerateRequest& req) {
    if (!req.messages.empty() && req.messages.back().role == "user" && req.messages.back().content == opt.request) {
      const std::vector<std::string>& last = (*lists)[*next > 0 ? *next - 1 : 0];
      return Completion{"<" + opt.summary_tag + ">\n" + join_lines(last) + "\n</" + opt.summary_tag + ">", "stop", 0, 0};
    }
    if (*next >= lists->size()) return Completion{"", "abort", 0, 0};
    const std::vector<std::string>& l = (*lists)[(*next)++];
    return Completion{"<list>\n" + join_lines(l) + "\n</list>", "stop", 0, 0};
  };
}

}  // namespace

std::vector<ChatMessage> RunningListEnv::init(const TaskSample& sample) {
  TITAN_CHECK(sample.prompt.is_object() && sample.prompt.contains("new_names_per_turn") &&
                  sample.prompt["new_names_per_turn"].is_array() && !sample.prompt["new_names_per_turn"].empty(),
              "compaction: sample '{}': prompt.new_names_per_turn must be a non-empty array", sample.id);
  turns_.clear();
  for (const json& t : sample.prompt["new_names_per_turn"]) turns_.push_back(t.get<std::vector<std::string>>());
  next_turn_ = 1;
  const std::string system = system_prompt_.empty() ? default_system_prompt(sample) : system_prompt_;
  return {ChatMessage{"system", system, std::nullopt},
          ChatMessage{"user", "Names: " + fmt::format("{}", fmt::join(turns_[0], ", ")), std::nullopt}};
}

StepResult RunningListEnv::step(const std::string& /*reply*/) {
  TITAN_CHECK(next_turn_ > 0, "RunningListEnv::step: called before init");
  if (next_turn_ >= turns_.size()) return StepResult{{}, true, false};
  const std::vector<std::string>& names = turns_[next_turn_++];
  return StepResult{{ChatMessage{"user", "Add: " + fmt::format("{}", fmt::join(names, ", ")), std::nullopt}}, false, false};
}

double compaction_list_reward(const Rollout& r, const CompactionOptions& options) {
  const std::vector<std::vector<std::string>> want = expected_lists(r.sample);
  TITAN_CHECK(!want.empty(), "compaction: sample '{}': reference.expected is empty", r.sample.id);
  double sum = 0;
  size_t turn = 0;
  for (size_t i = 0; i < r.messages.size() && turn < want.size(); ++i) {
    if (r.messages[i].role != "assistant" || is_summary_turn(r.messages, i, options)) continue;
    sum += list_score(r.messages[i].content, want[turn++]);
  }
  return sum / static_cast<double>(want.size());
}

double compaction_count(const Rollout& r, const CompactionOptions& options) {
  double n = 0;
  for (size_t i = 0; i < r.messages.size(); ++i) n += is_summary_turn(r.messages, i, options) ? 1 : 0;
  return n;
}

void CompactionConfig::validate() const {
  TITAN_CHECK(num_samples >= 1, "compaction config: num_samples must be >= 1, got {}", num_samples);
  TITAN_CHECK(num_validation >= 1, "compaction config: num_validation must be >= 1, got {}", num_validation);
  TITAN_CHECK(context_budget >= 0, "compaction config: context_budget must be >= 0 (0 = no compaction), got {}",
              context_budget);
  list_config(*this);  // alphabet_sort's checks of the turn and name counts
}

CompactionConfig CompactionConfig::from_json(const json& j) {
  CompactionConfig c;
  JsonConfigReader r(j, "compaction config");
  r.read("seed", c.seed);
  r.read("num_samples", c.num_samples);
  r.read("num_validation", c.num_validation);
  r.read("min_turns", c.min_turns);
  r.read("max_turns", c.max_turns);
  r.read("min_names", c.min_names);
  r.read("max_names", c.max_names);
  r.read("min_new_names", c.min_new_names);
  r.read("max_new_names", c.max_new_names);
  r.read("name_pool", c.name_pool);
  r.read("context_budget", c.context_budget);
  r.read("system_prompt", c.system_prompt);
  r.finish();
  try {
    c.validate();
  } catch (const Error& e) {
    fail("compaction config: {}", e.what());
  }
  return c;
}

TaskSpec make_compaction_task(const json& config) {
  const CompactionConfig cfg = CompactionConfig::from_json(config);
  const AlphabetSortConfig lc = list_config(cfg);
  CompactionOptions opt;
  opt.context_budget = cfg.context_budget;
  auto train = std::make_shared<CompactionSource>(lc, 0, cfg.num_samples, "compaction/train");
  auto validation = std::make_shared<CompactionSource>(lc, cfg.num_samples, cfg.num_validation, "compaction/validation");
  std::vector<RewardFn> fns{
      RewardFn{"list", 1.0, [opt](const Rollout& r) { return compaction_list_reward(r, opt); }},
      RewardFn{"compactions", 0.0, [opt](const Rollout& r) { return compaction_count(r, opt); }}};
  const std::string system = cfg.system_prompt;
  TaskSpec t{"compaction",
             train,
             validation,
             [opt, system] { return std::make_unique<CompactingEnv>(std::make_unique<RunningListEnv>(system), opt); },
             Rubric(std::move(fns)),
             // every list turn, and at most one summary before each later turn
             2 * cfg.max_turns - 1,
             {}};
  t.reference_policy = [opt](const TaskSample& s) { return reference_policy(s, opt); };
  return t;
}

}  // namespace titan::rl
