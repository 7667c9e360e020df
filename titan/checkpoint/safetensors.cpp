#include "titan/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <cerrno>
#include <cstdlib>

#include "titan/core/fs.h"
#include "titan/core/json_read.h"
#include "titan/core/progress.h"

namespace titan {

namespace {

using json = nlohmann::json;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {DType::f32, "F32"},         {DType::bf16, "BF16"},        {DType::f16, "F16"},
    {DType::i32, "I32"},         {DType::i64, "I64"},          {DType::u8, "U8"},
    {DType::boolean, "BOOL"},    {DType::f8e4m3, "F8_E4M3"},   {DType::f8e5m2, "F8_E5M2"},
};

std::optional<DType> find_dtype(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::string supported_dtypes() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// Parses and validates one tensor entry of the header.
SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const json& v,
                             uint64_t buffer_size) {
  auto bad = [&](const std::string& what) { fail("{}: tensor '{}': {}", where, excerpt(name, 100), what); };
  if (!v.is_object())
    bad(fmt::format("expected an object with dtype, shape, data_offsets, got {}", json_excerpt(v)));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(fmt::format("missing field '{}'", key));
  SafetensorsEntry e;
  const json& dt = v["dtype"];
  if (!dt.is_string()) bad(fmt::format("dtype must be a string, got {}", json_excerpt(dt)));
  auto d = find_dtype(dt.get<std::string>());
  if (!d) bad(fmt::format("unknown dtype '{}' (supported: {})", excerpt(dt.get<std::string>()), supported_dtypes()));
  e.dtype = *d;
  const json& sh = v["shape"];
  if (!sh.is_array()) bad(fmt::format("shape must be an array of non-negative integers, got {}", json_excerpt(sh)));
  uint64_t nbytes = dtype_size(e.dtype);
  for (const json& s : sh) {
    auto n = as_u64(s);
    if (!n || *n > static_cast<uint64_t>(INT64_MAX))
      bad(fmt::format("shape must be an array of non-negative integers, got {}", json_excerpt(sh)));
    if (__builtin_mul_overflow(nbytes, *n, &nbytes)) bad(fmt::format("shape {} overflows 64 bits", json_excerpt(sh)));
    e.shape.push_back(static_cast<int64_t>(*n));
  }
  const json& off = v["data_offsets"];
  std::optional<uint64_t> b, en;
  if (off.is_array() && off.size() == 2) b = as_u64(off[0]), en = as_u64(off[1]);
  if (!b || !en || *b > *en)
    bad(fmt::format("data_offsets must be [begin, end] with 0 <= begin <= end, got {}", json_excerpt(off)));
  e.begin = *b;
  e.end = *en;
  if (e.end - e.begin != nbytes)
    bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] span {} bytes "
                    "(shape/offset size mismatch)",
                    shape_str(e.shape), dt.get<std::string>(), nbytes, e.begin, e.end, e.end - e.begin));
  if (e.end > buffer_size)
    bad(fmt::format("data_offsets [{}, {}] extend beyond the data buffer of {} bytes (truncated file?)",
                    e.begin, e.end, buffer_size));
  return e;
}

}  // namespace

std::string safetensors_dtype_name(DType d) {
  for (const auto& x : kDTypes)
    if (x.dtype == d) return x.name;
  fail("safetensors_dtype_name: dtype {} has no safetensors name", dtype_name(d));
}

DType safetensors_dtype(const std::string& name) {
  auto d = find_dtype(name);
  if (!d) fail("unknown safetensors dtype '{}' (supported: {})", name, supported_dtypes());
  return *d;
}

// ---- reading

uint64_t safetensors_max_header_bytes() {
  const char* env = std::getenv(kSafetensorsMaxHeaderEnv);
  if (!env || !*env) return kSafetensorsMaxHeaderBytes;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(env, &end, 10);
  if (errno != 0 || *end != '\0' || v == 0 || env[0] == '-')
    fail("{}='{}': expected a positive number of bytes", kSafetensorsMaxHeaderEnv, excerpt(env));
  return v;
}

