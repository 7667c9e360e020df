#include "titan/rl/tool_use.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/rl/alphabet_sort.h"
#include "titan/rl/json_config.h"
#include "titan/rl/text.h"
#include "titan/rl/tool_calls.h"

namespace titan::rl {

using nlohmann::json;

namespace {

const std::vector<std::string> kQuestionTypes{"city", "job", "country", "age_sum"};
const std::vector<std::string> kToolNames{"search", "calculator", "python"};
const std::vector<std::string_view> kJobs{"baker",  "farmer", "painter", "doctor", "teacher", "sailor",
                                          "miner",  "weaver", "potter",  "singer", "tailor",  "smith",
                                          "nurse",  "pilot",  "judge",   "poet"};

bool contains(const std::vector<std::string>& xs, std::string_view x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

// Sequential draws from Philox 4x32-10 keyed by seed on one stream.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t next_u32() {
    if (have_ == 0) {
      buf_ = philox_draw(seed_, counter_++, stream_);
      have_ = 4;
    }
    return buf_[static_cast<size_t>(4 - have_--)];
  }
  // Uniform in [0, n), n >= 1.
  int64_t below(int64_t n) {
    const uint64_t u = (static_cast<uint64_t>(next_u32()) << 32) | next_u32();
    return static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(n)) >> 64);
  }

 private:
  uint64_t seed_, stream_, counter_ = 0;
  PhiloxCounter buf_{};
  int have_ = 0;
};

// Streams of the generator: 0..2 the knowledge base, 16 + i question i.
constexpr uint64_t kStreamPeople = 0, kStreamPlaces = 1, kStreamFacts = 2, kStreamQuestions = 16;

// A made-up capitalised name of 2-3 consonant-vowel syllables, e.g. "Kelomar".
std::string place_name(Rng& rng) {
  static constexpr std::string_view kOnsets[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
                                                 "br", "dr", "gr", "kr", "st", "th"};
  static constexpr std::string_view kVowels[] = {"a", "e", "i", "o", "u", "ai", "ei", "ou"};
  static constexpr std::string_view kCodas[] = {"", "", "n", "r", "l", "s", "m"};
  const int syllables = 2 + static_cast<int>(rng.below(2));
  std::string s;
  for (int i = 0; i < syllables; ++i) {
    s += kOnsets[rng.below(std::size(kOnsets))];
    s += kVowels[rng.below(std::size(kVowels))];
  }
  s += kCodas[rng.below(std::size(kCodas))];
  s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

json call_json(std::string name, json arguments) {
  return json{{"name", std::move(name)}, {"arguments", std::move(arguments)}};
}

const std::string& question_of(const TaskSample& s) {
  TITAN_CHECK(s.prompt.is_object() && s.prompt.contains("question") && s.prompt["question"].is_string(),
              "tool_use: sample '{}': prompt.question must be a string", s.id);
  return s.prompt["question"].get_ref<const std::string&>();
}

std::string answer_of(const TaskSample& s) {
  TITAN_CHECK(s.reference.is_object() && s.reference.contains("answer") && s.reference["answer"].is_string(),
              "tool_use: sample '{}': reference.answer must be a string", s.id);
  return s.reference["answer"].get<std::string>();
}

// The calls of each question type's reference plan (for validate: tools and turns).
std::vector<std::string> plan_tools(std::string_view type) {
  if (type == "country") return {"search", "search"};
  if (type == "age_sum") return {"search", "search", "calculator"};
  return {"search"};
}

class ToolUseSource final : public SampleSource {
 public:
  ToolUseSource(ToolUseConfig cfg, std::shared_ptr<const KnowledgeBase> kb) : cfg_(std::move(cfg)), kb_(std::move(kb)) {}
  std::string name() const override { return "tool_use"; }
  int64_t size() const override { return cfg_.num_samples; }
  TaskSample get(int64_t i) const override {
    TITAN_CHECK(i >= 0 && i < size(), "tool_use source: index {} outside [0, {})", i, size());
    return make_tool_use_sample(cfg_, *kb_, i);
  }

 private:
  ToolUseConfig cfg_;
  std::shared_ptr<const KnowledgeBase> kb_;
};

}  // namespace

