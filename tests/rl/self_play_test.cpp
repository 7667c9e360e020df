// The self_play workload (titan/rl/self_play.h): the Nim engine against Bouton's
// theory (checked by an independent minimax), the move parser, games against the
// scripted opponent replayed by the rubric, the zero-sum per-side advantage scales,
// the context reset every move (SFT documents and rollouts), bad input scored 0 with
// the reason, and a GRPO self-play run with logprob_diff_max == 0.0 at every step.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/rl/rl_test_util.h"
#include "tests/util/test_files.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/rl/controller.h"
#include "titan/rl/policy_update.h"
#include "titan/rl/self_play.h"
#include "titan/rl/sft_data.h"
#include "titan/rl/tasks.h"

namespace titan::rl {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const json kSmall = json{{"num_samples", 64}, {"num_validation", 16}, {"min_stones", 5},
                         {"max_stones", 12}, {"max_take", 3},        {"max_moves", 8}};

// Minimax over (pile, moves left) with the same rules: +1 when the player to move
// wins, -1 when it loses, 0 for a draw (max_moves reached), against perfect play.
int minimax(int pile, int moves_left, int max_take, std::map<std::pair<int, int>, int>& memo) {
  if (moves_left == 0) return 0;
  auto it = memo.find({pile, moves_left});
  if (it != memo.end()) return it->second;
  int best = -2;
  for (int take = 1; take <= std::min(max_take, pile); ++take) {
    const int v = take == pile ? 1 : -minimax(pile - take, moves_left - 1, max_take, memo);
    best = std::max(best, v);
  }
  memo[{pile, moves_left}] = best;
  return best;
}

TEST(SelfPlay, NimEngineFollowsTheRules) {
  NimGame g;
  g.pile = 5;
  g.max_take = 3;
  g.max_moves = 8;
  g.play(3);  // player 1: 5 -> 2
  EXPECT_EQ(g.pile, 2);
  EXPECT_EQ(g.to_move, 1);
  g.play(2);  // player 2 takes the last stones
  EXPECT_TRUE(g.over());
  EXPECT_EQ(g.winner, 1);
  EXPECT_FALSE(g.draw);
  EXPECT_THROW(g.play(1), Error);

  NimGame f;
  f.pile = 2;
  f.max_take = 3;
  f.play(3);  // more than the pile
  EXPECT_EQ(f.winner, 1);
  EXPECT_NE(f.forfeit.find("tried to take 3 (legal: 1 to 2)"), std::string::npos) << f.forfeit;
  NimGame u;
  u.pile = 9;
  u.play_reply("I take two");
  EXPECT_EQ(u.winner, 1);
  EXPECT_NE(u.forfeit.find("no <move>N</move>"), std::string::npos);

  NimGame d;  // 1-stone moves until the cap: a draw
  d.pile = 12;
  d.max_take = 3;
  d.max_moves = 4;
  for (int i = 0; i < 4; ++i) d.play(1);
  EXPECT_TRUE(d.draw);
  EXPECT_EQ(d.winner, -1);
  EXPECT_EQ(d.pile, 8);
}

TEST(SelfPlay, OptimalMoveWinsExactlyFromBoutonsWinningPiles) {
  for (int m = 1; m <= 4; ++m) {
    std::map<std::pair<int, int>, int> memo;
    for (int pile = 1; pile <= 40; ++pile) {
      const int v = minimax(pile, pile, m, memo);  // enough moves: no draws
      EXPECT_EQ(v, pile % (m + 1) == 0 ? -1 : 1) << "pile " << pile << " max_take " << m;
      if (v == 1) {  // the optimal move leaves a pile the opponent loses from
        const int take = nim_optimal_move(pile, m);
        EXPECT_TRUE(take == pile || minimax(pile - take, pile - 1, m, memo) == -1) << pile << " " << m;
      }
    }
  }
}

TEST(SelfPlay, ParsesTheLastMoveBlock) {
  EXPECT_EQ(nim_parse_move("<move>2</move>"), 2);
  EXPECT_EQ(nim_parse_move("<move> 3 </move>"), 3);
  EXPECT_EQ(nim_parse_move("<move>1</move> no, <MOVE>3</MOVE>"), 3);
  EXPECT_EQ(nim_parse_move("<move>12</move>"), 12);
  EXPECT_EQ(nim_parse_move("take 2"), std::nullopt);
  EXPECT_EQ(nim_parse_move("<move>x</move>"), std::nullopt);
  EXPECT_EQ(nim_parse_move("<move>-1</move>"), std::nullopt);
  EXPECT_EQ(nim_parse_move("<move>1234</move>"), std::nullopt);
  EXPECT_EQ(nim_parse_move("<move>2"), std::nullopt);
}

TEST(SelfPlay, SamplesAreDeterministicAndValidationPlaysTheScriptedOpponent) {
  const TaskSpec t = make_task("self_play", kSmall);
  EXPECT_EQ(t.train->size(), 64);
  EXPECT_EQ(t.validation->size(), 16);
  std::set<int> piles;
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    EXPECT_EQ(s.to_json(), t.train->get(i).to_json());
    EXPECT_EQ(s.prompt["opponent"], "self");
    const int n = s.prompt["stones"].get<int>();
    EXPECT_GE(n, 5);
    EXPECT_LE(n, 12);
    piles.insert(n);
  }
  EXPECT_GE(piles.size(), 6u);
  int sides = 0;
  for (int64_t i = 0; i < t.validation->size(); ++i) {
    const TaskSample s = t.validation->get(i);
    EXPECT_EQ(s.prompt["opponent"], "scripted");
    sides += s.prompt["policy_side"].get<int>();
  }
  EXPECT_EQ(sides, 8);  // half the games with the policy moving second
}

