#include "titan/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <chrono>
#include <nlohmann/json.hpp>

#include "tests/checkpoint/helpers.h"
#include "titan/core/fs.h"

using namespace titan;
using namespace titan::test;
using json = nlohmann::json;

namespace {

constexpr DType kAll[] = {DType::f32, DType::bf16,    DType::f16,    DType::i32,   DType::i64,
                          DType::u8,  DType::boolean, DType::f8e4m3, DType::f8e5m2};

// A tensor of `dtype` whose bytes cover interesting codes: random floats for the
// wide float types, extremes for ints, every one of the 256 codes for 1-byte types.
Tensor sample(DType dtype, uint64_t seed) {
  switch (dtype) {
    case DType::f32: case DType::bf16: case DType::f16: {
      Tensor t = Tensor::randn({5, 7}, seed, 0, dtype);
      store_from_double(t.data_ptr(), dtype, 3, -0.0);
      store_from_double(t.data_ptr(), dtype, 4, INFINITY);
      store_from_double(t.data_ptr(), dtype, 5, NAN);
      return t;
    }
    case DType::i32:
      return Tensor::from_vector(std::vector<int32_t>{INT32_MIN, -1, 0, 1, INT32_MAX, 12345}, {2, 3});
    case DType::i64:
      return Tensor::from_vector(std::vector<int64_t>{INT64_MIN, -1, 0, INT64_MAX}, {4});
    case DType::boolean: {
      Tensor t = Tensor::empty({3, 3}, DType::boolean);
      for (int i = 0; i < 9; ++i) t.data<uint8_t>()[i] = (i * 5 + seed) % 3 == 0;
      return t;
    }
    default: {
      Tensor t = Tensor::empty({4, 64}, dtype);
      for (int i = 0; i < 256; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i);
      return t;
    }
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// 8-byte length + header + data, as a malformed-file builder.
std::string raw_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

}  // namespace

TEST(Safetensors, DTypeNames) {
  EXPECT_EQ(safetensors_dtype_name(DType::f8e4m3), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype("BOOL"), DType::boolean);
  EXPECT_TRUE(throws_with([] { safetensors_dtype("F64"); }, {"unknown safetensors dtype 'F64'", "F8_E5M2"}));
}

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir d;
  TensorMap in;
  uint64_t seed = 7;
  for (DType dt : kAll) in["t." + std::string(dtype_name(dt))] = sample(dt, seed++);
  in["scalar"] = Tensor::full({}, 2.5);
  in["empty"] = Tensor::empty({0, 3}, DType::bf16);
  in["strided"] = Tensor::randn({4, 6}, 99).transpose(0, 1);  // saved row-major
  save_safetensors(d / "m.safetensors", in, {{"step", "12"}});
  for (LoadMode mode : {LoadMode::mmap, LoadMode::copy}) {
    TensorMap out = load_safetensors(d / "m.safetensors", mode);
    ASSERT_EQ(out.size(), in.size());
    for (const auto& [name, t] : in) {
      ASSERT_TRUE(out.count(name)) << name;
      EXPECT_TRUE(same_bytes(t, out.at(name))) << name;
      EXPECT_TRUE(out.at(name).is_contiguous());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(out.at(name).data_ptr()) % dtype_size(t.dtype()), 0u) << name;
    }
  }
  SafetensorsReader r(d / "m.safetensors");
  EXPECT_EQ(r.metadata(), (StringMap{{"format", "pt"}, {"step", "12"}}));  // "format" added for HF
}

