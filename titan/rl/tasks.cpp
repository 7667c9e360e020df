#include "titan/rl/tasks.h"

#include <algorithm>

#include "titan/core/error.h"
#include "titan/rl/alphabet_sort.h"
#include "titan/rl/code_exec.h"
#include "titan/rl/gsm8k.h"
#include "titan/rl/json_config.h"
#include "titan/rl/compaction.h"
#include "titan/rl/long_context.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/self_play.h"
#include "titan/rl/tool_use.h"

namespace titan::rl {

using nlohmann::json;

std::vector<ChatMessage> TaskSpec::demonstration(const TaskSample& sample) const {
  return demonstration_rollout(sample).messages;
}

Rollout TaskSpec::demonstration_rollout(const TaskSample& sample, const data::Tokenizer* tok,
                                       bool enable_thinking) const {
  TITAN_CHECK(make_env && (reference_replies || reference_policy),
              "TaskSpec::demonstration({}): task has no env or reference replies", name);
  std::unique_ptr<MessageEnv> env = make_env();
  GenerateFn gen = reference_policy ? reference_policy(sample) : scripted_generator(reference_replies(sample));
  if (tok != nullptr) {
    gen = [gen, tok, enable_thinking](const GenerateRequest& req) {
      Completion c = gen(req);
      c.prompt_tokens = static_cast<int64_t>(render_prompt_ids(*tok, req.messages, enable_thinking).size());
      c.completion_tokens = static_cast<int64_t>(tok->encode(c.text, /*parse_special=*/false).size()) + 1;
      return c;
    };
  }
  const Rollout r = run_episode(*env, sample, gen, EpisodeLimits{std::max(max_turns, 1), 0});
  TITAN_CHECK(r.status == RolloutStatus::completed, "TaskSpec::demonstration({}): sample '{}' did not complete: {} ({})",
              name, sample.id, to_string(r.status), r.failure_reason);
  return r;
}

namespace {

// Splits a config object into the keys of `task_keys` and the rest.
std::pair<json, json> partition(const json& config, std::initializer_list<const char*> task_keys) {
  json mine = json::object(), rest = json::object();
  if (config.is_null()) return {mine, rest};
  TITAN_CHECK(config.is_object(), "make_task: config must be a JSON object, got {}", config.type_name());
  for (auto it = config.begin(); it != config.end(); ++it) {
    const bool is_task_key = std::any_of(task_keys.begin(), task_keys.end(), [&](const char* k) { return it.key() == k; });
    (is_task_key ? mine : rest)[it.key()] = it.value();
  }
  return {mine, rest};
}

TaskSpec alphabet_sort_task(const json& config) {
  auto [mine, rest] = partition(config, {"num_validation"});
  int64_t num_validation = 256;
  JsonConfigReader r(mine, "alphabet_sort config");
  r.read("num_validation", num_validation);
  r.finish();
  const AlphabetSortConfig cfg = AlphabetSortConfig::from_json(rest);
  auto src = std::make_shared<AlphabetSortSource>(cfg);
  TrainValidationSplit split = split_train_validation(src, num_validation, cfg.seed);
  RewardFn reward{"alphabet_sort", 1.0, [cfg](const Rollout& ro) { return alphabet_sort_reward(ro, cfg); }};
  return TaskSpec{"alphabet_sort",
                  split.train,
                  split.validation,
                  [] { return std::make_unique<AlphabetSortEnv>(); },
                  Rubric({reward}),
                  cfg.max_turns,
                  alphabet_sort_reference_replies};
}

TaskSpec gsm8k_task(const json& config) {
  std::string train_path = gsm8k_path("train"), validation_path = gsm8k_path("test");
  Gsm8kConfig env_cfg;
  JsonConfigReader r(config, "gsm8k config");
  r.read("train_path", train_path);
  r.read("validation_path", validation_path);
  r.read("instruction", env_cfg.instruction);
  r.read("system_prompt", env_cfg.system_prompt);
  r.finish();
  auto train = std::make_shared<VectorSource>("gsm8k/train", load_gsm8k(train_path, "train"));
  auto validation = std::make_shared<VectorSource>("gsm8k/test", load_gsm8k(validation_path, "test"));
  return TaskSpec{"gsm8k",
                  train,
                  validation,
                  [env_cfg] { return std::make_unique<Gsm8kEnv>(env_cfg); },
                  Rubric({RewardFn{"gsm8k_correct", 1.0, gsm8k_reward}}),
                  1,
                  [](const TaskSample& s) { return std::vector<std::string>{gsm8k_reference_reply(s)}; }};
}

std::shared_ptr<const SampleSource> mbpp_splits(const std::string& name, const std::vector<TaskSample>& all,
                                                const std::vector<std::string>& splits) {
  std::vector<TaskSample> picked;
  for (const TaskSample& s : all)
    if (std::find(splits.begin(), splits.end(), s.metadata["split"].get<std::string>()) != splits.end())
      picked.push_back(s);
  TITAN_CHECK(!picked.empty(), "make_task(mbpp): no sample in splits [{}] (known: prompt, test, validation, train)",
              fmt::join(splits, ", "));
  return std::make_shared<VectorSource>(name, std::move(picked));
}

TaskSpec code_task(const std::string& name, const json& config) {
  const bool mbpp = name == "mbpp";
  auto [mine, rest] = partition(config, {"path", "train_splits", "validation_splits", "num_validation", "split_seed",
                                         "system_prompt"});
  std::string path = mbpp ? mbpp_path() : humaneval_path();
  std::vector<std::string> train_splits{"train"}, validation_splits{"validation"};
  int64_t num_validation = 32;
  uint64_t split_seed = 0;
  CodeEnvConfig env_cfg;
  JsonConfigReader r(mine, name + " config");
  r.read("path", path);
  r.read("system_prompt", env_cfg.system_prompt);
  if (mbpp) {
    r.read("train_splits", train_splits);
    r.read("validation_splits", validation_splits);
  } else {
    r.read("num_validation", num_validation);
    r.read("split_seed", split_seed);
  }
  r.finish();
  const CodeExecConfig cfg = CodeExecConfig::from_json(rest);
  std::shared_ptr<const SampleSource> train, validation;
  if (mbpp) {
    const std::vector<TaskSample> all = load_mbpp(path, cfg.include_challenge_tests);
    train = mbpp_splits("mbpp/train", all, train_splits);
    validation = mbpp_splits("mbpp/validation", all, validation_splits);
  } else {
    auto src = std::make_shared<VectorSource>("humaneval", load_humaneval(path));
    TrainValidationSplit split = split_train_validation(src, num_validation, split_seed);
    train = split.train;
    validation = split.validation;
  }
  RewardFn reward{"tests_passed", 1.0, [cfg](const Rollout& ro) { return code_exec_reward(ro, cfg); }};
  return TaskSpec{name,
                  train,
                  validation,
                  [env_cfg] { return std::make_unique<CodeExecEnv>(env_cfg); },
                  Rubric({reward}),
                  1,
                  [](const TaskSample& s) { return std::vector<std::string>{code_reference_reply(s)}; }};
}

}  // namespace

std::vector<std::string> task_names() { return {"alphabet_sort", "compaction", "gsm8k", "humaneval", "long_context", "mbpp", "self_play", "tool_use"}; }

TaskSpec make_task(std::string_view name, const json& config) {
  if (name == "alphabet_sort") return alphabet_sort_task(config);
  if (name == "gsm8k") return gsm8k_task(config);
  if (name == "mbpp" || name == "humaneval") return code_task(std::string(name), config);
  if (name == "compaction") return make_compaction_task(config);
  if (name == "long_context") return make_long_context_task(config);
  if (name == "self_play") return make_self_play_task(config);
  if (name == "tool_use") return make_tool_use_task(config);
  fail("make_task: unknown task '{}' (known: {})", name, fmt::join(task_names(), ", "));
}

}  // namespace titan::rl
