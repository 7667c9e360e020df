// rollouts.jsonl selection and JSONL truncation on resume (controller_state.h).
#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/rl/controller_state.h"

namespace titan::rl {

using nlohmann::json;

namespace {

bool failed(const Rollout& r) {
  if (r.status != RolloutStatus::completed) return true;
  for (const RewardComponent& c : r.rewards)
    if (!c.error.empty()) return true;
  return false;
}

std::string first_prompt(const Rollout& r) {
  std::string out;
  for (const ChatMessage& m : r.messages) {
    if (m.role == "assistant") break;
    if (!out.empty()) out += "\n";
    out += m.content;
  }
  return out;
}

}  // namespace

std::map<std::string, int64_t> rollout_error_counts(const StepRollouts& b) {
  auto key = [](std::string text) {
    std::string out;
    for (char ch : text) {
      if (ch >= '0' && ch <= '9') {
        if (out.empty() || out.back() != 'N') out.push_back('N');
      } else {
        out.push_back(ch);
      }
    }
    if (out.size() > 160) out = out.substr(0, 157) + "...";
    return out;
  };
  std::map<std::string, int64_t> counts;
  for (const TokenRollout& t : b.all) {
    const Rollout& r = t.rollout;
    if (r.status == RolloutStatus::error) {
      ++counts[key(r.failure_reason.empty() ? std::string("error") : r.failure_reason)];
      continue;
    }
    for (const RewardComponent& c : r.rewards)
      if (!c.error.empty()) {
        ++counts[key("reward " + c.name + ": " + c.error)];
        break;
      }
  }
  return counts;
}

int64_t log_rollouts(std::FILE* f, const StepRollouts& b, int64_t step, int64_t group_size) {
  if (f == nullptr) return 0;  // a rank that does not write rollouts.jsonl
  std::vector<bool> kept(b.all.size(), false);
  for (int64_t i : b.kept) kept[static_cast<size_t>(i)] = true;
  int64_t n = 0;
  for (size_t i = 0; i < b.all.size(); ++i) {
    const TokenRollout& t = b.all[i];
    const Rollout& r = t.rollout;
    const bool fail = failed(r);
    if (i % static_cast<size_t>(group_size) != 0 && !fail) continue;
    json errors = json::array();
    for (const RewardComponent& c : r.rewards)
      if (!c.error.empty()) errors.push_back(c.name + ": " + c.error);
    json row = {{"step", step},
                {"rollout", static_cast<int64_t>(i)},
                {"group", static_cast<int64_t>(i) / group_size},
                {"sample_id", r.sample.id},
                {"policy_version", t.policy_version},
                {"prompt", first_prompt(r)},
                {"completion", r.completions.empty() ? std::string() : r.completions.back()},
                {"completions", r.completions},
                {"finish_reasons", r.finish_reasons},
                {"reward", b.rewards[i]},
                {"status", std::string(to_string(r.status))},
                {"failure_reason", r.failure_reason},
                {"reward_errors", errors},
                {"trained", kept[i]}};
    const std::string line = row.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), f) != line.size())
      titan::fail("rollouts.jsonl: cannot write step {}: {}", step, std::strerror(errno));
    ++n;
  }
  if (std::fflush(f) != 0) fail("rollouts.jsonl: cannot write step {}: {}", step, std::strerror(errno));
  return n;
}

void truncate_jsonl_after(const std::string& path, int64_t max_step) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::ostringstream keep;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;  // a torn last line of a killed run
    if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > max_step) continue;
    keep << line << "\n";
  }
  in.close();
  write_file_atomic(path, keep.str());
}

}  // namespace titan::rl
