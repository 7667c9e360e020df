#include "titan/checkpoint/sharded.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <mutex>
#include <set>

#include "titan/core/fs.h"
#include "titan/core/json_read.h"

namespace titan {

namespace {

using json = nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) fail("cannot list directory {}: {}", dir, std::strerror(errno));
  while (dirent* e = ::readdir(d)) out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

// "<prefix>-DDDDD-of-DDDDD.safetensors"
bool is_shard_name(const std::string& f, const std::string& prefix) {
  const std::string tail = "-00000-of-00000.safetensors";
  if (f.size() != prefix.size() + tail.size() || f.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = 0; i < tail.size(); ++i) {
    const char c = f[prefix.size() + i];
    if (tail[i] == '0' ? !(c >= '0' && c <= '9') : c != tail[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> SafetensorsIndex::shard_files() const {
  std::set<std::string> s;
  for (const auto& [k, f] : weight_map) s.insert(f);
  return {s.begin(), s.end()};
}

SafetensorsIndex read_safetensors_index(const std::string& index_path) {
  const std::string where = "safetensors index " + index_path;
  if (!file_exists(index_path)) fail("{}: file not found", where);
  json j = parse_json(read_file(index_path), where);
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", where, j.type_name());
  SafetensorsIndex idx;
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")) {
    const json& ts = j["metadata"]["total_size"];
    // Some writers store it as a float or a string. It is a size hint, never used to
    // read tensors: an unsigned integer, or a float in [0, 2^64), is kept (the float
    // truncated); anything else (negative, out of range, NaN, a string) reads as absent.
    if (ts.is_number_unsigned()) {
      idx.total_size = ts.get<uint64_t>();
    } else if (ts.is_number_float()) {
      const double v = ts.get<double>();
      if (v >= 0.0 && v < 18446744073709551616.0) idx.total_size = static_cast<uint64_t>(v);
    }
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: missing \"weight_map\" object {{tensor name: shard file}}", where);
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      fail("{}: weight_map entry '{}' must name a shard file (a string), got {}", where, excerpt(name, 100), json_excerpt(file));
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos)
      fail("{}: weight_map entry '{}' names shard '{}', expected a file name in the index's directory",
           where, excerpt(name, 100), excerpt(f, 100));
    idx.weight_map[name] = f;
  }
  return idx;
}

// ---- SafetensorsCheckpoint

struct ShardSlots {
  std::mutex mu;
  std::vector<std::unique_ptr<SafetensorsReader>> readers;  // null until opened
};

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  slots_ = std::make_unique<ShardSlots>();
  std::string file = path;
  if (dir_exists(path)) {
    if (file_exists(join_path(path, kSafetensorsSingleName))) {
      file = join_path(path, kSafetensorsSingleName);
    } else if (file_exists(join_path(path, kSafetensorsIndexName))) {
      file = join_path(path, kSafetensorsIndexName);
    } else {
      fail("safetensors checkpoint {}: directory has neither {} nor {}", path, kSafetensorsSingleName,
           kSafetensorsIndexName);
    }
  }
  if (!ends_with(file, ".index.json")) {
    // The file is the checkpoint: open it now so that a bad path fails here.
    auto r = std::make_unique<SafetensorsReader>(file);
    for (const auto& n : r->names()) where_.emplace_hint(where_.end(), n, 0);
    shard_paths_ = {file};
    slots_->readers.push_back(std::move(r));
    return;
  }
  index_path_ = file;
  const SafetensorsIndex idx = read_safetensors_index(file);
  const std::string dir = parent_dir(file);
  std::map<std::string, size_t> by_file;
  for (const auto& shard : idx.shard_files()) {
    const std::string sp = join_path(dir, shard);
    if (!file_exists(sp)) {
      std::string example;
      for (const auto& [n, f] : idx.weight_map)
        if (f == shard) { example = n; break; }
      fail("safetensors index {}: shard file {} (holding '{}' and others) does not exist", file, sp,
           excerpt(example, 100));
    }
    by_file[shard] = shard_paths_.size();
    shard_paths_.push_back(sp);
  }
  listed_.resize(shard_paths_.size());
  for (const auto& [name, shard] : idx.weight_map) {
    auto it = where_.emplace_hint(where_.end(), name, by_file.at(shard));
    listed_[it->second].push_back(&it->first);
  }
  slots_->readers.resize(shard_paths_.size());
}

SafetensorsCheckpoint::~SafetensorsCheckpoint() = default;

const SafetensorsReader& SafetensorsCheckpoint::shard(size_t i) const {
  std::lock_guard<std::mutex> lock(slots_->mu);
  std::unique_ptr<SafetensorsReader>& r = slots_->readers.at(i);
  if (!r) {
    auto opened = std::make_unique<SafetensorsReader>(shard_paths_[i]);
    if (i < listed_.size())
      for (const std::string* name : listed_[i])
        if (!opened->contains(*name))
          fail("safetensors index {}: tensor '{}' listed in the index is absent from shard {}", index_path_,
               excerpt(*name, 100), shard_paths_[i]);
    r = std::move(opened);
  }
  return *r;
}

size_t SafetensorsCheckpoint::num_open_shards() const {
  std::lock_guard<std::mutex> lock(slots_->mu);
  size_t n = 0;
  for (const auto& r : slots_->readers) n += r != nullptr;
  return n;
}

size_t SafetensorsCheckpoint::shard_index(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("safetensors checkpoint {}: no tensor named '{}'", path_, excerpt(name, 100));
  return it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [n, s] : where_) out.push_back(n);
  return out;
}

