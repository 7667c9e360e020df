// alphabet_sort: name lists, sample generation, the environment's turns,
// demonstrations, and the reward (checked against Python difflib ** power).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/rl/alphabet_sort.h"
#include "titan/rl/tasks.h"
#include "titan/rl/text.h"

namespace titan::rl {
namespace {

using nlohmann::json;

AlphabetSortConfig multi_turn() {
  AlphabetSortConfig c;
  c.min_turns = 1;
  c.max_turns = 3;
  c.num_samples = 1000;
  return c;
}

TEST(AlphabetNames, DerivedFromTheWordList) {
  for (auto list : {alphabet_first_names(), alphabet_last_names()}) {
    EXPECT_GE(list.size(), 300u);
    EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
    EXPECT_EQ(std::set<std::string_view>(list.begin(), list.end()).size(), list.size());
    for (std::string_view n : list) {
      ASSERT_GE(n.size(), 2u);
      EXPECT_TRUE(n[0] >= 'A' && n[0] <= 'Z') << n;
      for (char c : n.substr(1)) EXPECT_TRUE(c >= 'a' && c <= 'z') << n;
    }
  }
  std::ifstream words("/usr/share/dict/words");
  if (!words) GTEST_SKIP() << "/usr/share/dict/words (Debian wamerican) not installed";
  std::set<std::string> dict;
  for (std::string w; std::getline(words, w);) dict.insert(w);
  for (auto list : {alphabet_first_names(), alphabet_last_names()})
    for (std::string_view n : list) EXPECT_TRUE(dict.count(std::string(n))) << n << " is not in the word list";
}

// Splits "AnnaSmith" at its second capital.
std::pair<std::string, std::string> split_camel(const std::string& s) {
  const size_t k = s.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 1);
  return {s.substr(0, k), s.substr(k)};
}

TEST(AlphabetSortSamples, DeterministicShapeAndCorrectExpectations) {
  const AlphabetSortConfig cfg = multi_turn();
  std::set<int> turn_counts;
  std::set<std::string> sort_bys;
  for (int64_t i = 0; i < 300; ++i) {
    const TaskSample s = make_alphabet_sort_sample(cfg, i);
    EXPECT_EQ(s.id, "alphabet_sort/" + std::to_string(i));
    EXPECT_EQ(s.to_json(), make_alphabet_sort_sample(cfg, i).to_json());  // deterministic
    const auto turns = s.prompt["new_names_per_turn"].get<std::vector<std::vector<std::string>>>();
    const auto expected = s.reference["expected"].get<std::vector<std::vector<std::string>>>();
    const bool by_first = s.prompt["sort_by"] == "first";
    sort_bys.insert(s.prompt["sort_by"]);
    turn_counts.insert(static_cast<int>(turns.size()));
    ASSERT_EQ(turns.size(), expected.size());
    EXPECT_GE(turns[0].size(), 2u);
    EXPECT_LE(turns[0].size(), 6u);
    std::vector<std::string> seen;
    for (size_t t = 0; t < turns.size(); ++t) {
      if (t > 0) {
        EXPECT_GE(turns[t].size(), 1u);
        EXPECT_LE(turns[t].size(), 3u);
      }
      seen.insert(seen.end(), turns[t].begin(), turns[t].end());
      // Independent expectation: sort by (key, other) lower-cased; mark this turn's names.
      std::vector<std::string> want = seen;
      std::sort(want.begin(), want.end(), [&](const std::string& a, const std::string& b) {
        auto [af, al] = split_camel(a);
        auto [bf, bl] = split_camel(b);
        af = ascii_lower(af), al = ascii_lower(al), bf = ascii_lower(bf), bl = ascii_lower(bl);
        return by_first ? std::tie(af, al) < std::tie(bf, bl) : std::tie(al, af) < std::tie(bl, bf);
      });
      for (std::string& n : want)
        if (t > 0 && std::find(turns[t].begin(), turns[t].end(), n) != turns[t].end()) n += " // new name!";
      EXPECT_EQ(expected[t], want) << s.id << " turn " << t;
    }
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size()) << "repeated name in " << s.id;
  }
  EXPECT_EQ(turn_counts, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(sort_bys, (std::set<std::string>{"first", "last"}));
  AlphabetSortConfig other = cfg;
  other.seed = cfg.seed + 1;
  EXPECT_NE(make_alphabet_sort_sample(other, 0).to_json(), make_alphabet_sort_sample(cfg, 0).to_json());
}

TEST(AlphabetSortEnv, TurnsAndPrompts) {
  const AlphabetSortConfig cfg = multi_turn();
  TaskSample s;
  for (int64_t i = 0;; ++i) {
    s = make_alphabet_sort_sample(cfg, i);
    if (s.prompt["new_names_per_turn"].size() == 3) break;
  }
  AlphabetSortEnv env;
  const auto first = env.init(s);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].role, "user");
  const std::string by = s.prompt["sort_by"] == "first" ? "FIRST" : "LAST";
  EXPECT_NE(first[0].content.find("by " + by + " name"), std::string::npos) << first[0].content;
  for (const auto& n : s.prompt["new_names_per_turn"][0]) EXPECT_NE(first[0].content.find(n.get<std::string>()), std::string::npos);
  EXPECT_NE(first[0].content.find("<alphabetical_sorted>"), std::string::npos);
  StepResult a = env.step("whatever");
  EXPECT_FALSE(a.done);
  ASSERT_EQ(a.new_messages.size(), 1u);
  EXPECT_NE(a.new_messages[0].content.find("<combined_alphabetical_sorted>"), std::string::npos);
  EXPECT_NE(a.new_messages[0].content.find("// new name!"), std::string::npos);
  for (const auto& n : s.prompt["new_names_per_turn"][1]) EXPECT_NE(a.new_messages[0].content.find(n.get<std::string>()), std::string::npos);
  EXPECT_FALSE(env.step("x").done);
  EXPECT_TRUE(env.step("y").done);
}

