#include "titan/checkpoint/train_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "titan/autograd/node.h"
#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/fs.h"

namespace titan {

namespace fs = std::filesystem;

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
NamedTensorList snapshot(const NamedTensorList& in) {
  autograd::NoGradGuard ng;
  NamedTensorList out;
  out.reserve(in.size());
  for (auto& [n, t] : in) out.emplace_back(n, t.clone());
  return out;
}
TensorMap to_map(const NamedTensorList& l) {
  TensorMap m;
  for (auto& [n, t] : l) m[n] = t;
  return m;
}
int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return -1;
  try {
    size_t pos = 0;
    int64_t s = std::stoll(name.substr(5), &pos);
    return pos == name.size() - 5 ? s : -1;
  } catch (...) {
    return -1;
  }
}
}  // namespace

CheckpointManager::CheckpointManager(std::string folder, int64_t keep, bool async)
    : folder_(std::move(folder)), keep_(keep), async_(async) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  TITAN_CHECK(!ec, "checkpoint folder {}: cannot create ({})", folder_, ec.message());
}

CheckpointManager::~CheckpointManager() {
  try {
    wait();
  } catch (...) {
  }
}

void CheckpointManager::wait() {
  if (worker_.joinable()) worker_.join();
  std::string err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(err, error_);
  }
  if (!err.empty()) fail("{}", err);
}

double CheckpointManager::save(const NamedTensorList& model, const NamedTensorList& optimizer,
                               const TrainState& state) {
  auto t0 = std::chrono::steady_clock::now();
  wait();
  if (!async_) {
    write(model, optimizer, state);
    return ms_since(t0);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    snapshot_done_ = false;
  }
  worker_ = std::thread([this, model, optimizer, state] {
    try {
      NamedTensorList m, o;
      try {
        m = snapshot(model);
        o = snapshot(optimizer);
      } catch (...) {
        mark_snapshot_done();
        throw;
      }
      mark_snapshot_done();
      write(m, o, state);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = e.what();
    }
  });
  return ms_since(t0);
}

void CheckpointManager::mark_snapshot_done() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    snapshot_done_ = true;
  }
  snapshot_cv_.notify_all();
}

void CheckpointManager::wait_snapshot() {
  std::unique_lock<std::mutex> lk(mu_);
  snapshot_cv_.wait(lk, [&] { return snapshot_done_; });
}

void CheckpointManager::write(const NamedTensorList& model, const NamedTensorList& optimizer,
                              const TrainState& state) {
  auto t0 = std::chrono::steady_clock::now();
  const std::string dir = folder_ + "/step-" + std::to_string(state.step);
  std::error_code ec;
  fs::remove(dir + "/MANIFEST.json", ec);  // re-saving a step invalidates it first
  fs::create_directories(dir, ec);
  TITAN_CHECK(!ec, "checkpoint {}: cannot create directory ({})", dir, ec.message());
  save_safetensors(dir + "/model.safetensors", to_map(model));
  save_safetensors(dir + "/optimizer.safetensors", to_map(optimizer));
  nlohmann::json sj;
  sj["step"] = state.step;
  sj["extra"] = state.extra;
  write_file_atomic(dir + "/state.json", sj.dump(2));
  nlohmann::json man;
  man["step"] = state.step;
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"})
    man["files"][f] = static_cast<int64_t>(fs::file_size(dir + "/" + f));
  write_file_atomic(dir + "/MANIFEST.json", man.dump(2));
  fsync_dir(folder_);
  prune();
  std::lock_guard<std::mutex> lk(mu_);
  last_ = {state.step, ms_since(t0)};
}

CheckpointManager::WriteRecord CheckpointManager::last_write() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_;
}

std::vector<std::string> CheckpointManager::remove_incomplete(const std::string& folder) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return removed;
  for (auto& e : fs::directory_iterator(folder))
    if (step_of(e.path().filename().string()) >= 0 && e.is_directory(ec) && !is_valid(e.path().string()))
      removed.push_back(e.path().string());
  std::sort(removed.begin(), removed.end());
  for (const std::string& d : removed) {
    fs::remove_all(d, ec);
    TITAN_CHECK(!ec, "checkpoint {}: cannot remove the incomplete checkpoint ({})", d, ec.message());
  }
  if (!removed.empty()) fsync_dir(folder);
  return removed;
}

void CheckpointManager::prune() {
  if (keep_ <= 0) return;
  std::vector<std::pair<int64_t, std::string>> valid;
  for (auto& e : fs::directory_iterator(folder_)) {
    int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && is_valid(e.path().string())) valid.emplace_back(s, e.path().string());
  }
  std::sort(valid.begin(), valid.end());
  for (size_t i = 0; i + keep_ < valid.size(); ++i) {
    std::error_code ec;
    fs::remove(valid[i].second + "/MANIFEST.json", ec);  // invalidate first
    fs::remove_all(valid[i].second, ec);
  }
}

std::string CheckpointManager::invalid_reason(const std::string& dir) {
  std::error_code ec;
  const std::string mpath = dir + "/MANIFEST.json";
  if (!fs::exists(mpath, ec)) return "MANIFEST.json is missing (the write did not finish)";
  try {
    auto man = nlohmann::json::parse(read_file(mpath));
    for (auto& [f, size] : man.at("files").items()) {
      const auto actual = fs::file_size(dir + "/" + f, ec);
      if (ec) return fmt::format("{} is missing (MANIFEST.json lists it)", f);
      if (static_cast<int64_t>(actual) != size.get<int64_t>())
        return fmt::format("{} has {} bytes, MANIFEST.json says {}", f, actual, size.get<int64_t>());
    }
    return "";
  } catch (const std::exception& e) {
    return fmt::format("MANIFEST.json is unreadable ({})", e.what());
  }
}

bool CheckpointManager::is_valid(const std::string& dir) { return invalid_reason(dir).empty(); }

std::optional<std::string> CheckpointManager::latest(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return std::nullopt;
  int64_t best = -1;
  std::string path;
  for (auto& e : fs::directory_iterator(folder)) {
    int64_t s = step_of(e.path().filename().string());
    if (s > best && is_valid(e.path().string())) {
      best = s;
      path = e.path().string();
    }
  }
  if (best < 0) return std::nullopt;
  return path;
}

LoadedCheckpoint CheckpointManager::load(const std::string& dir) {
  if (const std::string why = invalid_reason(dir); !why.empty())
    fail("checkpoint {}: incomplete or damaged: {}", dir, why);
  if (!file_exists(dir + "/model.safetensors")) return load_checkpoint_full(dir);  // written by several ranks
  LoadedCheckpoint c;
  c.path = dir;
  c.model = load_safetensors(dir + "/model.safetensors", LoadMode::copy);
  c.optimizer = load_safetensors(dir + "/optimizer.safetensors", LoadMode::copy);
  nlohmann::json sj;
  try {
    sj = nlohmann::json::parse(read_file(dir + "/state.json"));
    c.state.step = sj.at("step").get<int64_t>();
    c.state.extra = sj.value("extra", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint {}/state.json: {}", dir, e.what());
  }
  return c;
}

}  // namespace titan
