#include "titan/rl/self_play.h"

#include <algorithm>
#include <fmt/format.h>

#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/rl/json_config.h"
#include "titan/rl/text.h"

namespace titan::rl {

using nlohmann::json;

namespace {

// Philox streams of sample `stream` (3 per sample): the set-up draw, the scripted
// opponent's moves, the demonstration's moves. Validation samples use streams from
// kValidationStream on, so they never share draws with training samples.
constexpr int64_t kValidationStream = int64_t{1} << 40;
uint64_t setup_stream(int64_t s) { return 3 * static_cast<uint64_t>(s); }
uint64_t opponent_stream(int64_t s) { return 3 * static_cast<uint64_t>(s) + 1; }
uint64_t demo_stream(int64_t s) { return 3 * static_cast<uint64_t>(s) + 2; }

// Uniform in [0, n), n >= 1, from draw `offset` of `stream` (64-bit multiply-shift).
int64_t uniform_below(uint64_t seed, uint64_t offset, uint64_t stream, int64_t n) {
  const PhiloxCounter c = philox_draw(seed, offset, stream);
  const uint64_t u = (static_cast<uint64_t>(c[0]) << 32) | c[1];
  return static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(n)) >> 64);
}

TaskSample make_sample(const SelfPlayConfig& cfg, int64_t index, bool validation) {
  const int64_t stream = validation ? kValidationStream + index : index;
  TaskSample s;
  s.id = fmt::format("self_play/{}/{}", validation ? "validation" : "train", index);
  const int stones =
      cfg.min_stones + static_cast<int>(uniform_below(cfg.seed, 0, setup_stream(stream), cfg.max_stones - cfg.min_stones + 1));
  s.prompt = json{{"stones", stones}, {"opponent", validation ? "scripted" : "self"},
                  {"policy_side", validation ? static_cast<int>(index % 2) : 0}};
  s.metadata = json{{"index", index}, {"stream", stream}};
  return s;
}

class SelfPlaySource final : public SampleSource {
 public:
  SelfPlaySource(SelfPlayConfig cfg, bool validation) : cfg_(std::move(cfg)), validation_(validation) {}
  std::string name() const override { return validation_ ? "self_play/validation" : "self_play/train"; }
  int64_t size() const override { return validation_ ? cfg_.num_validation : cfg_.num_samples; }
  TaskSample get(int64_t i) const override {
    TITAN_CHECK(i >= 0 && i < size(), "{} source: index {} outside [0, {})", name(), i, size());
    return make_sample(cfg_, i, validation_);
  }

 private:
  SelfPlayConfig cfg_;
  bool validation_;
};

struct GameSetup {
  int stones = 0;
  bool scripted = false;
  int policy_side = 0;
  int64_t stream = 0;
};

GameSetup setup_of(const TaskSample& s) {
  auto bad = [&](const char* what) { fail("self_play: sample '{}': {}", s.id, what); };
  if (!s.prompt.is_object() || !s.prompt.contains("stones") || !s.prompt["stones"].is_number_integer())
    bad("prompt.stones must be an integer");
  if (!s.prompt.contains("opponent") || !s.prompt["opponent"].is_string()) bad("prompt.opponent must be a string");
  GameSetup g;
  g.stones = s.prompt["stones"].get<int>();
  const std::string opp = s.prompt["opponent"].get<std::string>();
  if (opp != "self" && opp != "scripted") bad("prompt.opponent must be \"self\" or \"scripted\"");
  g.scripted = opp == "scripted";
  if (s.prompt.contains("policy_side")) g.policy_side = s.prompt["policy_side"].get<int>();
  if (g.policy_side != 0 && g.policy_side != 1) bad("prompt.policy_side must be 0 or 1");
  if (g.stones < 1) bad("prompt.stones must be >= 1");
  if (s.metadata.is_object() && s.metadata.contains("stream")) g.stream = s.metadata["stream"].get<int64_t>();
  return g;
}

NimGame new_game(const SelfPlayConfig& cfg, const GameSetup& g) {
  NimGame game;
  game.pile = g.stones;
  game.max_take = cfg.max_take;
  game.max_moves = cfg.max_moves;
  return game;
}

// Plays the scripted opponent while it is its turn; returns the moves as text.
std::string scripted_turns(const SelfPlayConfig& cfg, const GameSetup& g, NimGame& game) {
  std::string events;
  while (g.scripted && !game.over() && game.to_move != g.policy_side) {
    const int take = nim_scripted_move(cfg, g.stream, game.moves, game.pile);
    events += fmt::format("Player {} took {}. ", game.to_move + 1, take);
    game.play(take);
  }
  return events;
}

}  // namespace