TEST(AlphabetSortTask, DemonstrationsScoreOne) {
  const TaskSpec task = make_task("alphabet_sort", {{"max_turns", 3}, {"num_samples", 500}, {"num_validation", 50}});
  EXPECT_EQ(task.max_turns, 3);
  EXPECT_EQ(task.train->size(), 450);
  EXPECT_EQ(task.validation->size(), 50);
  TaskDataset train(task.train, 3);
  for (int k = 0; k < 40; ++k) {
    const TaskSample s = train.next();
    const auto demo = task.demonstration(s);
    const auto replies = assistant_replies(demo);
    EXPECT_EQ(replies.size(), s.reference["expected"].size());
    EXPECT_EQ(demo.front().role, "user");
    EXPECT_EQ(demo.back().role, "assistant");
    auto env = task.make_env();
    Rollout r = run_episode(*env, s, scripted_generator(replies), {.max_turns = task.max_turns});
    task.rubric.score(r);
    EXPECT_EQ(r.status, RolloutStatus::completed);
    EXPECT_EQ(r.total_reward, 1.0) << s.id << "\n" << r.to_json().dump(1);
  }
}

// The score of one turn by Python: difflib ratio ** power, lines or joined text.
std::vector<double> python_scores(const json& cases) {
  char path[] = "/tmp/titan_rl_alpha_XXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  std::ofstream(path) << cases.dump();
  const std::string cmd = std::string("/usr/bin/python3 -c '") +
                          "import difflib, json, sys\n"
                          "out = []\n"
                          "for c in json.load(open(sys.argv[1])):\n"
                          "    p = [l.lower() for l in c[\"pred\"]]; e = [l.lower() for l in c[\"exp\"]]\n"
                          "    if c[\"text\"]: p, e = \"\\n\".join(p), \"\\n\".join(e)\n"
                          "    out.append(difflib.SequenceMatcher(None, p, e).ratio() ** 4 if p else 0.0)\n"
                          "print(json.dumps(out))' " +
                          path;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  std::remove(path);
  return json::parse(out).get<std::vector<double>>();
}