// The perfect policy against the scripted opponent: it wins every game it starts
// from a pile that is not a multiple of 4 (Bouton), whatever the opponent draws.
TEST(SelfPlay, OptimalPlayBeatsTheScriptedOpponentFromWinningPiles) {
  json cfg = kSmall;
  cfg["demo_policy"] = "optimal";
  cfg["num_validation"] = 200;
  cfg["max_moves"] = 16;
  const TaskSpec t = make_task("self_play", cfg);
  int won = 0, games = 0;
  for (int64_t i = 0; i < t.validation->size(); ++i) {
    const TaskSample s = t.validation->get(i);
    Rollout r = t.demonstration_rollout(s);
    t.rubric.score(r);
    const int n = s.prompt["stones"].get<int>();
    const int side = s.prompt["policy_side"].get<int>();
    // The replay of the replies is the environment's game.
    const NimGame g = replay_self_play(SelfPlayConfig::from_json(cfg), s, r.completions);
    ASSERT_TRUE(g.over());
    EXPECT_EQ(r.reward("outcome"), g.winner == side ? 1.0 : -1.0) << s.id;
    EXPECT_EQ(r.reward("win"), g.winner == side ? 1.0 : 0.0);
    EXPECT_EQ(r.reward("draw"), 0.0);
    if (side == 0 && n % 4 != 0) {
      ++games;
      won += r.reward("win") == 1.0;
    }
  }
  EXPECT_GT(games, 50);
  EXPECT_EQ(won, games);
}

TEST(SelfPlay, SelfPlayRolloutIsZeroSumAndTrainsBothSides) {
  const TaskSpec t = make_task("self_play", kSmall);
  ASSERT_TRUE(static_cast<bool>(t.turn_advantage_scales));
  int decided = 0;
  for (int64_t i = 0; i < 32; ++i) {
    const TaskSample s = t.train->get(i);
    Rollout r = t.demonstration_rollout(s);
    t.rubric.score(r);
    ASSERT_EQ(r.status, RolloutStatus::completed) << r.failure_reason;
    const NimGame g = replay_self_play(SelfPlayConfig::from_json(kSmall), s, r.completions);
    EXPECT_EQ(g.moves, r.num_turns());
    EXPECT_EQ(r.total_reward, g.draw ? 0.0 : g.winner == 0 ? 1.0 : -1.0);
    decided += !g.draw;
    const std::vector<double> sc = t.turn_advantage_scales(r);
    ASSERT_EQ(sc.size(), static_cast<size_t>(r.num_turns()));
    for (size_t k = 0; k < sc.size(); ++k) EXPECT_EQ(sc[k], k % 2 == 0 ? 1.0 : -1.0);
    // Every move's context is [system, user(state)]: the context restarts every move.
    ASSERT_EQ(r.turn_context_start.size(), static_cast<size_t>(r.num_turns()));
    for (int k = 0; k < r.num_turns(); ++k) {
      const size_t b = static_cast<size_t>(r.turn_context_start[static_cast<size_t>(k)]);
      EXPECT_EQ(r.messages[b].role, "system");
      EXPECT_EQ(r.messages[b + 1].role, "user");
      EXPECT_EQ(r.messages[b + 2].role, "assistant");
      EXPECT_NE(r.messages[b + 1].content.find(fmt::format("You are player {}.", k % 2 + 1)), std::string::npos);
    }
  }
  EXPECT_GT(decided, 16);
  const TaskSample v = t.validation->get(0);
  Rollout rv = t.demonstration_rollout(v);
  for (double x : t.turn_advantage_scales(rv)) EXPECT_EQ(x, 1.0);
}

