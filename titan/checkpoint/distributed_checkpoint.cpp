#include "titan/checkpoint/distributed_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>

#include "titan/autograd/node.h"
#include "titan/core/fs.h"
#include "titan/distributed/device_mesh.h"
#include "titan/distributed/dtensor.h"
#include "titan/distributed/process_group.h"

namespace titan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "titan-distributed";
constexpr const char* kIndexName = "MANIFEST.json";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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

std::string shard_file(int rank, int world) { return fmt::format("shard-{:05d}-of-{:05d}.safetensors", rank, world); }

json box_json(const ShardBox& b) { return {{"offsets", b.offsets}, {"lengths", b.lengths}}; }
ShardBox box_from_json(const json& j) {
  ShardBox b;
  b.offsets = j.at("offsets").get<std::vector<int64_t>>();
  b.lengths = j.at("lengths").get<std::vector<int64_t>>();
  return b;
}

bool box_inside(const ShardBox& b, const Shape& shape) {
  if (b.offsets.size() != shape.size() || b.lengths.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (b.offsets[d] < 0 || b.lengths[d] < 0 || b.offsets[d] + b.lengths[d] > shape[d]) return false;
  return true;
}

bool boxes_overlap(const ShardBox& a, const ShardBox& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (std::max(a.offsets[d], b.offsets[d]) >= std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]))
      return false;
  return true;
}

// Copies the intersection of box `sb` (held row-major at src) and box `db` (row-major at
// dst) of one global tensor. Returns the elements copied.
int64_t copy_box(const unsigned char* src, const ShardBox& sb, unsigned char* dst, const ShardBox& db, size_t esize) {
  const size_t n = sb.offsets.size();
  if (n == 0) {
    std::memcpy(dst, src, esize);
    return 1;
  }
  std::vector<int64_t> lo(n), len(n);
  int64_t vol = 1;
  for (size_t d = 0; d < n; ++d) {
    lo[d] = std::max(sb.offsets[d], db.offsets[d]);
    const int64_t hi = std::min(sb.offsets[d] + sb.lengths[d], db.offsets[d] + db.lengths[d]);
    if (hi <= lo[d]) return 0;
    len[d] = hi - lo[d];
    vol *= len[d];
  }
  // Row-major strides (in elements) of the two pieces.
  std::vector<int64_t> ss(n, 1), ds(n, 1);
  for (size_t d = n - 1; d-- > 0;) {
    ss[d] = ss[d + 1] * sb.lengths[d + 1];
    ds[d] = ds[d + 1] * db.lengths[d + 1];
  }
  const int64_t runs = vol / len[n - 1];
  std::vector<int64_t> idx(n, 0);  // position inside the intersection, last dim fixed at 0
  for (int64_t r = 0; r < runs; ++r) {
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d < n; ++d) {
      so += (lo[d] + idx[d] - sb.offsets[d]) * ss[d];
      dof += (lo[d] + idx[d] - db.offsets[d]) * ds[d];
    }
    std::memcpy(dst + dof * esize, src + so * esize, static_cast<size_t>(len[n - 1]) * esize);
    for (size_t d = n - 1; d-- > 0;) {  // odometer over the dims before the last
      if (++idx[d] < len[d]) break;
      idx[d] = 0;
    }
  }
  return vol;
}

json item_json(const std::string& key, const ShardedTensor& t) {
  TITAN_CHECK(t.local.defined(), "checkpoint: tensor '{}' is undefined", t.name);
  TITAN_CHECK(t.local.shape() == t.box.lengths, "checkpoint: tensor '{}': local shape {} is not its box {}", t.name,
              shape_str(t.local.shape()), t.box.str());
  TITAN_CHECK(box_inside(t.box, t.global_shape), "checkpoint: tensor '{}': box {} lies outside its shape {}", t.name,
              t.box.str(), shape_str(t.global_shape));
  return {{"key", key},
          {"dtype", safetensors_dtype_name(t.local.dtype())},
          {"shape", t.global_shape},
          {"box", box_json(t.box)},
          {"placements", t.placements}};
}

// Lists every step-N directory of folder (step, path), newest first.
std::vector<std::pair<int64_t, std::string>> step_dirs_desc(const std::string& folder) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (auto& e : fs::directory_iterator(folder, ec)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_directory(ec)) out.emplace_back(s, e.path().string());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

// ---------------------------------------------------------------- boxes and pieces