TEST(AlphabetSortReward, MatchesPythonDifflibToThePower) {
  const std::vector<std::string> exp = {"AnnaBaker", "CarlDavis", "EveFord // new name!", "GinaHill", "IdaJones"};
  const std::vector<std::vector<std::string>> preds = {
      exp,
      {"annabaker", "carldavis", "evEford // NEW NAME!", "ginahill", "idajones"},  // case-insensitive
      {"CarlDavis", "AnnaBaker", "EveFord // new name!", "GinaHill", "IdaJones"},
      {"IdaJones", "GinaHill", "EveFord // new name!", "CarlDavis", "AnnaBaker"},
      {"AnnaBaker", "CarlDavis", "EveFord", "GinaHill", "IdaJones"},
      {"AnnaBaker", "CarlDavis"},
      {"AnnaBaker", "CarlDavis", "EveFord // new name!", "GinaHill", "IdaJones", "ZedZ"},
      {"Nobody"}};
  json cases = json::array();
  for (bool text : {false, true})
    for (const auto& p : preds) cases.push_back({{"pred", p}, {"exp", exp}, {"text", text}});
  const std::vector<double> want = python_scores(cases);
  size_t k = 0;
  for (bool text : {false, true}) {
    AlphabetSortConfig cfg;
    cfg.similarity = text ? "text" : "lines";
    for (const auto& p : preds) {
      std::string reply = "Sure.\n<combined_alphabetical_sorted>\n";
      for (const auto& line : p) reply += "  " + line + "\n\n";
      reply += "</combined_alphabetical_sorted>";
      const double got = alphabet_sort_turn_score(reply, 1, exp, cfg);
      EXPECT_NEAR(got, want[k], 1e-15) << "case " << k;  // pow may differ in the last bit
      ++k;
    }
  }
  AlphabetSortConfig cfg;
  EXPECT_EQ(alphabet_sort_turn_score("<combined_alphabetical_sorted>\n" + exp[0] + "\n</combined_alphabetical_sorted>",
                                     1, {exp[0]}, cfg),
            1.0);
  // The turn-0 tag is not the combined tag, and only the last block counts.
  EXPECT_EQ(alphabet_sort_turn_score("<alphabetical_sorted>\nAnnaBaker\n</alphabetical_sorted>", 1, {"AnnaBaker"}, cfg), 0.0);
  EXPECT_EQ(alphabet_sort_turn_score("<alphabetical_sorted>\nX\n</alphabetical_sorted><alphabetical_sorted>\nAnnaBaker\n"
                                     "</alphabetical_sorted>",
                                     0, {"AnnaBaker"}, cfg),
            1.0);
}

Rollout rollout_for(const TaskSample& s, std::vector<std::string> completions) {
  Rollout r;
  r.sample = s;
  r.completions = std::move(completions);
  r.status = RolloutStatus::completed;
  return r;
}