TEST(SelfPlay, SftDocumentsHoldOneMoveInItsOwnContext) {
  const TaskSpec t = make_task("self_play", kSmall);
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  VectorSource src("few", {t.train->get(0), t.train->get(1), t.train->get(2)});
  const data::MaskedDocuments docs = sft_documents(t, src, *tok);
  int64_t n = 0;
  for (int64_t i = 0; i < src.size(); ++i) {
    const Rollout r = t.demonstration_rollout(src.get(i));
    for (const std::string& reply : r.completions) {
      std::vector<int32_t> ctx, target;
      for (int64_t k = docs.offsets[static_cast<size_t>(n)]; k < docs.offsets[static_cast<size_t>(n) + 1]; ++k)
        (docs.loss_mask[static_cast<size_t>(k)] ? target : ctx).push_back(docs.tokens[static_cast<size_t>(k)]);
      ++n;
      EXPECT_EQ(tok->decode(target), reply + "<|im_end|>");
      const std::string context = tok->decode(ctx);
      size_t piles = 0;
      for (size_t p = context.find("Pile:"); p != std::string::npos; p = context.find("Pile:", p + 1)) ++piles;
      EXPECT_EQ(piles, 1u) << context;  // only the current state, no earlier turns
    }
  }
  EXPECT_EQ(n, docs.size());
}

// A move's context names exactly the move made since its player last moved, so the
// games against the scripted opponent (validation) show the policy the same kind of
// context as self-play (training and SFT): one "Player K took T." from the other
// side, then the pile that move left.
TEST(SelfPlay, EveryContextNamesTheOpponentsLastMoveOnly) {
  json cfg = kSmall;
  cfg["num_validation"] = 64;
  const TaskSpec t = make_task("self_play", cfg);
  const std::regex state(R"(^(Player ([12]) took ([0-9]+)\. )?Pile: ([0-9]+)\. You are player ([12])\. Your move\.$)");
  int scripted_events = 0;
  for (const SampleSource* src : {t.train.get(), t.validation.get()})
    for (int64_t i = 0; i < src->size(); ++i) {
      const TaskSample s = src->get(i);
      const Rollout r = t.demonstration_rollout(s);
      int pile = s.prompt["stones"].get<int>(), last_take = 0;
      for (int k = 0; k < r.num_turns(); ++k) {
        const size_t b = static_cast<size_t>(r.turn_context_start[static_cast<size_t>(k)]);
        const std::string& user = r.messages[b + 1].content;
        std::smatch m;
        ASSERT_TRUE(std::regex_match(user, m, state)) << user;
        const int me = std::stoi(m[5].str());
        const int now = std::stoi(m[4].str());
        if (m[1].matched) {
          EXPECT_NE(std::stoi(m[2].str()), me) << user;  // the other side's move, never its own
          const int took = std::stoi(m[3].str());
          if (src == t.validation.get()) {  // the policy's last take, then the opponent's answer
            EXPECT_EQ(pile - last_take - took, now) << s.id << ": " << user;
            ++scripted_events;
          } else {  // self-play: the previous turn was the other side's move
            EXPECT_EQ(took, last_take) << s.id << ": " << user;
            EXPECT_EQ(pile - took, now) << s.id << ": " << user;
          }
        } else {
          EXPECT_EQ(now, s.prompt["stones"].get<int>()) << user;  // only the first move has no event
        }
        pile = now;
        last_take = *nim_parse_move(r.completions[static_cast<size_t>(k)]);
      }
    }
  EXPECT_GT(scripted_events, 64);
}