TEST(Safetensors, LayoutIsAlignedAndDeterministic) {
  TempDir d;
  TensorMap in;
  in["a.u8"] = Tensor::full({3}, 1, DType::u8);  // odd size first by name, but written last
  in["b.f32"] = Tensor::randn({5}, 1);
  in["c.i64"] = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  in["d.bf16"] = Tensor::randn({3}, 2, 0, DType::bf16);
  save_safetensors(d / "x.safetensors", in);
  save_safetensors(d / "y.safetensors", in);
  const std::string x = read_file(d / "x.safetensors");
  EXPECT_EQ(x, read_file(d / "y.safetensors"));
  uint64_t n;
  std::memcpy(&n, x.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  SafetensorsReader r(d / "x.safetensors");
  EXPECT_EQ(r.data_offset(), 8 + n);
  for (const auto& name : r.names())
    EXPECT_EQ((r.data_offset() + r.entry(name).begin) % dtype_size(r.entry(name).dtype), 0u) << name;
  EXPECT_EQ(r.entry("c.i64").begin, 0u);  // widest dtype first
  EXPECT_EQ(r.entry("a.u8").end, x.size() - r.data_offset());
}

TEST(Safetensors, LazyReaderAndMmapAliasing) {
  TempDir d;
  TensorMap in{{"x", Tensor::randn({16, 16}, 3)}, {"y", Tensor::arange(0, 10, 1, DType::i32)}};
  save_safetensors(d / "m.safetensors", in);
  const std::string before = read_file(d / "m.safetensors");
  Tensor x;
  {
    SafetensorsReader r(d / "m.safetensors");
    EXPECT_EQ(r.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(r.entry("y").dtype, DType::i32);
    EXPECT_EQ(r.entry("y").shape, Shape{10});
    EXPECT_TRUE(r.contains("x"));
    EXPECT_FALSE(r.contains("z"));
    EXPECT_TRUE(throws_with([&] { r.load("z"); }, {"m.safetensors", "no tensor named 'z'"}));
    x = r.load("x");
  }
  // The mapping outlives the reader; writes to the tensor are copy-on-write.
  EXPECT_TRUE(same_bytes(x, in["x"]));
  x.fill_(0.0);
  EXPECT_EQ(read_file(d / "m.safetensors"), before);
  EXPECT_TRUE(same_bytes(load_safetensors(d / "m.safetensors")["x"], in["x"]));
}

TEST(Safetensors, BadInputErrors) {
  TempDir d;
  auto bad = [&](const std::string& header, const std::string& data, std::vector<std::string> subs) {
    const std::string p = d / "bad.safetensors";
    write_raw(p, raw_file(header, data));
    subs.push_back(p);
    return throws_with([&] { SafetensorsReader r(p); }, subs);
  };
  const std::string f16b(16, '\0');
  EXPECT_TRUE(throws_with([&] { load_safetensors(d / "nope.safetensors"); },
                          {"safetensors", "nope.safetensors", "file not found"}));
  EXPECT_TRUE(throws_with([&] { load_safetensors(d.path); }, {"is a directory"}));
  write_raw(d / "short", "abc");
  EXPECT_TRUE(throws_with([&] { load_safetensors(d / "short"); }, {"short", "truncated file", "3 bytes"}));
  write_raw(d / "hlen", raw_file("{}", "").substr(0, 8) + "{\"a\"");
  std::string big = raw_file("{}", "");
  uint64_t n = 1000;
  std::memcpy(big.data(), &n, 8);
  write_raw(d / "hlen", big);
  EXPECT_TRUE(throws_with([&] { load_safetensors(d / "hlen"); },
                          {"hlen", "truncated file", "header length 1000 exceeds the 2 bytes"}));
  EXPECT_TRUE(bad("{\"a\": {\"dtype\": ", "", {"header", "malformed JSON"}));
  EXPECT_TRUE(bad("[1, 2]", "", {"malformed JSON header", "starting with '{'"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]},)"
                  R"( "a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})",
                  "", {"duplicate key 'a'"}));
  EXPECT_TRUE(bad(R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", f16b,
                  {"tensor 'w'", "unknown dtype 'F64'", "supported: F32"}));
  EXPECT_TRUE(bad(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", f16b,
                  {"tensor 'w'", "shape [2, 3] of F32 needs 24 bytes", "span 16", "size mismatch"}));
  EXPECT_TRUE(bad(R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", f16b,
                  {"tensor 'w'", "[0, 32] extend beyond the data buffer of 16 bytes", "truncated"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
                  R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                  f16b, {"tensors 'a' [0, 12) and 'b' [8, 16) overlap"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                  R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})",
                  f16b, {"4 bytes at [8, 12) before tensor 'b' belong to no tensor"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", f16b,
                  {"8 trailing bytes after the last tensor"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", f16b,
                  {"tensor 'a'", "non-negative integers"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "F32", "shape": [2]}})", f16b, {"tensor 'a'", "missing field 'data_offsets'"}));
  EXPECT_TRUE(bad(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", f16b,
                  {"tensor 'a'", "0 <= begin <= end"}));
  EXPECT_TRUE(bad(R"({"__metadata__": {"k": 3}})", "", {"__metadata__ value of 'k' must be a string"}));

  // A valid file cut short: the last tensor's offsets now pass the end.
  save_safetensors(d / "ok.safetensors", {{"w", Tensor::randn({64}, 1)}});
  std::string ok = read_file(d / "ok.safetensors");
  write_raw(d / "cut.safetensors", ok.substr(0, ok.size() - 10));
  EXPECT_TRUE(throws_with([&] { load_safetensors(d / "cut.safetensors"); },
                          {"cut.safetensors", "tensor 'w'", "extend beyond the data buffer", "truncated"}));
}

TEST(Safetensors, FailedSaveLeavesPreviousFile) {
  TempDir d;
  const std::string p = d / "m.safetensors";
  save_safetensors(p, {{"w", Tensor::randn({8}, 1)}});
  const std::string before = read_file(p);
  EXPECT_TRUE(throws_with([&] { save_safetensors(p, {{"a", Tensor::randn({4}, 2)}, {"b", Tensor()}}); },
                          {"save_safetensors", "m.safetensors", "tensor 'b' is undefined"}));
  EXPECT_TRUE(throws_with([&] { save_safetensors(p, {{"__metadata__", Tensor::randn({4}, 2)}}); },
                          {"'__metadata__' is reserved"}));
  EXPECT_TRUE(throws_with([&] { save_safetensors(p, {{std::string("\xff\xfe"), Tensor::randn({4}, 2)}}); },
                          {"UTF-8"}));
  EXPECT_EQ(read_file(p), before);
  EXPECT_EQ(d.list(), std::vector<std::string>{"m.safetensors"});
  // The rename itself fails (target is a directory): nothing is left behind.
  ::mkdir((d / "dir.safetensors").c_str(), 0755);
  EXPECT_TRUE(throws_with([&] { save_safetensors(d / "dir.safetensors", {{"w", Tensor::randn({8}, 1)}}); },
                          {"cannot rename", "dir.safetensors"}));
  EXPECT_EQ(d.list(), (std::vector<std::string>{"dir.safetensors", "m.safetensors"}));
}

// ---- interop with an independent Python implementation of the format

namespace {
json expected_values(const TensorMap& tensors, const StringMap& meta) {
  json j = json::object();
  j["__metadata__"] = meta;
  for (const auto& [name, t] : tensors) {
    json vals = json::array();
    Tensor c = t.contiguous();
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (c.dtype() == DType::i64) {
        vals.push_back(c.data<int64_t>()[i]);
        continue;
      }
      double v = load_as_double(c.data_ptr(), c.dtype(), i);
      if (std::isnan(v)) vals.push_back("nan");
      else if (std::isinf(v)) vals.push_back(v > 0 ? "inf" : "-inf");
      else if (is_integral(c.dtype())) vals.push_back(static_cast<int64_t>(v));
      else vals.push_back(v);
    }
    j[name] = {{"dtype", safetensors_dtype_name(t.dtype())}, {"shape", t.shape()}, {"values", vals}};
  }
  return j;
}
}  // namespace