void ToolUseConfig::validate() const {
  TITAN_CHECK(num_people >= 2 && num_people <= 50000, "tool_use config: num_people must be in [2, 50000], got {}",
              num_people);
  TITAN_CHECK(num_cities >= 1 && num_cities <= 5000, "tool_use config: num_cities must be in [1, 5000], got {}",
              num_cities);
  TITAN_CHECK(num_countries >= 1 && num_countries <= num_cities,
              "tool_use config: num_countries must be in [1, num_cities={}], got {}", num_cities, num_countries);
  TITAN_CHECK(num_validation >= 1 && num_validation < num_samples,
              "tool_use config: need 1 <= num_validation < num_samples, got {} and {}", num_validation, num_samples);
  TITAN_CHECK(search_k >= 1 && search_k <= 10, "tool_use config: search_k must be in [1, 10], got {}", search_k);
  TITAN_CHECK(max_turns >= 1 && max_turns <= 32, "tool_use config: max_turns must be in [1, 32], got {}", max_turns);
  TITAN_CHECK(std::isfinite(no_search_penalty) && no_search_penalty >= 0,
              "tool_use config: no_search_penalty must be >= 0, got {}", no_search_penalty);
  TITAN_CHECK(std::isfinite(python_timeout_s) && python_timeout_s > 0 && python_timeout_s <= 600,
              "tool_use config: python_timeout_s must be in (0, 600], got {}", python_timeout_s);
  TITAN_CHECK(!question_types.empty(), "tool_use config: question_types is empty");
  std::set<std::string> seen;
  for (const std::string& t : tools) {
    TITAN_CHECK(contains(kToolNames, t), "tool_use config: unknown tool '{}' (known: {})", t,
                fmt::join(kToolNames, ", "));
    TITAN_CHECK(seen.insert(t).second, "tool_use config: tool '{}' listed twice", t);
  }
  for (const std::string& q : question_types) {
    TITAN_CHECK(contains(kQuestionTypes, q), "tool_use config: unknown question type '{}' (known: {})", q,
                fmt::join(kQuestionTypes, ", "));
    const std::vector<std::string> plan = plan_tools(q);
    for (const std::string& t : plan)
      TITAN_CHECK(contains(tools, t), "tool_use config: question type '{}' needs the tool '{}', not in tools", q, t);
    TITAN_CHECK(static_cast<int>(plan.size()) + 1 <= max_turns,
                "tool_use config: question type '{}' needs {} turns, more than max_turns={}", q, plan.size() + 1,
                max_turns);
  }
}

ToolUseConfig ToolUseConfig::from_json(const json& j) {
  ToolUseConfig c;
  JsonConfigReader r(j, "tool_use config");
  r.read("seed", c.seed);
  r.read("num_people", c.num_people);
  r.read("num_cities", c.num_cities);
  r.read("num_countries", c.num_countries);
  r.read("num_samples", c.num_samples);
  r.read("num_validation", c.num_validation);
  r.read("question_types", c.question_types);
  r.read("tools", c.tools);
  r.read("search_k", c.search_k);
  r.read("max_turns", c.max_turns);
  r.read("no_search_penalty", c.no_search_penalty);
  r.read("python_timeout_s", c.python_timeout_s);
  r.read("system_prompt", c.system_prompt);
  r.finish();
  c.validate();
  return c;
}