TEST(SelfPlay, BadInputScoresZeroWithTheReason) {
  const TaskSpec t = make_task("self_play", kSmall);
  // A sample without a pile: env.init fails, the rollout is an error scored 0.
  TaskSample bad = t.train->get(0);
  bad.prompt.erase("stones");
  std::unique_ptr<MessageEnv> env = t.make_env();
  Rollout r = run_episode(*env, bad, scripted_generator({"<move>1</move>"}), {.max_turns = 8});
  t.rubric.score(r);
  EXPECT_EQ(r.status, RolloutStatus::error);
  EXPECT_NE(r.failure_reason.find("prompt.stones"), std::string::npos) << r.failure_reason;
  EXPECT_EQ(r.total_reward, 0.0);
  // A completed rollout whose sample the rubric cannot read: the reward throws, 0 with the reason.
  Rollout ok = t.demonstration_rollout(t.train->get(1));
  ok.sample.prompt["opponent"] = "nobody";
  t.rubric.score(ok);
  EXPECT_EQ(ok.total_reward, 0.0);
  EXPECT_NE(ok.rewards[0].error.find("prompt.opponent"), std::string::npos) << ok.rewards[0].error;
  // An unreadable move forfeits the game: player 1 loses, not an error.
  std::unique_ptr<MessageEnv> env2 = t.make_env();
  Rollout f = run_episode(*env2, t.train->get(2), scripted_generator({"I pass"}), {.max_turns = 8});
  t.rubric.score(f);
  EXPECT_EQ(f.status, RolloutStatus::completed);
  EXPECT_EQ(f.total_reward, -1.0);
  EXPECT_THROW(make_task("self_play", json{{"max_take", 0}}), Error);
  EXPECT_THROW(make_task("self_play", json{{"min_stones", 3}}), Error);
  EXPECT_THROW(make_task("self_play", json{{"demo_policy", "greedy"}}), Error);
  EXPECT_THROW(make_task("self_play", json{{"stones", 5}}), Error);
}

// A reply cut at generator.max_tokens loses for its mover, like an unreadable move (a
// 0 would beat a loss); a rollout stopped by rl.max_turns has no result (0).
TEST(SelfPlay, ACutReplyForfeitsTheGameOfItsMover) {
  const TaskSpec t = make_task("self_play", kSmall);
  int checked = 0;
  for (const SampleSource* src : {t.train.get(), t.validation.get()})
    for (int64_t i = 0; i < 8; ++i) {
      const TaskSample s = src->get(i);
      const Rollout full = t.demonstration_rollout(s);
      const bool scripted = s.prompt["opponent"] == "scripted";
      for (int k = 0; k < full.num_turns(); ++k) {
        Rollout r = full;
        r.completions.resize(static_cast<size_t>(k) + 1);
        r.completions.back() = "<move>1</mo";
        r.status = RolloutStatus::truncated_length;
        t.rubric.score(r);
        // Self-play: turn k is player (k mod 2)'s; the reward is player 1's. Scripted: every turn is the policy's.
        const double want = scripted || k % 2 == 0 ? -1.0 : 1.0;
        EXPECT_EQ(r.total_reward, want) << s.id << " turn " << k;
        EXPECT_EQ(r.reward("win"), want > 0 ? 1.0 : 0.0);
        EXPECT_EQ(r.reward("draw"), 0.0);
        r.status = RolloutStatus::truncated_max_turns;
        t.rubric.score(r);
        EXPECT_EQ(r.total_reward, 0.0);
        ++checked;
      }
    }
  EXPECT_GT(checked, 32);
}

// The real environment and rubric with a random-init model, whose replies are mapped
// onto moves (1 + length mod 3) so that games last several moves and groups differ:
// both players' turns are trained, and the generator and trainer agree bitwise.
class MappedMoves final : public MessageEnv {
 public:
  explicit MappedMoves(std::unique_ptr<MessageEnv> inner) : inner_(std::move(inner)) {}
  std::vector<ChatMessage> init(const TaskSample& s) override { return inner_->init(s); }
  StepResult step(const std::string& reply) override { return inner_->step(as_move(reply)); }
  static std::string as_move(const std::string& reply) { return fmt::format("<move>{}</move>", 1 + reply.size() % 3); }

 private:
  std::unique_ptr<MessageEnv> inner_;
};