TEST(Safetensors, ReadsFileWrittenByPython) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 not available";
  TempDir d;
  std::string out;
  ASSERT_EQ(run_python("safetensors_ref.py", "write " + (d / "py.safetensors") + " " + (d / "py.json"), out), 0)
      << out;
  const json exp = json::parse(read_file(d / "py.json"));
  SafetensorsReader r(d / "py.safetensors");
  EXPECT_EQ(r.metadata(), (StringMap{{"format", "pt"}, {"source", "python"}}));
  EXPECT_NE(r.data_offset() % 8, 0u);  // the Python writer left the buffer misaligned
  size_t checked = 0;
  for (const auto& [name, e] : exp.items()) {
    if (name == "__metadata__") continue;
    ASSERT_TRUE(r.contains(name)) << name;
    Tensor t = r.load(name);
    EXPECT_EQ(safetensors_dtype_name(t.dtype()), e["dtype"].get<std::string>()) << name;
    EXPECT_EQ(t.shape(), e["shape"].get<Shape>()) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % dtype_size(t.dtype()), 0u) << name;
    const json& vals = e["values"];
    ASSERT_EQ(static_cast<int64_t>(vals.size()), t.numel()) << name;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const json& w = vals[i];
      if (t.dtype() == DType::i64) {
        EXPECT_EQ(t.data<int64_t>()[i], w.get<int64_t>()) << name << "[" << i << "]";
        continue;
      }
      const double got = load_as_double(t.data_ptr(), t.dtype(), i);
      if (w.is_string()) {
        const std::string s = w.get<std::string>();
        if (s == "nan") EXPECT_TRUE(std::isnan(got)) << name << "[" << i << "]";
        else EXPECT_EQ(got, s == "inf" ? INFINITY : -INFINITY) << name << "[" << i << "]";
      } else {
        EXPECT_EQ(got, w.get<double>()) << name << "[" << i << "]";
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, r.names().size());
  EXPECT_EQ(checked, 11u);
}