void SelfPlayConfig::validate() const {
  TITAN_CHECK(num_samples >= 1, "self_play config: num_samples must be >= 1, got {}", num_samples);
  TITAN_CHECK(num_validation >= 1, "self_play config: num_validation must be >= 1, got {}", num_validation);
  TITAN_CHECK(max_take >= 1 && max_take <= 9, "self_play config: max_take must be in [1, 9], got {}", max_take);
  TITAN_CHECK(min_stones >= 1 && min_stones <= 999, "self_play config: min_stones must be in [1, 999], got {}",
              min_stones);
  TITAN_CHECK(min_stones > max_take, "self_play config: min_stones must be > max_take={} (the first move must not end the game), got {}",
              max_take, min_stones);
  TITAN_CHECK(max_stones >= min_stones && max_stones <= 999,
              "self_play config: max_stones must be in [min_stones={}, 999], got {}", min_stones, max_stones);
  TITAN_CHECK(max_moves >= 1 && max_moves <= 256, "self_play config: max_moves must be in [1, 256], got {}",
              max_moves);
  TITAN_CHECK(demo_policy == "random" || demo_policy == "optimal",
              "self_play config: demo_policy must be \"random\" or \"optimal\", got \"{}\"", demo_policy);
}

SelfPlayConfig SelfPlayConfig::from_json(const json& j) {
  SelfPlayConfig c;
  JsonConfigReader r(j, "self_play config");
  r.read("seed", c.seed);
  r.read("num_samples", c.num_samples);
  r.read("num_validation", c.num_validation);
  r.read("min_stones", c.min_stones);
  r.read("max_stones", c.max_stones);
  r.read("max_take", c.max_take);
  r.read("max_moves", c.max_moves);
  r.read("demo_policy", c.demo_policy);
  r.read("system_prompt", c.system_prompt);
  r.finish();
  c.validate();
  return c;
}

void NimGame::play(int take) {
  TITAN_CHECK(!over(), "NimGame::play: the game is over");
  const int limit = std::min(max_take, pile);
  if (take < 1 || take > limit) {
    forfeit = fmt::format("player {} tried to take {} (legal: 1 to {})", to_move + 1, take, limit);
    winner = 1 - to_move;
    return;
  }
  pile -= take;
  ++moves;
  if (pile == 0) {
    winner = to_move;
    return;
  }
  to_move = 1 - to_move;
  if (max_moves > 0 && moves >= max_moves) draw = true;
}

void NimGame::play_reply(std::string_view reply) {
  const std::optional<int> take = nim_parse_move(reply);
  if (take) {
    play(*take);
    return;
  }
  TITAN_CHECK(!over(), "NimGame::play_reply: the game is over");
  forfeit = fmt::format("player {} gave no <move>N</move>", to_move + 1);
  winner = 1 - to_move;
}