TEST(SelfPlay, GrpoSelfPlayHasExactLogprobParity) {
  const fs::path dump = test::fresh_dir("self_play_grpo");
  config::JobConfig c = test_util::tiny_job(dump);
  c.training.steps = 2;
  c.generator.max_tokens = 160;  // the random model stops (<|im_end|>) in about half its replies
  c.rl.env = "self_play";
  c.rl.env_config = kSmall.dump();
  c.rl.max_turns = 8;
  c.rl.val_freq = 2;
  c.rl.val_samples = 4;
  c.rl.max_error_fraction = 1.0;
  TaskSpec t = make_task("self_play", kSmall);
  const SelfPlayConfig cfg = SelfPlayConfig::from_json(kSmall);
  auto inner = t.make_env;
  t.make_env = [inner] { return std::make_unique<MappedMoves>(inner()); };
  t.rubric = Rubric({RewardFn{"outcome", 1.0, [cfg](const Rollout& r) {
                                Rollout m = r;
                                for (std::string& s : m.completions) s = MappedMoves::as_move(s);
                                return self_play_outcome(cfg, m);
                              }}},
                    RubricOptions{0.0, 0.0});
  RLController ctl(c, t);
  EXPECT_EQ(ctl.run({.print = false}).steps_done, 2);
  const std::vector<json> rows = test_util::step_rows(dump);
  ASSERT_EQ(rows.size(), 2u);
  for (const json& row : rows) {
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
  }
  EXPECT_TRUE(rows.back().contains("val_outcome"));
  int multi = 0;
  for (const json& l : test_util::read_jsonl(dump / "rollouts.jsonl")) {
    EXPECT_NE(l["status"], "error") << l.dump();
    multi += l["completions"].size() >= 2;  // both players moved
  }
  EXPECT_GT(multi, 0);
}

// The second player's turn trains with advantage * -1: a two-turn rollout with scales
// (+1, -1) and advantage A gives bitwise the gradients of two one-turn rollouts with
// advantages A and -A; with scales (+1, +1) they differ.
TEST(SelfPlay, SecondPlayersTurnTrainsWithTheOppositeAdvantage) {
  models::TransformerConfig cfg = models::flavor("qwen3", "debugmodel");
  cfg.vocab_size = 64;
  cfg.hidden_size = 32;
  cfg.num_hidden_layers = 1;
  cfg.num_attention_heads = 2;
  cfg.num_key_value_heads = 1;
  cfg.head_dim = 16;
  cfg.intermediate_size = 64;
  cfg.max_position_embeddings = 64;
  models::Decoder m(cfg);
  m.init_weights(5);
  auto turn = [](std::vector<int32_t> p, std::vector<int32_t> c, double scale) {
    TurnTokens t;
    t.prompt_ids = std::move(p);
    t.logprobs.assign(c.size(), -3.0f);
    t.completion_ids = std::move(c);
    t.advantage_scale = scale;
    return t;
  };
  const TurnTokens a = turn({1, 5, 9}, {12, 40, 3}, 1.0), b = turn({2, 6}, {33, 7}, -1.0);
  auto grads = [&](const std::vector<TokenRollout>& rs, const std::vector<double>& adv) {
    std::vector<const TokenRollout*> ptrs;
    for (const TokenRollout& r : rs) ptrs.push_back(&r);
    m.zero_grad();
    PolicyUpdateSettings s;
    s.microbatch_tokens = 64;
    policy_update_backward(m, nullptr, ptrs, adv, s);
    std::vector<float> g;
    for (auto& [name, p] : m.named_parameters())
      if (p.grad().defined())
        for (float x : p.grad().to_vector<float>()) g.push_back(x);
    return g;
  };
  TokenRollout both, first, second;
  both.turns = {a, b};
  first.turns = {a};
  second.turns = {b};
  second.turns[0].advantage_scale = 1.0;
  const std::vector<float> g2 = grads({both}, {0.7});
  const std::vector<float> g1 = grads({first, second}, {0.7, -0.7});
  ASSERT_EQ(g1.size(), g2.size());
  ASSERT_FALSE(g1.empty());
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
  both.turns[1].advantage_scale = 1.0;
  EXPECT_NE(grads({both}, {0.7}), g1);
}

}  // namespace
}  // namespace titan::rl