int64_t ShardBox::numel() const {
  int64_t n = 1;
  for (int64_t l : lengths) n *= l;
  return n;
}

std::string ShardBox::str() const {
  std::string s = "[";
  for (size_t d = 0; d < offsets.size(); ++d)
    s += fmt::format("{}{}:{}", d ? ", " : "", offsets[d], offsets[d] + lengths[d]);
  return s + "]";
}

ShardBox full_box(const Shape& shape) { return {std::vector<int64_t>(shape.size(), 0), shape}; }

ShardedTensor sharded_from_dtensor(std::string name, const distributed::DTensor& t) {
  ShardedTensor s;
  s.name = std::move(name);
  s.local = t.local();
  s.global_shape = t.global_shape();
  for (const distributed::ShardRange& r : t.local_ranges()) {
    s.box.offsets.push_back(r.offset);
    s.box.lengths.push_back(r.length);
  }
  for (size_t i = 0; i < t.placements().size(); ++i) {
    TITAN_CHECK(t.placements()[i].kind != distributed::Placement::Kind::partial,
                "checkpoint: tensor '{}' is Partial over {}: a partial sum cannot be saved (redistribute it first)",
                s.name, distributed::mesh_dim_name(t.mesh_dims()[i]));
    s.placements.push_back(
        {{"mesh_dim", distributed::mesh_dim_name(t.mesh_dims()[i])}, {"placement", t.placements()[i].str()}});
  }
  return s;
}

ShardedTensor sharded_full(std::string name, const Tensor& t) {
  ShardedTensor s;
  s.name = std::move(name);
  s.local = t;
  s.global_shape = t.shape();
  s.box = full_box(t.shape());
  return s;
}

namespace {
// The parameter of optimizer key "<param>.<field>" among params (longest name), or null.
const ShardedTensor* param_of_key(const std::string& key, const std::vector<ShardedTensor>& params) {
  const ShardedTensor* best = nullptr;
  for (const ShardedTensor& p : params)
    if (key.size() > p.name.size() + 1 && key.compare(0, p.name.size(), p.name) == 0 && key[p.name.size()] == '.' &&
        (!best || p.name.size() > best->name.size()))
      best = &p;
  return best;
}
}  // namespace

std::vector<ShardedTensor> sharded_optimizer_state(const std::vector<std::pair<std::string, Tensor>>& state,
                                                   const std::vector<ShardedTensor>& params) {
  std::vector<ShardedTensor> out;
  for (const auto& [key, t] : state) {
    const ShardedTensor* p = param_of_key(key, params);
    if (p && t.shape() == p->local.shape() && t.dim() > 0) {
      ShardedTensor s = *p;
      s.name = key;
      s.local = t;
      out.push_back(std::move(s));
    } else {
      out.push_back(sharded_full(key, t));
    }
  }
  return out;
}

// ---------------------------------------------------------------- the index