std::optional<int> nim_parse_move(std::string_view reply) {
  const std::vector<std::string> blocks = find_tag_blocks(reply, "move");
  if (blocks.empty()) return std::nullopt;
  const std::string_view b = strip(blocks.back());
  if (b.empty() || b.size() > 3) return std::nullopt;
  int v = 0;
  for (char c : b) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

int nim_optimal_move(int pile, int max_take) {
  const int r = pile % (max_take + 1);
  return r == 0 ? 1 : r;
}

int nim_scripted_move(const SelfPlayConfig& cfg, int64_t stream, int move_index, int pile) {
  const int limit = std::min(cfg.max_take, pile);
  return 1 + static_cast<int>(uniform_below(cfg.seed, static_cast<uint64_t>(move_index), opponent_stream(stream), limit));
}

NimGame replay_self_play(const SelfPlayConfig& cfg, const TaskSample& sample, const std::vector<std::string>& replies) {
  const GameSetup g = setup_of(sample);
  NimGame game = new_game(cfg, g);
  scripted_turns(cfg, g, game);
  for (const std::string& reply : replies) {
    if (game.over()) break;
    game.play_reply(reply);
    scripted_turns(cfg, g, game);
  }
  return game;
}

double self_play_outcome(const SelfPlayConfig& cfg, const Rollout& r) {
  const GameSetup g = setup_of(r.sample);
  const int side = g.scripted ? g.policy_side : 0;
  if (r.status == RolloutStatus::truncated_length && !r.completions.empty()) {
    // A reply cut at max_tokens forfeits like an unreadable one: its mover loses.
    const std::vector<std::string> played(r.completions.begin(), r.completions.end() - 1);
    const NimGame game = replay_self_play(cfg, r.sample, played);
    TITAN_CHECK(!game.over(), "self_play: rollout '{}': a reply was cut after the game ended", r.id);
    return game.to_move == side ? -1.0 : 1.0;
  }
  if (is_truncated(r.status)) return 0.0;  // stopped by rl.max_turns / max_total_tokens: no result
  const NimGame game = replay_self_play(cfg, r.sample, r.completions);
  TITAN_CHECK(game.over(), "self_play: rollout '{}': the game is not over after {} replies", r.id, r.completions.size());
  if (game.draw) return 0.0;
  return game.winner == side ? 1.0 : -1.0;
}

SelfPlayEnv::SelfPlayEnv(SelfPlayConfig cfg) : cfg_(std::move(cfg)) {
  system_prompt_ = !cfg_.system_prompt.empty()
                       ? cfg_.system_prompt
                       : fmt::format("Nim. Take turns removing 1 to {} stones from a pile; whoever takes the last stone "
                                     "wins. Reply with <move>N</move>.",
                                     cfg_.max_take);
}

std::vector<ChatMessage> SelfPlayEnv::context(const std::string& events) const {
  return {ChatMessage{"system", system_prompt_, std::nullopt},
          ChatMessage{"user",
                      fmt::format("{}Pile: {}. You are player {}. Your move.", events, game_.pile, game_.to_move + 1),
                      std::nullopt}};
}

std::vector<ChatMessage> SelfPlayEnv::init(const TaskSample& sample) {
  const GameSetup g = setup_of(sample);
  scripted_ = g.scripted;
  policy_side_ = g.policy_side;
  stream_ = g.stream;
  game_ = new_game(cfg_, g);
  started_ = true;
  return context(scripted_turns(cfg_, g, game_));
}

StepResult SelfPlayEnv::step(const std::string& reply) {
  TITAN_CHECK(started_, "SelfPlayEnv::step: called before init");
  TITAN_CHECK(!game_.over(), "SelfPlayEnv::step: the game is over");
  const int mover = game_.to_move;
  const int pile = game_.pile;
  game_.play_reply(reply);
  if (game_.over()) return StepResult{{}, true, false};
  // The next context shows the moves made since its player last moved: in self-play
  // the mover's move (the other side's); against the scripted opponent, only the
  // opponent's answer, so both kinds of context name exactly one move.
  std::string events = scripted_ ? std::string() : fmt::format("Player {} took {}. ", mover + 1, pile - game_.pile);
  GameSetup g;
  g.scripted = scripted_;
  g.policy_side = policy_side_;
  g.stream = stream_;
  events += scripted_turns(cfg_, g, game_);
  if (game_.over()) return StepResult{{}, true, false};
  return StepResult{context(events), false, /*reset_context=*/true};
}

namespace {

// Both sides (self) or the policy's side (scripted) play cfg.demo_policy.
std::vector<std::string> reference_replies(const SelfPlayConfig& cfg, const TaskSample& sample) {
  const GameSetup g = setup_of(sample);
  NimGame game = new_game(cfg, g);
  scripted_turns(cfg, g, game);
  std::vector<std::string> out;
  while (!game.over()) {
    const int take = cfg.demo_policy == "optimal"
                         ? nim_optimal_move(game.pile, cfg.max_take)
                         : 1 + static_cast<int>(uniform_below(cfg.seed, static_cast<uint64_t>(game.moves),
                                                              demo_stream(g.stream), std::min(cfg.max_take, game.pile)));
    out.push_back(fmt::format("<move>{}</move>", take));
    game.play(take);
    scripted_turns(cfg, g, game);
  }
  return out;
}

}  // namespace

TaskSpec make_self_play_task(const json& config) {
  const SelfPlayConfig cfg = SelfPlayConfig::from_json(config);
  auto outcome = [cfg](const Rollout& r) { return self_play_outcome(cfg, r); };
  std::vector<RewardFn> fns{
      RewardFn{"outcome", 1.0, outcome},
      RewardFn{"win", 0.0, [outcome](const Rollout& r) { return outcome(r) > 0 ? 1.0 : 0.0; }},
      RewardFn{"draw", 0.0, [cfg](const Rollout& r) {
                 return !is_truncated(r.status) && replay_self_play(cfg, r.sample, r.completions).draw ? 1.0 : 0.0;
               }}};
  TaskSpec t{"self_play",
             std::make_shared<SelfPlaySource>(cfg, false),
             std::make_shared<SelfPlaySource>(cfg, true),
             [cfg] { return std::make_unique<SelfPlayEnv>(cfg); },
             // Truncated rollouts reach the functions: a cut reply is a forfeit, not a 0
             // that would beat a loss (and train the side behind to break the format).
             Rubric(std::move(fns), RubricOptions{std::nullopt, 0.0}),
             cfg.max_moves,
             [cfg](const TaskSample& s) { return reference_replies(cfg, s); }};
  // Self-play: turn t is player (t mod 2)'s move; the second player's reward is minus
  // the first's. Scripted games train nothing of the opponent (it is not the policy).
  t.turn_advantage_scales = [](const Rollout& r) {
    std::vector<double> s(static_cast<size_t>(r.num_turns()), 1.0);
    if (setup_of(r.sample).scripted) return s;
    for (size_t i = 1; i < s.size(); i += 2) s[i] = -1.0;
    return s;
  };
  return t;
}

}  // namespace titan::rl
