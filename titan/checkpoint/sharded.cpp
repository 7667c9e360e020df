#include "titan/checkpoint/sharded.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "titan/core/fs.h"

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
  json j;
  try {
    j = json::parse(read_file(index_path));
  } catch (const json::exception& e) {
    fail("{}: malformed JSON: {}", where, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", where, j.type_name());
  SafetensorsIndex idx;
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")) {
    const json& ts = j["metadata"]["total_size"];
    // Some writers store it as a float or a string; accept any non-negative number.
    if (ts.is_number_unsigned()) idx.total_size = ts.get<uint64_t>();
    else if (ts.is_number() && ts.get<double>() >= 0) idx.total_size = static_cast<uint64_t>(ts.get<double>());
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: missing \"weight_map\" object {{tensor name: shard file}}", where);
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      fail("{}: weight_map entry '{}' must name a shard file (a string), got {}", where, name, file.dump());
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos)
      fail("{}: weight_map entry '{}' names shard '{}', expected a file name in the index's directory",
           where, name, f);
    idx.weight_map[name] = f;
  }
  return idx;
}

// ---- SafetensorsCheckpoint

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
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
    readers_.push_back(std::make_unique<SafetensorsReader>(file));
    for (const auto& n : readers_[0]->names()) where_[n] = readers_[0].get();
    return;
  }
  const SafetensorsIndex idx = read_safetensors_index(file);
  const std::string dir = parent_dir(file);
  std::map<std::string, const SafetensorsReader*> by_file;
  for (const auto& shard : idx.shard_files()) {
    const std::string sp = join_path(dir, shard);
    if (!file_exists(sp)) {
      std::string example;
      for (const auto& [n, f] : idx.weight_map)
        if (f == shard) { example = n; break; }
      fail("safetensors index {}: shard file {} (holding '{}' and others) does not exist", file, sp, example);
    }
    readers_.push_back(std::make_unique<SafetensorsReader>(sp));
    by_file[shard] = readers_.back().get();
  }
  for (const auto& [name, shard] : idx.weight_map) {
    const SafetensorsReader* r = by_file.at(shard);
    if (!r->contains(name))
      fail("safetensors index {}: tensor '{}' listed in the index is absent from shard {}", file, name,
           r->path());
    where_[name] = r;
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, r] : where_) out.push_back(n);
  return out;
}

const std::string& SafetensorsCheckpoint::shard_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("safetensors checkpoint {}: no tensor named '{}'", path_, name);
  return it->second->path();
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("safetensors checkpoint {}: no tensor named '{}'", path_, name);
  return it->second->entry(name);
}

const StringMap& SafetensorsCheckpoint::metadata() const {
  static const StringMap empty;
  return readers_.empty() ? empty : readers_[0]->metadata();
}

Tensor SafetensorsCheckpoint::load(const std::string& name, LoadMode mode) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("safetensors checkpoint {}: no tensor named '{}'", path_, name);
  return it->second->load(name, mode);
}

TensorMap SafetensorsCheckpoint::load_all(LoadMode mode) const {
  TensorMap out;
  for (const auto& [n, r] : where_) out.emplace(n, r->load(n, mode));
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