CheckpointIndex::CheckpointIndex(std::string dir) : dir_(std::move(dir)), index_path_(dir_ + "/" + kIndexName) {
  TITAN_CHECK(file_exists(index_path_), "checkpoint {}: no {} (not a published checkpoint)", dir_, kIndexName);
  json man;
  try {
    man = json::parse(read_file(index_path_));
    for (auto& [f, size] : man.at("files").items()) files_[f] = size.get<int64_t>();
  } catch (const json::exception& e) {
    fail("checkpoint {}: {}", index_path_, e.what());
  }
  for (const auto& [f, size] : files_) {
    const std::string path = dir_ + "/" + f;
    std::error_code ec;
    const auto actual = fs::file_size(path, ec);
    TITAN_CHECK(!ec, "checkpoint {}: shard file {} listed in {} is missing", dir_, path, kIndexName);
    TITAN_CHECK(static_cast<int64_t>(actual) == size, "checkpoint {}: shard file {} has {} bytes, {} lists {}", dir_,
                path, actual, kIndexName, size);
  }
  distributed_ = man.value("format", std::string()) == kFormat;
  if (distributed_) {
    try {
      TITAN_CHECK(man.at("version").get<int>() == 1, "checkpoint {}: format version {} is not supported (1 is)",
                  index_path_, man.at("version").dump());
      world_size_ = man.at("world_size").get<int64_t>();
      mesh_ = man.value("mesh", json::object());
      for (auto& [key, tj] : man.at("tensors").items()) {
        Entry e;
        e.dtype = safetensors_dtype(tj.at("dtype").get<std::string>());
        e.shape = tj.at("shape").get<Shape>();
        e.placements = tj.value("placements", json::array());
        for (const json& sj : tj.at("shards")) {
          Shard s;
          s.file = sj.at("file").get<std::string>();
          s.tensor = key;
          s.box = box_from_json(sj);
          TITAN_CHECK(files_.count(s.file), "checkpoint {}: tensor '{}' names file {}, which is not in its files",
                      index_path_, key, s.file);
          TITAN_CHECK(box_inside(s.box, e.shape), "checkpoint {}: tensor '{}': shard {} lies outside its shape {}",
                      index_path_, key, s.box.str(), shape_str(e.shape));
          e.shards.push_back(std::move(s));
        }
        const size_t slash = key.find('/');
        const std::string sec = slash == std::string::npos ? std::string() : key.substr(0, slash);
        TITAN_CHECK(sec == "model" || sec == "optimizer",
                    "checkpoint {}: tensor '{}' is in neither model/ nor optimizer/", index_path_, key);
        (sec == "model" ? model_ : optimizer_)[key.substr(slash + 1)] = std::move(e);
      }
    } catch (const json::exception& e) {
      fail("checkpoint {}: {}", index_path_, e.what());
    }
  } else {
    // The single-rank layout: each file holds full tensors under their own names.
    for (const auto& [file, sec] : {std::pair<const char*, std::map<std::string, Entry>*>{"model.safetensors", &model_},
                                    {"optimizer.safetensors", &optimizer_}}) {
      TITAN_CHECK(files_.count(file), "checkpoint {}: {} does not list {}", dir_, kIndexName, file);
      const SafetensorsReader& r = reader(file);
      for (const std::string& n : r.names()) {
        const SafetensorsEntry& se = r.entry(n);
        Entry e;
        e.dtype = se.dtype;
        e.shape = se.shape;
        e.shards.push_back({file, n, full_box(se.shape)});
        (*sec)[n] = std::move(e);
      }
    }
  }
}

CheckpointIndex::~CheckpointIndex() = default;

const std::map<std::string, CheckpointIndex::Entry>& CheckpointIndex::section(const std::string& s) const {
  TITAN_CHECK(s == "model" || s == "optimizer", "checkpoint: unknown section '{}'", s);
  return s == "model" ? model_ : optimizer_;
}

const SafetensorsReader& CheckpointIndex::reader(const std::string& file) const {
  auto it = readers_.find(file);
  if (it == readers_.end()) it = readers_.emplace(file, std::make_unique<SafetensorsReader>(dir_ + "/" + file)).first;
  return *it->second;
}

Tensor CheckpointIndex::read(const std::string& sec, const std::string& name, const ShardBox& box) const {
  const auto& m = section(sec);
  auto it = m.find(name);
  TITAN_CHECK(it != m.end(), "checkpoint {}: {} tensor '{}' is missing", index_path_, sec, name);
  const Entry& e = it->second;
  TITAN_CHECK(box_inside(box, e.shape), "checkpoint {}: box {} of '{}' lies outside its shape {}", index_path_,
              box.str(), name, shape_str(e.shape));
  Tensor out = Tensor::empty(box.lengths, e.dtype);
  const size_t es = dtype_size(e.dtype);
  int64_t copied = 0;
  for (const Shard& s : e.shards) {
    if (box.numel() == 0) break;
    if (!s.box.offsets.empty() && !boxes_overlap(s.box, box)) continue;
    const SafetensorsReader& r = reader(s.file);
    TITAN_CHECK(r.contains(s.tensor), "checkpoint {}: tensor '{}' listed in {} is absent from {}", dir_, s.tensor,
                kIndexName, r.path());
    const SafetensorsEntry& se = r.entry(s.tensor);
    TITAN_CHECK(se.dtype == e.dtype && se.shape == s.box.lengths,
                "checkpoint {}: tensor '{}' in {} is {} {}, {} lists {} {}", dir_, s.tensor, r.path(),
                safetensors_dtype_name(se.dtype), shape_str(se.shape), kIndexName, safetensors_dtype_name(e.dtype),
                shape_str(s.box.lengths));
    Tensor piece = r.load(s.tensor, LoadMode::mmap);
    copied += copy_box(static_cast<const unsigned char*>(piece.data_ptr()), s.box,
                       static_cast<unsigned char*>(out.data_ptr()), box, es);
  }
  TITAN_CHECK(copied == box.numel(), "checkpoint {}: the shards of '{}' cover {} of the {} elements of {}", index_path_,
              name, copied, box.numel(), box.str());
  return out;
}