TEST(Safetensors, PythonReadsOurFile) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 not available";
  TempDir d;
  TensorMap in;
  uint64_t seed = 11;
  for (DType dt : kAll) in["t." + std::string(dtype_name(dt))] = sample(dt, seed++);
  in["scalar"] = Tensor::full({}, -3.75);
  in["empty"] = Tensor::empty({2, 0}, DType::f16);
  const StringMap meta{{"format", "pt"}, {"note", "from titan"}};
  save_safetensors(d / "ours.safetensors", in, meta);
  write_file_atomic(d / "ours.json", expected_values(in, meta).dump());
  std::string out;
  EXPECT_EQ(run_python("safetensors_ref.py", "read " + (d / "ours.safetensors") + " " + (d / "ours.json"), out), 0)
      << out;
  EXPECT_NE(out.find("OK 11 tensors"), std::string::npos) << out;
}

namespace {

// A header of n one-byte U8 tensors "t<i>" tiling an n-byte buffer, and the file;
// with last_repeats_first the last tensor is named "t0" again.
std::string many_tensors_file(size_t n, bool last_repeats_first = false) {
  std::string h = "{";
  for (size_t i = 0; i < n; ++i)
    h += fmt::format("{}\"t{}\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[{},{}]}}", i ? "," : "",
                     last_repeats_first && i == n - 1 ? 0 : i, i, i + 1);
  h += "}";
  return raw_file(h, std::string(n, '\x07'));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Opening is linear in the tensor count. A duplicate-key check inside nlohmann's
// callback parse made it quadratic: 80k tensors took 23 s and 200k would take
// ~140 s on the 2-core reference host; linear, 200k take well under a second there.
// The bound is loose for a loaded machine.
TEST(Safetensors, ManyTensorsOpenInLinearTime) {
  TempDir d;
  const size_t n = 200000;
  write_raw(d / "many.safetensors", many_tensors_file(n));
  const auto t0 = std::chrono::steady_clock::now();
  SafetensorsReader r(d / "many.safetensors");
  const double s = seconds_since(t0);
  std::printf("%zu tensors opened in %.3f s\n", n, s);
  EXPECT_LT(s, 15.0) << n << " tensors took " << s << " s to open";
  ASSERT_EQ(r.names().size(), n);
  EXPECT_EQ(r.entry("t123456").begin, 123456u);
  EXPECT_EQ(r.load("t199999").data<uint8_t>()[0], 7);

  // The last of 200k keys repeating the first is still found.
  write_raw(d / "dup.safetensors", many_tensors_file(n, true));
  EXPECT_TRUE(throws_with([&] { SafetensorsReader r2(d / "dup.safetensors"); },
                          {"dup.safetensors", "duplicate key 't0'"}));
}

TEST(Safetensors, DeepNestingAndLongValuesGiveShortErrors) {
  TempDir d;
  const std::string f16b(16, '\0');
  auto error_of = [&](const std::string& header, const std::string& data) -> std::string {
    write_raw(d / "x.safetensors", raw_file(header, data));
    try {
      SafetensorsReader r(d / "x.safetensors");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // 100k levels: a stack overflow when the bad value was dumped into the message.
  const size_t deep = 100000;
  for (const std::string& key : {std::string("a"), std::string("__metadata__")}) {
    const std::string msg = error_of("{\"" + key + "\": " + std::string(deep, '[') + std::string(deep, ']') + "}", "");
    EXPECT_NE(msg.find("nested deeper than 8 levels"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 200u) << msg;
  }
  // A bad value of 1 MB is cut to a few dozen characters in the message.
  const std::string huge(1 << 20, 'x');
  for (const std::string& header :
       {"{\"a\": \"" + huge + "\"}", R"({"a": {"dtype": ")" + huge + R"(", "shape": [2], "data_offsets": [0, 16]}})",
        R"({"a": {"dtype": "F32", "shape": [2, ")" + huge + R"("], "data_offsets": [0, 16]}})",
        R"({"__metadata__": {"k": [")" + huge + R"("]}})", "{\"" + huge + "\": 1}", "{\"a\": \"" + huge}) {
    const std::string msg = error_of(header, f16b);
    EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
    EXPECT_NE(msg.find("... (1048"), std::string::npos) << msg.substr(0, 400);
  }
  // Duplicate keys inside an entry are refused too.
  EXPECT_NE(error_of(R"({"a": {"dtype": "F32", "dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", f16b)
                .find("duplicate key 'dtype'"),
            std::string::npos);
}

TEST(Safetensors, HeaderSizeLimit) {
  TempDir d;
  save_safetensors(d / "ok.safetensors", {{"w", Tensor::randn({4}, 1)}});
  const uint64_t hlen = SafetensorsReader(d / "ok.safetensors").data_offset() - 8;
  EXPECT_EQ(safetensors_max_header_bytes(), kSafetensorsMaxHeaderBytes);
  EXPECT_EQ(SafetensorsReader(d / "ok.safetensors", hlen).names().size(), 1u);
  EXPECT_TRUE(throws_with([&] { SafetensorsReader r(d / "ok.safetensors", hlen - 1); },
                          {"ok.safetensors", fmt::format("header of {} bytes exceeds the limit of {} bytes", hlen,
                                                         hlen - 1),
                           "TITAN_SAFETENSORS_MAX_HEADER_BYTES"}));
  // The limit is checked before the header is read: a file claiming a 1 GB header
  // fails on the limit, not on its length.
  std::string big = raw_file("{}", "");
  const uint64_t n = uint64_t{1} << 30;
  std::memcpy(big.data(), &n, 8);
  write_raw(d / "big.safetensors", big);
  EXPECT_TRUE(throws_with([&] { SafetensorsReader r(d / "big.safetensors"); }, {"exceeds the limit of 100000000"}));

  ::setenv("TITAN_SAFETENSORS_MAX_HEADER_BYTES", std::to_string(hlen - 1).c_str(), 1);
  EXPECT_TRUE(throws_with([&] { SafetensorsReader r(d / "ok.safetensors"); }, {"exceeds the limit"}));
  ::setenv("TITAN_SAFETENSORS_MAX_HEADER_BYTES", "lots", 1);
  EXPECT_TRUE(throws_with([&] { SafetensorsReader r(d / "ok.safetensors"); },
                          {"TITAN_SAFETENSORS_MAX_HEADER_BYTES='lots'", "positive number of bytes"}));
  ::setenv("TITAN_SAFETENSORS_MAX_HEADER_BYTES", "0", 1);
  EXPECT_TRUE(throws_with([&] { SafetensorsReader r(d / "ok.safetensors"); }, {"positive number of bytes"}));
  ::unsetenv("TITAN_SAFETENSORS_MAX_HEADER_BYTES");
  EXPECT_EQ(SafetensorsReader(d / "ok.safetensors").names().size(), 1u);
}