TEST(AlphabetSortReward, MissingTurnsTagsAndBadInput) {
  const AlphabetSortConfig cfg = multi_turn();
  TaskSample s;
  for (int64_t i = 0;; ++i) {
    s = make_alphabet_sort_sample(cfg, i);
    if (s.prompt["new_names_per_turn"].size() == 3) break;
  }
  const auto replies = alphabet_sort_reference_replies(s);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(alphabet_sort_reward(rollout_for(s, replies), cfg), 1.0);
  // A missing turn scores 0 and the mean is over the expected turns.
  EXPECT_DOUBLE_EQ(alphabet_sort_reward(rollout_for(s, {replies[0]}), cfg), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(alphabet_sort_reward(rollout_for(s, {replies[0], "no tags at all", replies[2]}), cfg), 2.0 / 3.0);
  EXPECT_EQ(alphabet_sort_reward(rollout_for(s, {}), cfg), 0.0);
  EXPECT_EQ(alphabet_sort_reward(rollout_for(s, {"<alphabetical_sorted>\n\n</alphabetical_sorted>"}), cfg), 0.0);

  // Malformed sample: the reward function throws; in a Rubric that is 0 with the reason.
  TaskSample broken = s;
  broken.reference = json{{"expected", "AnnaBaker"}};
  EXPECT_THROW(alphabet_sort_reward(rollout_for(broken, replies), cfg), Error);
  Rubric rubric({{"alphabet_sort", 1.0, [cfg](const Rollout& r) { return alphabet_sort_reward(r, cfg); }}});
  Rollout r = rollout_for(broken, replies);
  rubric.score(r);
  EXPECT_EQ(r.total_reward, 0.0);
  EXPECT_NE(r.rewards[0].error.find("reference.expected"), std::string::npos) << r.rewards[0].error;

  // A malformed sample in the environment ends the episode as an error.
  TaskSample no_prompt = s;
  no_prompt.prompt = json{{"sort_by", "middle"}};
  AlphabetSortEnv env;
  Rollout e = run_episode(env, no_prompt, scripted_generator(replies));
  EXPECT_EQ(e.status, RolloutStatus::error);
  EXPECT_NE(e.failure_reason.find("sort_by"), std::string::npos) << e.failure_reason;
}

TEST(AlphabetSortReward, CompletionCutInsideTheTag) {
  const TaskSpec task = make_task("alphabet_sort", {{"num_samples", 20}, {"num_validation", 2}});
  const TaskSample s = task.train->get(0);
  const std::string full = alphabet_sort_reference_replies(s)[0];
  // Cut at max_tokens in the middle of the closing tag.
  const std::string cut = full.substr(0, full.size() - 8);
  auto env = task.make_env();
  Rollout r = run_episode(*env, s, [&](const GenerateRequest&) { return Completion{cut, "length", 30, 100}; });
  task.rubric.score(r);
  EXPECT_EQ(r.status, RolloutStatus::truncated_length);
  EXPECT_NE(r.failure_reason.find("cut at max_tokens"), std::string::npos);
  EXPECT_EQ(r.total_reward, 0.0);
  EXPECT_EQ(r.rewards[0].error, "");  // scored, not failed: no closing tag -> 0
}

TEST(AlphabetSortConfig, Validation) {
  EXPECT_THROW(AlphabetSortConfig::from_json({{"max_turns", 0}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"min_names", 5}, {"max_names", 3}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"similarity", "chars"}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"similarity_power", 0}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"colour", "blue"}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"seed", "x"}}), Error);
  EXPECT_THROW(make_task("alphabet_sort", {{"num_validation", 5000}, {"num_samples", 100}}), Error);
  EXPECT_THROW(make_task("no_such_task"), Error);
  const AlphabetSortConfig c = AlphabetSortConfig::from_json({{"max_turns", 2}, {"similarity_power", 8}});
  EXPECT_EQ(c.max_turns, 2);
  EXPECT_EQ(c.similarity_power, 8.0);
}

TEST(AlphabetSortConfig, NamePoolRestrictsNamesToEvenlySpacedEntries) {
  // name_pool k: the k first names and k last names at positions i * n / k of each list.
  const auto firsts = alphabet_first_names();
  const auto lasts = alphabet_last_names();
  const int k = 4;
  std::set<std::string> pool;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j)
      pool.insert(std::string(firsts[i * firsts.size() / k]) + std::string(lasts[j * lasts.size() / k]));
  AlphabetSortConfig cfg = AlphabetSortConfig::from_json({{"name_pool", k}, {"max_names", 5}});
  std::set<std::string> used;
  for (int64_t i = 0; i < 200; ++i) {
    const TaskSample s = make_alphabet_sort_sample(cfg, i);
    for (const auto& turn : s.prompt["new_names_per_turn"])
      for (const auto& name : turn) {
        EXPECT_TRUE(pool.count(name.get<std::string>())) << name;
        used.insert(name.get<std::string>());
      }
  }
  EXPECT_EQ(used.size(), pool.size());  // 200 samples of up to 5 names reach all 16
  EXPECT_THROW(AlphabetSortConfig::from_json({{"name_pool", 1}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"name_pool", 2}, {"max_names", 5}}), Error);  // 4 names < 5
}

