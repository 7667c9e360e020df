// TensorBoard event files (tensorboard.h).
#include "titan/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/core.h>

#include "titan/core/error.h"

namespace titan::train {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return t;
}

// Protobuf wire format (https://protobuf.dev/programming-guides/encoding/).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <typename T>
void put_fixed(std::string& out, T v) {  // little endian (x86-64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, s.size());
  out.append(s);
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event(double wall_time, int64_t step, int what_field, std::string_view what) {
  std::string e;
  put_varint(e, (1 << 3) | 1);
  put_fixed(e, wall_time);
  put_varint(e, (2 << 3) | 0);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, what_field, what);
  return e;
}

// Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
void add_values(std::string& summary, const std::string& prefix, const nlohmann::json& obj) {
  for (const auto& [key, v] : obj.items()) {
    if (prefix.empty() && key == "step") continue;
    const std::string tag = prefix.empty() ? key : prefix + "/" + key;
    if (v.is_object()) {
      add_values(summary, tag, v);
      continue;
    }
    if (!v.is_number() && !v.is_boolean()) continue;
    const float x = v.is_boolean() ? (v.get<bool>() ? 1.0f : 0.0f) : static_cast<float>(v.get<double>());
    std::string value;
    put_bytes(value, 1, tag);
    put_varint(value, (2 << 3) | 5);
    put_fixed(value, x);
    put_bytes(summary, 1, value);
  }
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  const auto& t = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = t[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TITAN_CHECK(!ec, "metrics.enable_tensorboard: cannot create {}: {}", dir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = unix_seconds();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, static_cast<int64_t>(now), host, getpid());
  f_ = std::fopen(path_.c_str(), "wb");
  TITAN_CHECK(f_ != nullptr, "metrics.enable_tensorboard: cannot open {} for writing", path_);
  write_record(event(now, 0, 3, "brain.Event:2"));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  std::string len;
  put_fixed(len, static_cast<uint64_t>(data.size()));
  rec += len;
  put_fixed(rec, masked_crc32c(len));
  rec += data;
  put_fixed(rec, masked_crc32c(data));
  std::fwrite(rec.data(), 1, rec.size(), f_);
  std::fflush(f_);
}

void TensorBoardWriter::add_scalars(const nlohmann::json& row) {
  if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer()) return;
  std::string summary;
  add_values(summary, "", row);
  if (summary.empty()) return;
  write_record(event(unix_seconds(), row["step"].get<int64_t>(), 5, summary));
}

}  // namespace titan::train