KnowledgeBase make_knowledge_base(const ToolUseConfig& cfg) {
  cfg.validate();
  KnowledgeBase kb;
  const auto firsts = alphabet_first_names();
  const auto lasts = alphabet_last_names();
  TITAN_CHECK(static_cast<int64_t>(firsts.size() * lasts.size()) >= 2 * cfg.num_people,
              "tool_use: num_people={} is too many for the name lists", cfg.num_people);
  std::set<std::string> used;
  Rng places(cfg.seed, kStreamPlaces);
  auto fresh_place = [&] {
    for (;;) {
      std::string n = place_name(places);
      if (used.insert(ascii_lower(n)).second) return n;
    }
  };
  for (int64_t i = 0; i < cfg.num_countries; ++i) kb.countries.push_back(fresh_place());
  for (int64_t i = 0; i < cfg.num_cities; ++i) {
    // Every country gets a city first, then the rest at random.
    const int64_t c = i < cfg.num_countries ? i : places.below(cfg.num_countries);
    kb.cities.push_back(KbCity{fresh_place(), kb.countries[static_cast<size_t>(c)]});
  }
  Rng people(cfg.seed, kStreamPeople), facts(cfg.seed, kStreamFacts);
  while (static_cast<int64_t>(kb.people.size()) < cfg.num_people) {
    std::string name = std::string(firsts[static_cast<size_t>(people.below(static_cast<int64_t>(firsts.size())))]) +
                       " " + std::string(lasts[static_cast<size_t>(people.below(static_cast<int64_t>(lasts.size())))]);
    if (!used.insert(ascii_lower(name)).second) continue;
    KbPerson p;
    p.name = std::move(name);
    p.city = kb.cities[static_cast<size_t>(facts.below(cfg.num_cities))].name;
    p.job = std::string(kJobs[static_cast<size_t>(facts.below(static_cast<int64_t>(kJobs.size())))]);
    p.age = 20 + static_cast<int>(facts.below(60));
    kb.people.push_back(std::move(p));
  }
  for (const KbPerson& p : kb.people)
    kb.documents.push_back(
        {p.name, fmt::format("{} was born in {}, works as a {} and is {}.", p.name, p.city, p.job, p.age)});
  for (const KbCity& c : kb.cities) kb.documents.push_back({c.name, fmt::format("{} is a city in {}.", c.name, c.country)});
  for (const std::string& c : kb.countries) {
    int64_t n = 0;
    for (const KbCity& city : kb.cities) n += city.country == c;
    kb.documents.push_back({c, fmt::format("{} is a country with {} cities.", c, n)});
  }
  return kb;
}

TaskSample make_tool_use_sample(const ToolUseConfig& cfg, const KnowledgeBase& kb, int64_t index) {
  TITAN_CHECK(index >= 0, "make_tool_use_sample: index must be >= 0, got {}", index);
  TITAN_CHECK(kb.people.size() >= 2, "make_tool_use_sample: the knowledge base has {} people", kb.people.size());
  Rng rng(cfg.seed, kStreamQuestions + static_cast<uint64_t>(index));
  const std::string& type =
      cfg.question_types[static_cast<size_t>(rng.below(static_cast<int64_t>(cfg.question_types.size())))];
  const int64_t np = static_cast<int64_t>(kb.people.size());
  const int64_t pi = rng.below(np);
  const KbPerson& p = kb.people[static_cast<size_t>(pi)];
  auto search = [](const std::string& q) { return call_json("search", json{{"query", q}}); };
  std::string question, answer;
  json calls = json::array();
  if (type == "city") {
    question = fmt::format("In which city was {} born?", p.name);
    answer = p.city;
    calls.push_back(search(p.name));
  } else if (type == "job") {
    question = fmt::format("What is the job of {}?", p.name);
    answer = p.job;
    calls.push_back(search(p.name));
  } else if (type == "country") {
    question = fmt::format("In which country was {} born?", p.name);
    const auto city = std::find_if(kb.cities.begin(), kb.cities.end(), [&](const KbCity& c) { return c.name == p.city; });
    TITAN_CHECK(city != kb.cities.end(), "make_tool_use_sample: {} was born in an unknown city {}", p.name, p.city);
    answer = city->country;
    calls.push_back(search(p.name));
    calls.push_back(search(p.city));
  } else {  // age_sum
    int64_t j = rng.below(np - 1);  // another person
    if (j >= pi) ++j;
    const KbPerson& q = kb.people[static_cast<size_t>(j)];
    question = fmt::format("What is the sum of the ages of {} and {}?", p.name, q.name);
    answer = std::to_string(p.age + q.age);
    calls.push_back(search(p.name));
    calls.push_back(search(q.name));
    calls.push_back(call_json("calculator", json{{"expression", fmt::format("{} + {}", p.age, q.age)}}));
  }
  TaskSample s;
  s.id = fmt::format("tool_use/{}", index);
  s.prompt = json{{"question", question}, {"type", type}};
  s.reference = json{{"answer", answer}, {"calls", calls}};
  s.metadata = json{{"index", index}, {"seed", cfg.seed}};
  return s;
}

std::string tool_use_system_prompt(const ToolUseConfig& cfg, const ToolSet& tools) {
  if (!cfg.system_prompt.empty()) return cfg.system_prompt;
  return "Answer with the tools. Call one as\n<tool_call>\n{\"name\": NAME, \"arguments\": {...}}\n</tool_call>\n"
         "Tools:\n" +
         describe_tools(tools) + "End with <answer>...</answer>.";
}