TEST(AlphabetSortTask, SloppyTeacherDemonstrationsAndTheUnchangedReward) {
  // sft_wrong_key_frac / sft_untagged_frac change the demonstrations only: the samples
  // (prompt, expected) are those of the clean config, a wrong-key demonstration is the
  // expected list sorted by the other key, an untagged one has no answer block, and the
  // reward of each is what the documented rule gives (wrong key < 1 where the orders
  // differ, untagged 0), while the expected answer still scores 1.
  const json base = {{"num_samples", 400}, {"num_validation", 0}, {"min_names", 3}, {"max_names", 4}, {"seed", 7}};
  json sloppy = base;
  sloppy["sft_wrong_key_frac"] = 0.3;
  sloppy["sft_untagged_frac"] = 0.4;
  const TaskSpec clean_task = make_task("alphabet_sort", base), task = make_task("alphabet_sort", sloppy);
  std::set<std::string> firsts, lasts;
  for (auto n : alphabet_first_names()) firsts.emplace(n);
  for (auto n : alphabet_last_names()) lasts.emplace(n);
  int wrong = 0, untagged = 0, clean = 0;
  for (int64_t i = 0; i < 400; ++i) {
    const TaskSample c = clean_task.train->get(i), s = task.train->get(i);
    ASSERT_EQ(s.prompt, c.prompt) << i;
    ASSERT_EQ(s.reference["expected"], c.reference["expected"]) << i;
    const std::string reply = assistant_replies(task.demonstration(s)).at(0);
    auto env = task.make_env();
    Rollout r = run_episode(*env, s, scripted_generator({reply}), {.max_turns = 1});
    task.rubric.score(r);
    const auto expected = s.reference["expected"][0].get<std::vector<std::string>>();
    if (s.reference.contains("demonstration")) {
      ++wrong;
      std::vector<std::string> lines = s.reference["demonstration"][0].get<std::vector<std::string>>();
      EXPECT_TRUE(std::is_permutation(lines.begin(), lines.end(), expected.begin(), expected.end())) << i;
      // Sorted by the key the prompt does not ask for ("FirstLast" split where both parts
      // are names of the lists).
      const bool by_first = s.prompt["sort_by"] == "first";
      const auto key = [&](const std::string& n) {
        for (size_t cut = 1; cut < n.size(); ++cut) {
          const std::string f = n.substr(0, cut), l = n.substr(cut);
          if (firsts.count(f) && lasts.count(l))
            return by_first ? std::make_pair(ascii_lower(l), ascii_lower(f))
                            : std::make_pair(ascii_lower(f), ascii_lower(l));
        }
        ADD_FAILURE() << "not a FirstLast name: " << n;
        return std::make_pair(std::string(), std::string());
      };
      EXPECT_TRUE(std::is_sorted(lines.begin(), lines.end(), [&](auto& a, auto& b) { return key(a) < key(b); })) << i;
      EXPECT_EQ(r.total_reward == 1.0, lines == expected) << i;
    } else if (s.reference.value("untagged", false)) {
      ++untagged;
      EXPECT_EQ(reply.find('<'), std::string::npos) << reply;
      EXPECT_EQ(r.total_reward, 0.0) << reply;
    } else {
      ++clean;
      EXPECT_EQ(r.total_reward, 1.0) << i;
    }
  }
  // One uniform draw per sample: about 30 % / 40 % / 30 % of 400 (binomial, 4.5 sigma).
  EXPECT_NEAR(wrong, 120, 45);
  EXPECT_NEAR(untagged, 160, 45);
  EXPECT_NEAR(clean, 120, 45);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"sft_wrong_key_frac", 1.5}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"sft_wrong_key_frac", 0.6}, {"sft_untagged_frac", 0.6}}), Error);
  EXPECT_THROW(AlphabetSortConfig::from_json({{"sft_untagged_frac", -0.1}}), Error);
}

}  // namespace
}  // namespace titan::rl