SafetensorsReader::SafetensorsReader(const std::string& path, uint64_t max_header_bytes) : path_(path) {
  const std::string where = "safetensors " + path;
  if (!file_exists(path)) {
    if (dir_exists(path)) fail("{}: is a directory, expected a .safetensors file", where);
    fail("{}: file not found", where);
  }
  file_ = MappedFile::open(path);
  const uint64_t size = file_->size();
  if (size < 8) fail("{}: truncated file: {} bytes, less than the 8-byte header length", where, size);
  uint64_t n = 0;
  std::memcpy(&n, file_->data(), 8);  // little-endian on every supported host
  if (n > max_header_bytes)
    fail("{}: header of {} bytes exceeds the limit of {} bytes (set {} to raise it)", where, n,
         max_header_bytes, kSafetensorsMaxHeaderEnv);
  if (n > size - 8)
    fail("{}: truncated file: header length {} exceeds the {} bytes after the 8-byte prefix "
         "(not a safetensors file, or cut short)", where, n, size - 8);
  data_offset_ = 8 + n;
  const uint64_t buffer_size = size - data_offset_;
  const char* hdr = reinterpret_cast<const char*>(file_->data()) + 8;
  if (n == 0 || hdr[0] != '{') fail("{}: malformed JSON header: it must be a JSON object starting with '{{'", where);

  // Members are streamed (no DOM of the whole header), so the parse is linear in
  // the tensor count; a repeated key is refused (nlohmann would keep the last).
  bool have_metadata = false;
  auto member = [&](std::string&& key, json&& v) {
    if (key == "__metadata__") {
      if (have_metadata) fail("{}: malformed JSON header: duplicate key '__metadata__'", where);
      have_metadata = true;
      if (v.is_null()) return;
      if (!v.is_object())
        fail("{}: __metadata__ must be an object of strings, got {}", where, json_excerpt(v));
      for (auto& [mk, mv] : v.items()) {
        if (!mv.is_string())
          fail("{}: __metadata__ value of '{}' must be a string, got {}", where, excerpt(mk, 64), json_excerpt(mv));
        metadata_[mk] = mv.get<std::string>();
      }
      return;
    }
    SafetensorsEntry e = parse_entry(where, key, v, buffer_size);
    if (!entries_.try_emplace(std::move(key), e).second)  // key not moved when present
      fail("{}: malformed JSON header: duplicate key '{}'", where, excerpt(key, 100));
  };
  // A valid header nests 3 deep ({"name": {"shape": [..]}}); 8 leaves room for
  // readers of extensions to report them as bad values instead of bad JSON.
  parse_json_members(std::string_view(hdr, n), where + ": header", JsonLimits{8, true}, member);

  // The tensors must tile the buffer: sorted by begin, each starts where the last ended.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [k, e] : entries_) order.push_back({&k, &e});
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin
                                              : a.second->end < b.second->end;
  });
  uint64_t pos = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < pos)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", where, excerpt(*prev, 100),
           entries_.at(*prev).begin, pos, excerpt(*name, 100), e->begin, e->end);
    if (e->begin > pos)
      fail("{}: {} bytes at [{}, {}) before tensor '{}' belong to no tensor (the data buffer must "
           "have no holes)", where, e->begin - pos, pos, e->begin, excerpt(*name, 100));
    pos = e->end;
    prev = name;
  }
  if (pos != buffer_size)
    fail("{}: {} trailing bytes after the last tensor belong to no tensor (buffer {} bytes, tensors "
         "end at {})", where, buffer_size - pos, buffer_size, pos);
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(k);
  return out;
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("safetensors {}: no tensor named '{}'", path_, name);
  return it->second;
}

Tensor SafetensorsReader::load(const std::string& name, LoadMode mode) const {
  const SafetensorsEntry& e = entry(name);
  const size_t nbytes = e.end - e.begin;
  uint8_t* src = file_->mutable_data() + data_offset_ + e.begin;
  const bool aligned = reinterpret_cast<uintptr_t>(src) % dtype_size(e.dtype) == 0;
  auto impl = std::make_shared<TensorImpl>();
  if (mode == LoadMode::mmap && aligned) {
    impl->storage = std::make_shared<Storage>(src, nbytes, std::static_pointer_cast<void>(file_));
  } else {
    impl->storage = std::make_shared<Storage>(nbytes, Device::cpu());
    if (nbytes) std::memcpy(impl->storage->data(), src, nbytes);
  }
  impl->shape = e.shape;
  impl->strides = contiguous_strides(e.shape);
  impl->dtype = e.dtype;
  return Tensor(std::move(impl));
}

TensorMap SafetensorsReader::load_all(LoadMode mode) const {
  TensorMap out;
  int64_t total = 0;
  for (const auto& [k, e] : entries_) total += static_cast<int64_t>(e.end - e.begin);
  Progress progress("reading " + path_, total);
  for (const auto& [k, e] : entries_) {
    out.emplace(k, load(k, mode));
    progress.add(static_cast<int64_t>(e.end - e.begin));
  }
  return out;
}

TensorMap load_safetensors(const std::string& path, LoadMode mode) {
  return SafetensorsReader(path).load_all(mode);
}

// ---- writing

void save_safetensors(const std::string& path, const TensorMap& tensors, const StringMap& metadata) {
  const std::string where = "save_safetensors " + path;
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, t] : tensors) {
    TITAN_CHECK(!name.empty(), "{}: empty tensor name", where);
    TITAN_CHECK(name != "__metadata__", "{}: '__metadata__' is reserved and cannot name a tensor", where);
    TITAN_CHECK(t.defined(), "{}: tensor '{}' is undefined", where, name);
    TITAN_CHECK(t.device().is_cpu(), "{}: tensor '{}' is on {}, expected cpu", where, name, t.device().str());
    order.push_back({&name, &t});
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second->dtype()) > dtype_size(b.second->dtype());  // then by name (map order)
  });

  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  if (!meta.contains("format")) meta["format"] = "pt";
  h["__metadata__"] = meta;
  uint64_t pos = 0;
  for (const auto& [name, t] : order) {
    const uint64_t nb = t->nbytes();
    h[*name] = {{"dtype", safetensors_dtype_name(t->dtype())}, {"shape", t->shape()},
                {"data_offsets", {pos, pos + nb}}};
    pos += nb;
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: cannot encode the header (tensor names and metadata must be UTF-8): {}", where, e.what());
  }
  header.append((8 - header.size() % 8) % 8, ' ');

  AtomicFileWriter w(path);
  const uint64_t n = header.size();
  w.write(&n, 8);
  w.write(header);
  for (const auto& [name, t] : order) {
    if (t->numel() == 0) continue;
    if (t->is_contiguous()) {
      w.write(t->data_ptr(), t->nbytes());
    } else {
      Tensor c = t->detach().contiguous();
      w.write(c.data_ptr(), c.nbytes());
    }
  }
  w.commit();
}

}  // namespace titan