Tensor CheckpointIndex::read_full(const std::string& sec, const std::string& name) const {
  const auto& m = section(sec);
  auto it = m.find(name);
  TITAN_CHECK(it != m.end(), "checkpoint {}: {} tensor '{}' is missing", index_path_, sec, name);
  return read(sec, name, full_box(it->second.shape));
}

namespace {
// Whether optimizer key "<param>.<field>" belongs to a parameter in `names`.
bool key_of_any(const std::string& key, const std::set<std::string>& names) {
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
    if (names.count(key.substr(0, dot))) return true;
  return false;
}
}  // namespace

void load_sharded(const CheckpointIndex& index, const std::string& section, const std::vector<ShardedTensor>& targets,
                  const std::set<std::string>& elsewhere) {
  autograd::NoGradGuard ng;
  const std::string where = index.dir() + "/" + kIndexName;
  const auto& m = index.section(section);
  for (const ShardedTensor& t : targets) {
    auto it = m.find(t.name);
    TITAN_CHECK(it != m.end(), "checkpoint {}: {} tensor '{}' is missing", where, section, t.name);
    TITAN_CHECK(it->second.shape == t.global_shape, "checkpoint {}: '{}' has shape {}, the model expects {}", where,
                t.name, shape_str(it->second.shape), shape_str(t.global_shape));
    TITAN_CHECK(it->second.dtype == t.local.dtype(), "checkpoint {}: '{}' is {}, the model expects {}", where, t.name,
                safetensors_dtype_name(it->second.dtype), safetensors_dtype_name(t.local.dtype()));
  }
  for (const auto& [name, e] : m) {
    if (elsewhere.count(name)) continue;
    bool found = false;
    for (const ShardedTensor& t : targets) found = found || t.name == name;
    TITAN_CHECK(found, "checkpoint {}: {} tensor '{}' {} is not in the model (a checkpoint of another model?)", where,
                section, name, shape_str(e.shape));
  }
  for (const ShardedTensor& t : targets) {
    Tensor v = index.read(section, t.name, t.box);
    Tensor dst = t.local;
    dst.copy_(v);
  }
}

std::vector<std::pair<std::string, Tensor>> load_sharded_optimizer(const CheckpointIndex& index,
                                                                   const std::vector<ShardedTensor>& params,
                                                                   const std::set<std::string>& elsewhere) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, e] : index.section("optimizer")) {
    if (key_of_any(key, elsewhere)) continue;
    const ShardedTensor* p = param_of_key(key, params);
    if (p && e.shape == p->global_shape && !e.shape.empty())
      out.emplace_back(key, index.read("optimizer", key, p->box));
    else
      out.emplace_back(key, index.read_full("optimizer", key));
  }
  return out;
}

TrainState read_checkpoint_state(const std::string& dir) {
  TrainState st;
  try {
    const json sj = json::parse(read_file(dir + "/state.json"));
    st.step = sj.at("step").get<int64_t>();
    st.extra = sj.value("extra", json::object());
  } catch (const json::exception& e) {
    fail("checkpoint {}/state.json: {}", dir, e.what());
  }
  return st;
}

LoadedCheckpoint load_checkpoint_full(const std::string& dir) {
  CheckpointIndex index(dir);
  LoadedCheckpoint c;
  c.path = dir;
  for (const auto& [n, e] : index.section("model")) c.model[n] = index.read_full("model", n);
  for (const auto& [n, e] : index.section("optimizer")) c.optimizer[n] = index.read_full("optimizer", n);
  c.state = read_checkpoint_state(dir);
  return c;
}

void collective_check(distributed::ProcessGroup& world, const std::function<void()>& fn) {
  std::string err;
  try {
    fn();
  } catch (const std::exception& e) {  // titan::Error, or a malformed field of state.json
    err = e.what();
  }
  const int W = world.size();
  const int64_t first = world.all_reduce_i64(err.empty() ? W : world.rank(), distributed::ReduceOp::min);
  if (first == W) return;
  int64_t len = static_cast<int64_t>(err.size());
  world.broadcast_bytes(&len, sizeof len, static_cast<int>(first));
  err.resize(static_cast<size_t>(len));
  world.broadcast_bytes(err.data(), err.size(), static_cast<int>(first));
  fail("{}", err);
}