const std::string& SafetensorsCheckpoint::shard_of(const std::string& name) const {
  return shard_paths_[shard_index(name)];
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  return shard(shard_index(name)).entry(name);
}

const StringMap& SafetensorsCheckpoint::metadata() const {
  static const StringMap empty;
  return shard_paths_.empty() ? empty : shard(0).metadata();
}

Tensor SafetensorsCheckpoint::load(const std::string& name, LoadMode mode) const {
  return shard(shard_index(name)).load(name, mode);
}

TensorMap SafetensorsCheckpoint::load_all(LoadMode mode) const {
  TensorMap out;
  for (const auto& [n, s] : where_) out.emplace_hint(out.end(), n, shard(s).load(n, mode));
  return out;
}

TensorMap load_safetensors_checkpoint(const std::string& path, LoadMode mode) {
  return SafetensorsCheckpoint(path).load_all(mode);
}

// ---- saving

SafetensorsIndex save_sharded_safetensors(const std::string& dir, const TensorMap& tensors,
                                          uint64_t max_shard_bytes, const StringMap& metadata,
                                          const std::string& prefix) {
  const std::string where = "save_sharded_safetensors " + dir;
  TITAN_CHECK(max_shard_bytes > 0, "{}: max_shard_bytes must be positive", where);
  TITAN_CHECK(!prefix.empty() && prefix.find('/') == std::string::npos,
              "{}: prefix '{}' must be a non-empty file name", where, prefix);
  // Checked up front so that a bad tensor cannot fail the save after some shards are replaced.
  for (const auto& [name, t] : tensors) {
    TITAN_CHECK(!name.empty() && name != "__metadata__", "{}: invalid tensor name '{}'", where, name);
    TITAN_CHECK(t.defined(), "{}: tensor '{}' is undefined", where, name);
    TITAN_CHECK(t.device().is_cpu(), "{}: tensor '{}' is on {}, expected cpu", where, name, t.device().str());
  }
  if (!dir_exists(dir)) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      fail("{}: cannot create directory: {}", where, std::strerror(errno));
    fsync_dir(parent_dir(dir));
  }

  // Greedy split in name order (huggingface_hub split_torch_state_dict_into_shards).
  std::vector<TensorMap> shards;
  uint64_t cur = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t nb = t.nbytes();
    if (shards.empty() || (cur + nb > max_shard_bytes && !shards.back().empty())) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().emplace(name, t);
    cur += nb;
  }
  if (shards.empty()) shards.emplace_back();

  SafetensorsIndex idx;
  const size_t n = shards.size();
  std::set<std::string> written;
  for (size_t i = 0; i < n; ++i) {
    const std::string fname = fmt::format("{}-{:05d}-of-{:05d}.safetensors", prefix, i + 1, n);
    save_safetensors(join_path(dir, fname), shards[i], metadata);
    written.insert(fname);
    for (const auto& [name, t] : shards[i]) {
      idx.weight_map[name] = fname;
      idx.total_size += t.nbytes();
    }
  }
  json j = {{"metadata", {{"total_size", idx.total_size}}}, {"weight_map", json::object()}};
  for (const auto& [name, f] : idx.weight_map) j["weight_map"][name] = f;
  write_file_atomic(join_path(dir, prefix + ".safetensors.index.json"), j.dump(2) + "\n");

  // Remove what an earlier save with the same prefix left behind.
  bool removed = false;
  for (const auto& f : list_dir(dir)) {
    const bool stale_shard = is_shard_name(f, prefix) && !written.count(f);
    if (stale_shard || f == prefix + ".safetensors") {
      if (::unlink(join_path(dir, f).c_str()) != 0 && errno != ENOENT)
        fail("{}: cannot remove stale file {}: {}", where, f, std::strerror(errno));
      removed = true;
    }
  }
  if (removed) fsync_dir(dir);
  return idx;
}

}  // namespace titan
