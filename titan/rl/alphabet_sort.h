// alphabet_sort: TitanRL's reference toy task (torchtitan/experiments/rl/examples/
// alphabet_sort). The model sorts a list of names by first or last name; in a
// multi-turn episode each later turn adds names and asks for the combined list,
// with the names new in that turn marked " // new name!".
//
//   turn 0 user:   Sort these names alphabetically by LAST name: AliceWells, BrunoAdams ...
//   assistant:     <alphabetical_sorted>\nBrunoAdams\nAliceWells\n</alphabetical_sorted>
//   turn 1 user:   Here are more names: CarlBaker ... (combined, marked)
//   assistant:     <combined_alphabetical_sorted>\nBrunoAdams\nCarlBaker // new name!\n
//                  AliceWells\n</combined_alphabetical_sorted>
//
// Names are CamelCase "FirstLast" (as TitanRL shows its arXiv author names) built
// from the lists in titan/rl/data/alphabet_names.cpp. Sorting key: the lower-cased
// (first, last) or (last, first) pair, so equal first names are ordered by last name.
//
// Reward (alphabet_sort_reward): for each EXPECTED turn t, take the last
// <tag>...</tag> block of completion t (tag: alphabetical_sorted for t = 0,
// combined_alphabetical_sorted after), its non-empty stripped lines, lower-cased;
// score_t = ratio(predicted, expected)^similarity_power, 0 when there is no block
// or no completion t; reward = mean over expected turns. ratio is
// difflib.SequenceMatcher(None, predicted_lines, expected_lines).ratio()
// (similarity "lines", default) or, as TitanRL does, on the two texts joined with
// "\n" (similarity "text").
//
// Samples are generated on the fly from (seed, index) with Philox, so the source
// is a fixed, reproducible set of num_samples samples.
//   TaskSample.prompt    {"sort_by": "first"|"last", "new_names_per_turn": [[names]...]}
//   TaskSample.reference {"expected": [[lines of turn 0], [lines of turn 1], ...]}, plus
//                        "demonstration" (the same shape, sorted by the other key) when
//                        sft_wrong_key_frac picked the sample, or "untagged": true when
//                        sft_untagged_frac did
//   TaskSample.metadata  {"index": i, "seed": seed}
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/task.h"

namespace titan::rl {

struct AlphabetSortConfig {
  uint64_t seed = 1337;
  int64_t num_samples = 100000;  // size of the generated source
  int min_turns = 1;             // turns per sample, uniform in [min_turns, max_turns]
  int max_turns = 1;
  int min_names = 2;             // names of turn 0, uniform in [min_names, max_names]
  int max_names = 6;
  int min_new_names = 1;         // names added by each later turn
  int max_new_names = 3;
  double similarity_power = 4.0;  // > 0
  // 0: all names. k >= 2: only k first names and k last names, taken at evenly spaced
  // positions of each (alphabetical) list so they span the alphabet; a small pool lets a
  // small model learn to copy the names and leaves the ordering as the task.
  int name_pool = 0;
  std::string similarity = "lines";  // "lines" | "text"
  // A sloppy teacher: in this fraction of the samples (one Philox draw per sample, made
  // after the names, so the samples themselves do not change) the SFT demonstration sorts
  // by the other key than the prompt asks. The reward always wants the asked key, so an
  // SFT policy that imitates the teacher misreads the instruction that often, and RL can
  // learn to read it. In [0, 1]; 0 = the demonstrations are the expected answers.
  double sft_wrong_key_frac = 0.0;
  // The same draw: in the next sft_untagged_frac of the samples the demonstration gives
  // the right lines without the <tag>...</tag> block the prompt asks for, which the reward
  // scores 0. sft_wrong_key_frac + sft_untagged_frac <= 1.
  double sft_untagged_frac = 0.0;

  // Throws titan::Error naming the field for values out of range.
  void validate() const;
  // Keys as the field names; unknown keys and wrong types are titan::Error.
  static AlphabetSortConfig from_json(const nlohmann::json& j);
};

inline constexpr std::string_view kAlphabetNewMarker = " // new name!";

// The committed name lists (titan/rl/data/alphabet_names.cpp), sorted.
std::span<const std::string_view> alphabet_first_names();
std::span<const std::string_view> alphabet_last_names();

// Sample `index` of the generated set (deterministic in (cfg.seed, index)).
TaskSample make_alphabet_sort_sample(const AlphabetSortConfig& cfg, int64_t index);

class AlphabetSortSource final : public SampleSource {
 public:
  explicit AlphabetSortSource(AlphabetSortConfig cfg, std::string name = "alphabet_sort");
  std::string name() const override { return name_; }
  int64_t size() const override { return cfg_.num_samples; }
  TaskSample get(int64_t i) const override;

 private:
  AlphabetSortConfig cfg_;
  std::string name_;
};

// The XML tag of turn t's answer.
std::string_view alphabet_answer_tag(int turn);

class AlphabetSortEnv final : public MessageEnv {
 public:
  // init: one user message asking for turn 0; step: the next turn's user message,
  // done after the last turn. Throws titan::Error for a sample without
  // prompt.sort_by / prompt.new_names_per_turn of the documented shape.
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  StepResult step(const std::string& reply) override;

 private:
  TaskSample sample_;
  int num_turns_ = 0;
  int next_turn_ = 0;
};

// The user message of turn t (0 = the first list).
std::string alphabet_sort_prompt(const TaskSample& sample, int turn);

// The per-turn score in [0, 1] of one reply against the expected lines.
double alphabet_sort_turn_score(std::string_view reply, int turn, const std::vector<std::string>& expected,
                                const AlphabetSortConfig& cfg);

// The reward of a rollout (see the header comment). Throws titan::Error when the
// rollout's sample has no reference.expected list of string lists.
double alphabet_sort_reward(const Rollout& r, const AlphabetSortConfig& cfg);

// The demonstration's assistant reply of every turn (for SFT): reference.demonstration
// when the sample has one (sft_wrong_key_frac), else the expected answer; inside the
// turn's answer tags unless reference.untagged is true.
std::vector<std::string> alphabet_sort_reference_replies(const TaskSample& sample);

}  // namespace titan::rl