ResumePoint find_resume_checkpoint(const std::string& folder, distributed::ProcessGroup& world) {
  ResumePoint rp;
  collective_check(world, [&] {
    for (const auto& [step, path] : step_dirs_desc(folder)) {
      if (!file_exists(path + "/" + kIndexName)) continue;  // a write cut short: not a checkpoint
      CheckpointIndex check(path);                           // throws naming a missing or short file
      rp.dir = path;
      break;
    }
  });  // also: every rank has looked before rank 0 removes anything
  if (world.rank() == 0) rp.removed = CheckpointManager::remove_incomplete(folder);
  return rp;
}

// ---------------------------------------------------------------- the writer

struct DistributedCheckpointManager::Plan {
  json tensors = json::object();  // the index's "tensors"
  std::vector<const ShardedTensor*> mine;  // pieces this rank writes
  std::vector<std::string> keys;           // their tensor names in the file
  std::vector<bool> has_file;              // per rank
};

struct DistributedCheckpointManager::Pending {
  std::string dir, file;
  int64_t step = 0;
  std::vector<std::pair<std::string, Tensor>> sources;  // the live pieces this rank writes
  TensorMap tensors;                                    // their snapshot
  std::mutex mu;
  std::condition_variable cv;
  bool snapshot_done = false;
  std::string state_json;  // rank 0
  std::thread worker;
  std::atomic<bool> done{false};
  std::string error;
  int64_t bytes = 0, state_bytes = 0;
  double write_ms = 0;
  std::chrono::steady_clock::time_point t0;

