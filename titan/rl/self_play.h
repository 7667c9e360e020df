// self_play: a two-player zero-sum game that the policy plays against itself. The
// game is single-pile Nim (normal play): a pile of n stones, the players take turns
// removing 1..max_take stones, whoever takes the last stone wins. A game that reaches
// max_moves moves without a winner is a draw. A move that cannot be read (no
// <move>N</move>, N outside [1, min(max_take, pile)]) forfeits the game.
//
// Nim's theory (Bouton 1901; for one pile with moves 1..m): the player to move loses
// against perfect play exactly when n is a multiple of m + 1; otherwise taking
// n mod (m + 1) leaves the opponent a losing pile (nim_optimal_move).
//
// Episode: one game, one assistant turn per move. The context restarts every move
// (StepResult::reset_context): a turn's context is [system (the rules),
// user (the move made since its player last moved, and the state)], so every move is trained in its own short
// context.
//
//   system: Nim. Take turns removing 1 to 3 stones from a pile; whoever takes the last stone wins. ...
//   user:   Pile: 9. You are player 1. Your move.
//   assistant: <move>1</move>
//   user:   Player 1 took 1. Pile: 8. You are player 2. Your move.
//   assistant: <move>3</move>
//   ...
//
// Opponents (TaskSample.prompt.opponent):
//   "self"     (training samples) the same policy plays both sides in one rollout, so
//              a rollout group is group_size games of the policy against itself from
//              the same pile. The rollout's reward is player 1's outcome; the second
//              player's turns train with advantage scale -1 (TaskSpec::
//              turn_advantage_scales): zero-sum, its reward is minus player 1's.
//   "scripted" (validation samples) the policy plays side prompt.policy_side (0 =
//              first, 1 = second) against a fixed scripted opponent that takes a
//              uniformly random legal number of stones (Philox keyed by the config
//              seed on the sample's stream, draw k for the game's move k), so the
//              games are the same for every policy that plays the same moves.
//
// Rewards: "outcome" (weight 1): +1 win, -1 loss, 0 draw, for player 1 (self) or the
// policy (scripted); "win" and "draw" (weight 0): indicators of the same game, whose
// validation means (val_win, val_draw in metrics.jsonl) are the win and draw rates
// against the scripted opponent. A reply cut at generator.max_tokens forfeits like an
// unreadable one (its mover loses); an errored rollout, or one stopped by rl.max_turns
// or rl.max_total_tokens, scores 0.
//
// Demonstrations (SFT): both sides play demo_policy: "random" (a seeded uniformly
// random legal move: the model learns the format and the legal moves, not the
// strategy, which RL has to find) or "optimal" (nim_optimal_move).
//
//   TaskSample.prompt    {"stones": n, "opponent": "self"|"scripted", "policy_side": 0|1}
//   TaskSample.reference {} (the outcome is the game's, replayed from the replies)
//   TaskSample.metadata  {"index": i, "stream": k}
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/rl/env.h"
#include "titan/rl/rollout.h"
#include "titan/rl/tasks.h"

namespace titan::rl {

struct SelfPlayConfig {
  uint64_t seed = 11;
  int64_t num_samples = 20000;   // training games (self-play)
  int64_t num_validation = 256;  // games against the scripted opponent, half as each side
  int min_stones = 5;            // starting pile, uniform in [min_stones, max_stones]
  int max_stones = 12;
  int max_take = 3;              // a move takes 1..max_take stones
  int max_moves = 8;             // moves of both sides; a game reaching it without a winner is a draw
  std::string demo_policy = "random";  // "random" | "optimal"
  std::string system_prompt;           // "" = the default (the rules)

  // Throws titan::Error naming the field for values out of range.
  void validate() const;
  // Keys as the field names; unknown keys and wrong types are titan::Error.
  static SelfPlayConfig from_json(const nlohmann::json& j);
};

// A Nim game in progress. Players are 0 (moves first) and 1.
struct NimGame {
  int pile = 0;
  int max_take = 3;
  int max_moves = 0;
  int moves = 0;          // moves made
  int to_move = 0;        // the player to move
  int winner = -1;        // 0 or 1 when decided
  bool draw = false;      // max_moves reached without a winner
  std::string forfeit;    // why the last mover forfeited (empty otherwise)
  bool over() const { return winner >= 0 || draw; }
  // Plays `take` for the player to move: an illegal take (outside [1, min(max_take,
  // pile)]) forfeits (the other player wins, `forfeit` says why). Throws titan::Error
  // when the game is over.
  void play(int take);
  // Plays the move read from a reply (nim_parse_move); an unreadable one forfeits.
  void play_reply(std::string_view reply);
};

// The take of the reply's last <move>N</move> block (ASCII digits, trimmed), or
// nullopt when there is none or it is not a number of at most 3 digits.
std::optional<int> nim_parse_move(std::string_view reply);

// n mod (max_take + 1) when that is not 0 (the move that leaves a multiple of
// max_take + 1), else 1 (a losing pile: any move loses against perfect play).
int nim_optimal_move(int pile, int max_take);

// The scripted opponent's move at game move `move_index` of sample `stream`: a
// uniformly random take in [1, min(max_take, pile)].
int nim_scripted_move(const SelfPlayConfig& cfg, int64_t stream, int move_index, int pile);

// The game a rollout's replies played (the scripted opponent's moves replayed), as
// far as they go.
NimGame replay_self_play(const SelfPlayConfig& cfg, const TaskSample& sample, const std::vector<std::string>& replies);

// "outcome" of a rollout: +1 / -1 / 0 for player 1 (self) or the policy (scripted).
// Throws titan::Error for a sample without prompt.stones / prompt.opponent.
double self_play_outcome(const SelfPlayConfig& cfg, const Rollout& r);

class SelfPlayEnv final : public MessageEnv {
 public:
  explicit SelfPlayEnv(SelfPlayConfig cfg);
  std::vector<ChatMessage> init(const TaskSample& sample) override;
  // Plays the reply's move (and the scripted opponent's answer), then the next state
  // in a fresh context [system, user], or done when the game is over.
  StepResult step(const std::string& reply) override;

 private:
  std::vector<ChatMessage> context(const std::string& events) const;
  std::string opponent_moves();  // scripted: plays while it is the opponent's turn

  SelfPlayConfig cfg_;
  std::string system_prompt_;
  NimGame game_;
  bool scripted_ = false;
  int policy_side_ = 0;
  int64_t stream_ = 0;
  bool started_ = false;
};

// The task "self_play" (tasks.h): config = SelfPlayConfig keys.
TaskSpec make_self_play_task(const nlohmann::json& config);

}  // namespace titan::rl