std::shared_ptr<const ToolSet> make_tool_use_tools(const ToolUseConfig& cfg, std::shared_ptr<const SearchIndex> index) {
  auto tools = std::make_shared<ToolSet>();
  for (const std::string& t : cfg.tools) {
    if (t == "search") {
      tools->add(search_tool(index, cfg.search_k));
    } else if (t == "calculator") {
      tools->add(calculator_tool());
    } else if (t == "python") {
      SandboxLimits lim;
      lim.timeout_s = cfg.python_timeout_s;
      lim.cpu_s = std::max(1, static_cast<int>(std::ceil(cfg.python_timeout_s)));
      lim.memory_bytes = int64_t{512} << 20;
      lim.output_bytes = int64_t{16} << 10;
      tools->add(python_tool("/usr/bin/python3", lim));
    }
  }
  return tools;
}

ToolUseEnv::ToolUseEnv(std::shared_ptr<const ToolSet> tools, std::string system_prompt)
    : tools_(std::move(tools)), system_prompt_(std::move(system_prompt)) {
  TITAN_CHECK(tools_ != nullptr, "ToolUseEnv: no tools");
}

std::vector<ChatMessage> ToolUseEnv::init(const TaskSample& sample) {
  const std::string& q = question_of(sample);
  started_ = true;
  return {ChatMessage{"system", system_prompt_, std::nullopt}, ChatMessage{"user", q, std::nullopt}};
}

StepResult ToolUseEnv::step(const std::string& reply) {
  TITAN_CHECK(started_, "ToolUseEnv::step: called before init");
  const AssistantTurn turn = parse_tool_calls(reply);
  if (turn.tool_calls.empty()) return StepResult{{}, true};
  StepResult out;
  for (const ParsedToolCall& c : turn.tool_calls)
    out.new_messages.push_back(ChatMessage{"tool", tools_->run(c).text, std::nullopt});
  return out;
}

std::string normalize_answer(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : strip(s)) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return out;
}

double tool_use_exact_match(const Rollout& r) {
  const std::string want = normalize_answer(answer_of(r.sample));
  for (auto it = r.messages.rbegin(); it != r.messages.rend(); ++it) {
    if (it->role != "assistant") continue;
    const std::vector<std::string> blocks = find_tag_blocks(it->content, "answer");
    return !blocks.empty() && normalize_answer(blocks.back()) == want ? 1.0 : 0.0;
  }
  return 0.0;
}

double tool_use_no_search(const Rollout& r) {
  for (const ChatMessage& m : r.messages) {
    if (m.role != "assistant") continue;
    for (const ParsedToolCall& c : parse_tool_calls(m.content).tool_calls)
      if (c.call && c.call->name == "search") return 0.0;
  }
  return 1.0;
}

std::vector<std::string> tool_use_reference_replies(const TaskSample& sample) {
  TITAN_CHECK(sample.reference.is_object() && sample.reference.contains("calls") && sample.reference["calls"].is_array(),
              "tool_use: sample '{}': reference.calls must be an array", sample.id);
  std::vector<std::string> out;
  for (const json& c : sample.reference["calls"])
    out.push_back(format_tool_call(ToolCall{c.at("name").get<std::string>(), c.at("arguments")}));
  out.push_back("<answer>" + answer_of(sample) + "</answer>");
  return out;
}

TaskSpec make_tool_use_task(const json& config) {
  const ToolUseConfig cfg = ToolUseConfig::from_json(config);
  auto kb = std::make_shared<const KnowledgeBase>(make_knowledge_base(cfg));
  auto index = std::make_shared<const SearchIndex>(kb->documents);
  std::shared_ptr<const ToolSet> tools = make_tool_use_tools(cfg, index);
  const std::string system_prompt = tool_use_system_prompt(cfg, *tools);
  auto src = std::make_shared<ToolUseSource>(cfg, kb);
  TrainValidationSplit split = split_train_validation(src, cfg.num_validation, cfg.seed);
  std::vector<RewardFn> fns{RewardFn{"exact_match", 1.0, tool_use_exact_match}};
  if (cfg.no_search_penalty > 0) fns.push_back(RewardFn{"no_search", -cfg.no_search_penalty, tool_use_no_search});
  return TaskSpec{"tool_use",
                  split.train,
                  split.validation,
                  [tools, system_prompt] { return std::make_unique<ToolUseEnv>(tools, system_prompt); },
                  Rubric(std::move(fns), RubricOptions{0.0, 0.0}),
                  cfg.max_turns,
                  tool_use_reference_replies};
}

}  // namespace titan::rl