  // copy: take a snapshot first (asynchronous saves); else write the live tensors.
  void write(int rank, bool copy) {
    try {
      autograd::NoGradGuard ng;
      for (auto& [k, t] : sources) tensors[k] = copy ? t.clone() : t;
    } catch (const std::exception& e) {
      error = e.what();
    }
    sources.clear();
    {
      std::lock_guard<std::mutex> lk(mu);
      snapshot_done = true;
    }
    cv.notify_all();
    try {
      if (error.empty() && !tensors.empty()) {
        save_safetensors(dir + "/" + file, tensors, {{"step", std::to_string(step)}, {"rank", std::to_string(rank)}});
        bytes = static_cast<int64_t>(fs::file_size(dir + "/" + file));
      }
      if (error.empty() && !state_json.empty()) {
        write_file_atomic(dir + "/state.json", state_json);
        state_bytes = static_cast<int64_t>(state_json.size());
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    tensors.clear();
    write_ms = ms_since(t0);
    done = true;
  }
};

DistributedCheckpointManager::DistributedCheckpointManager(std::string folder, int64_t keep, bool async,
                                                           distributed::ProcessGroup& world,
                                                           const distributed::DeviceMesh* mesh)
    : folder_(std::move(folder)), keep_(keep), async_(async), world_(world) {
  if (world_.size() == 1) {
    single_ = std::make_unique<CheckpointManager>(folder_, keep_, async_);
    return;
  }
  if (mesh)
    for (int d = 0; d < distributed::kNumMeshDims; ++d)
      mesh_json_[distributed::mesh_dim_name(static_cast<distributed::MeshDim>(d))] =
          mesh->size(static_cast<distributed::MeshDim>(d));
  std::error_code ec;
  fs::create_directories(folder_, ec);
  TITAN_CHECK(!ec, "checkpoint folder {}: cannot create ({})", folder_, ec.message());
}

DistributedCheckpointManager::~DistributedCheckpointManager() {
  if (pending_ && pending_->worker.joinable()) pending_->worker.join();
  if (publisher_.joinable()) publisher_.join();
}

void DistributedCheckpointManager::join_publisher() {
  if (publisher_.joinable()) publisher_.join();
  std::string err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(err, publish_error_);
  }
  if (!err.empty()) fail("{}", err);
}

double DistributedCheckpointManager::save(const std::vector<ShardedTensor>& model,
                                          const std::vector<ShardedTensor>& optimizer, const TrainState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  if (single_) {
    NamedTensorList m, o;
    for (const auto* list : {&model, &optimizer})
      for (const ShardedTensor& t : *list) {
        TITAN_CHECK(t.box == full_box(t.global_shape), "checkpoint: tensor '{}' is a piece {} of {} in a world of one",
                    t.name, t.box.str(), shape_str(t.global_shape));
        (list == &model ? m : o).emplace_back(t.name, t.local);
      }
    return single_->save(m, o, state);
  }
  if (pending_) commit();
  join_publisher();
  const int rank = world_.rank(), W = world_.size();
  const std::string dir = folder_ + "/step-" + std::to_string(state.step);
  std::error_code ec;
  if (rank == 0) fs::remove(dir + "/" + kIndexName, ec);  // re-saving a step invalidates it first
  fs::create_directories(dir, ec);
  TITAN_CHECK(!ec, "checkpoint {}: cannot create directory ({})", dir, ec.message());

  // The plan: every rank's pieces, exchanged; each distinct box written by the lowest rank.
  json local = json::array();
  std::vector<const ShardedTensor*> items;
  for (const ShardedTensor& t : model) {
    local.push_back(item_json("model/" + t.name, t));
    items.push_back(&t);
  }
  for (const ShardedTensor& t : optimizer) {
    local.push_back(item_json("optimizer/" + t.name, t));
    items.push_back(&t);
  }
  const std::string mine = local.dump();
  std::vector<int64_t> sizes(W);
  const int64_t my_size = static_cast<int64_t>(mine.size());
  world_.all_gather_bytes(&my_size, sizeof my_size, sizes.data());  // also orders the index removal above
  std::vector<size_t> counts(W);
  size_t total = 0;
  for (int r = 0; r < W; ++r) total += counts[r] = static_cast<size_t>(sizes[r]);
  std::string all(total, '\0');
  world_.all_gatherv_bytes(mine.data(), all.data(), counts);

  auto plan = std::make_unique<Plan>();
  plan->has_file.assign(W, false);
  struct Seen {
    json first;
    int first_rank = 0;
    std::vector<std::pair<ShardBox, int>> boxes;  // distinct boxes, writer rank
  };
  std::map<std::string, Seen> seen;
  std::vector<std::string> order;
  size_t off = 0;
  std::vector<int> my_writer(items.size(), -1);
  for (int r = 0; r < W; ++r) {
    const json rj = json::parse(all.substr(off, counts[r]));
    off += counts[r];
    for (size_t i = 0; i < rj.size(); ++i) {
      const json& it = rj[i];
      const std::string key = it.at("key").get<std::string>();
      auto [s, fresh] = seen.try_emplace(key);
      if (fresh) {
        s->second.first = it;
        s->second.first_rank = r;
        order.push_back(key);
      } else {
        TITAN_CHECK(s->second.first["dtype"] == it["dtype"] && s->second.first["shape"] == it["shape"],
                    "checkpoint {}: ranks disagree on '{}': rank {} has {} {}, rank {} has {} {}", dir, key,
                    s->second.first_rank, s->second.first["dtype"].get<std::string>(),
                    s->second.first["shape"].dump(), r, it["dtype"].get<std::string>(), it["shape"].dump());
      }
      const ShardBox b = box_from_json(it.at("box"));
      int writer = -1;
      for (auto& [bb, w] : s->second.boxes)
        if (bb == b) writer = w;
      if (writer < 0) {
        writer = r;
        s->second.boxes.emplace_back(b, r);
      }
      if (r == rank) my_writer[i] = writer;
    }
  }
  for (const std::string& key : order) {
    Seen& s = seen[key];
    const Shape shape = s.first["shape"].get<Shape>();
    json shards = json::array();
    int64_t covered = 0;
    std::vector<const ShardBox*> kept;
    for (auto& [b, w] : s.boxes) {
      if (b.numel() == 0) continue;
      for (const ShardBox* k : kept)
        TITAN_CHECK(!boxes_overlap(*k, b), "checkpoint {}: pieces {} and {} of '{}' overlap", dir, k->str(), b.str(),
                    key);
      kept.push_back(&b);
      covered += b.numel();
      json sj = box_json(b);
      sj["file"] = shard_file(w, W);
      shards.push_back(std::move(sj));
      plan->has_file[w] = true;
    }
    TITAN_CHECK(covered == shape_numel(shape), "checkpoint {}: the ranks' pieces of '{}' cover {} of its {} elements",
                dir, key, covered, shape_numel(shape));
    plan->tensors[key] = {{"dtype", s.first["dtype"]}, {"shape", shape}, {"placements", s.first["placements"]},
                          {"shards", std::move(shards)}};
  }

  // The pieces this rank writes; the writer copies them first (the snapshot).
  auto p = std::make_unique<Pending>();
  p->dir = dir;
  p->file = shard_file(rank, W);
  p->step = state.step;
  p->t0 = t0;
  for (size_t i = 0; i < items.size(); ++i)
    if (my_writer[i] == rank && items[i]->box.numel() > 0)
      p->sources.emplace_back(local[i]["key"].get<std::string>(), items[i]->local);
  if (rank == 0) {
    json sj;
    sj["step"] = state.step;
    sj["extra"] = state.extra;
    p->state_json = sj.dump(2);
  }
  plan_ = std::move(plan);
  pending_ = std::move(p);
  if (async_) {
    Pending* raw = pending_.get();
    raw->worker = std::thread([raw, rank] { raw->write(rank, true); });
    return ms_since(t0);
  }
  pending_->write(rank, false);
  commit();
  join_publisher();
  return ms_since(t0);
}

void DistributedCheckpointManager::wait_snapshot() {
  if (single_) {
    single_->wait_snapshot();
    return;
  }
  if (!pending_) return;
  std::unique_lock<std::mutex> lk(pending_->mu);
  pending_->cv.wait(lk, [&] { return pending_->snapshot_done; });
}

double DistributedCheckpointManager::poll() {
  if (single_ || !pending_) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t done = pending_->done.load() ? 1 : 0;
  if (world_.all_reduce_i64(done, distributed::ReduceOp::min) == 1) commit();
  return ms_since(t0);
}

void DistributedCheckpointManager::wait() {
  if (single_) {
    single_->wait();
    return;
  }
  if (pending_) commit();
  join_publisher();
}

void DistributedCheckpointManager::commit() {
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->worker.joinable()) p->worker.join();
  const int rank = world_.rank(), W = world_.size();
  struct Report {
    int64_t ok, bytes;
  };
  const Report mine{p->error.empty() ? 1 : 0, p->bytes};
  std::vector<Report> all(W);
  world_.all_gather_bytes(&mine, sizeof mine, all.data());
  for (int r = 0; r < W; ++r) {
    if (all[r].ok) continue;
    if (r == rank) fail("checkpoint {}: this rank's shard could not be written: {}", p->dir, p->error);
    fail("checkpoint {}: rank {} could not write its shard (its error is on its console)", p->dir, r);
  }
  last_shard_bytes_ = p->bytes;
  if (rank != 0) {
    std::lock_guard<std::mutex> lk(mu_);
    last_ = {p->step, p->write_ms};
    return;
  }
  json man;
  man["format"] = kFormat;
  man["version"] = 1;
  man["step"] = p->step;
  man["world_size"] = W;
  man["mesh"] = mesh_json_;
  json files = json::object();
  for (int r = 0; r < W; ++r) {
    if (plan_->has_file[r]) files[shard_file(r, W)] = all[r].bytes;
  }
  files["state.json"] = p->state_bytes;
  man["files"] = std::move(files);
  man["tensors"] = plan_->tensors;
  auto publish = [this, man = std::move(man), dir = p->dir, step = p->step, write_ms = p->write_ms] {
    try {
      write_file_atomic(dir + "/" + kIndexName, man.dump(1));
      fsync_dir(folder_);
      if (keep_ > 0) {  // drop the oldest published checkpoints beyond keep_latest_k
        std::vector<std::pair<int64_t, std::string>> valid;
        for (const auto& [s, path] : step_dirs_desc(folder_))
          if (CheckpointManager::is_valid(path)) valid.emplace_back(s, path);
        for (size_t i = static_cast<size_t>(keep_); i < valid.size(); ++i) {
          std::error_code ec;
          fs::remove(valid[i].second + "/" + kIndexName, ec);  // unpublish first
          fs::remove_all(valid[i].second, ec);
        }
      }
      std::lock_guard<std::mutex> lk(mu_);
      last_ = {step, write_ms};
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      publish_error_ = e.what();
    }
  };
  if (async_)
    publisher_ = std::thread(std::move(publish));
  else
    publish();
}

CheckpointManager::WriteRecord DistributedCheckpointManager::last_write() const {
  if (single_) return single_->last_write();
  std::lock_guard<std::mutex> lk(mu_);
  return last_;
}

}  // namespace titan
