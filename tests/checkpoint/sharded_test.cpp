#include "titan/checkpoint/sharded.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/checkpoint/helpers.h"
#include "titan/core/fs.h"

using namespace titan;
using namespace titan::test;
using json = nlohmann::json;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// 6 tensors of 400 bytes (f32 x 100) + one of 1200 bytes + a small i64.
TensorMap model_tensors() {
  TensorMap m;
  for (int i = 0; i < 6; ++i) m[fmt::format("model.layers.{}.w", i)] = Tensor::randn({10, 10}, 100 + i);
  m["model.embed_tokens.weight"] = Tensor::randn({30, 10}, 7);
  m["model.steps"] = Tensor::from_vector(std::vector<int64_t>{3, 4}, {2});
  return m;
}

}  // namespace

TEST(Sharded, SaveSplitsGreedilyAndLoadsBack) {
  TempDir d;
  const TensorMap in = model_tensors();
  // Name order: embed (1200 B, over the limit -> own shard), layers 0..5 (400 B each,
  // two per 1000-byte shard), steps (16 B) joins the last layer shard.
  SafetensorsIndex idx = save_sharded_safetensors(d / "ckpt", in, 1000, {{"step", "5"}});
  EXPECT_EQ(idx.total_size, 1200u + 6 * 400 + 16);
  EXPECT_EQ(idx.shard_files(), (std::vector<std::string>{"model-00001-of-00004.safetensors",
                                                         "model-00002-of-00004.safetensors",
                                                         "model-00003-of-00004.safetensors",
                                                         "model-00004-of-00004.safetensors"}));
  EXPECT_EQ(idx.weight_map.at("model.embed_tokens.weight"), "model-00001-of-00004.safetensors");
  EXPECT_EQ(idx.weight_map.at("model.layers.1.w"), "model-00002-of-00004.safetensors");
  EXPECT_EQ(idx.weight_map.at("model.steps"), "model-00004-of-00004.safetensors");

  // The index file has HF's shape.
  const json j = json::parse(read_file(d / "ckpt/model.safetensors.index.json"));
  EXPECT_EQ(j["metadata"]["total_size"].get<uint64_t>(), idx.total_size);
  EXPECT_EQ(j["weight_map"].size(), in.size());

  EXPECT_EQ(read_safetensors_index(d / "ckpt/model.safetensors.index.json").weight_map, idx.weight_map);
  for (const std::string& path : {d / "ckpt", d / "ckpt/model.safetensors.index.json"}) {
    SafetensorsCheckpoint ck(path);
    EXPECT_EQ(ck.num_shards(), 4u);
    EXPECT_EQ(ck.names().size(), in.size());
    EXPECT_EQ(ck.metadata().at("step"), "5");
    EXPECT_EQ(ck.entry("model.layers.3.w").shape, (Shape{10, 10}));
    EXPECT_NE(ck.shard_of("model.layers.3.w").find("model-00003-of-00004.safetensors"), std::string::npos);
    EXPECT_TRUE(same_bytes(ck.load("model.layers.4.w"), in.at("model.layers.4.w")));
  }
  const TensorMap out = load_safetensors_checkpoint(d / "ckpt", LoadMode::copy);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) EXPECT_TRUE(same_bytes(out.at(name), t)) << name;
}

TEST(Sharded, SingleShardAndSingleFileDirectory) {
  TempDir d;
  const TensorMap in = model_tensors();
  auto idx = save_sharded_safetensors(d / "one", in, uint64_t{1} << 30);
  EXPECT_EQ(idx.shard_files(), std::vector<std::string>{"model-00001-of-00001.safetensors"});
  EXPECT_EQ(load_safetensors_checkpoint(d / "one").size(), in.size());
  // A directory with just model.safetensors, and a plain file path.
  ::mkdir((d / "single").c_str(), 0755);
  save_safetensors(d / "single/model.safetensors", in);
  EXPECT_EQ(SafetensorsCheckpoint(d / "single").num_shards(), 1u);
  EXPECT_EQ(load_safetensors_checkpoint(d / "single/model.safetensors").size(), in.size());
}

TEST(Sharded, ResaveRemovesStaleShards) {
  TempDir d;
  TensorMap in = model_tensors();
  save_sharded_safetensors(d / "c", in, 1000);
  save_safetensors(d / "c/model.safetensors", in);  // would shadow the index (as in transformers)
  ::mkdir((d / "c/keep").c_str(), 0755);
  write_raw(d / "c/other-00001-of-00002.safetensors", "not ours");
  in.erase("model.embed_tokens.weight");
  in["model.layers.0.w"] = Tensor::zeros({10, 10});
  save_sharded_safetensors(d / "c", in, 10000);
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(d / "c")) files.push_back(f.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"keep", "model-00001-of-00001.safetensors",
                                             "model.safetensors.index.json", "other-00001-of-00002.safetensors"}));
  const TensorMap out = load_safetensors_checkpoint(d / "c");
  EXPECT_EQ(out.size(), in.size());
  EXPECT_TRUE(same_bytes(out.at("model.layers.0.w"), Tensor::zeros({10, 10})));
}

TEST(Sharded, BadInputErrors) {
  TempDir d;
  save_sharded_safetensors(d / "c", model_tensors(), 1000);
  const std::string idx_path = d / "c/model.safetensors.index.json";
  const std::string index_text = read_file(idx_path);
  json j = json::parse(index_text);

  EXPECT_TRUE(throws_with([&] { SafetensorsCheckpoint ck(d / "nothing"); }, {"nothing"}));
  ::mkdir((d / "empty").c_str(), 0755);
  EXPECT_TRUE(throws_with([&] { SafetensorsCheckpoint ck(d / "empty"); },
                          {"empty", "neither model.safetensors nor model.safetensors.index.json"}));
  EXPECT_TRUE(throws_with([&] { read_safetensors_index(d / "c/none.index.json"); },
                          {"safetensors index", "none.index.json", "file not found"}));

  write_raw(idx_path, "{\"weight_map\": {");
  EXPECT_TRUE(throws_with([&] { load_safetensors_checkpoint(d / "c"); },
                          {"safetensors index", "model.safetensors.index.json", "malformed JSON"}));
  write_raw(idx_path, R"({"metadata": {}})");
  EXPECT_TRUE(throws_with([&] { load_safetensors_checkpoint(d / "c"); }, {"missing \"weight_map\""}));
  write_raw(idx_path, R"({"weight_map": {"a": 3}})");
  EXPECT_TRUE(throws_with([&] { load_safetensors_checkpoint(d / "c"); }, {"weight_map entry 'a'", "string"}));

  // Tensor listed in the index but absent from its shard.
  json j2 = j;
  j2["weight_map"]["model.layers.9.w"] = "model-00002-of-00004.safetensors";
  write_raw(idx_path, j2.dump());
  EXPECT_TRUE(throws_with([&] { load_safetensors_checkpoint(d / "c"); },
                          {"model.safetensors.index.json", "tensor 'model.layers.9.w'", "absent from shard",
                           "model-00002-of-00004.safetensors"}));

  // Missing shard file.
  write_raw(idx_path, index_text);
  ASSERT_EQ(::rename((d / "c/model-00003-of-00004.safetensors").c_str(), (d / "moved").c_str()), 0);
  EXPECT_TRUE(throws_with([&] { load_safetensors_checkpoint(d / "c"); },
                          {"model.safetensors.index.json", "shard file", "model-00003-of-00004.safetensors",
                           "does not exist"}));
  ASSERT_EQ(::rename((d / "moved").c_str(), (d / "c/model-00003-of-00004.safetensors").c_str()), 0);

  // A corrupt shard reports the shard's own path.
  std::string s = read_file(d / "c/model-00002-of-00004.safetensors");
  write_raw(d / "c/model-00002-of-00004.safetensors", s.substr(0, s.size() - 4));
  EXPECT_TRUE(throws_with([&] { load_safetensors_checkpoint(d / "c"); },
                          {"model-00002-of-00004.safetensors", "truncated"}));
  write_raw(d / "c/model-00002-of-00004.safetensors", s);
  EXPECT_EQ(load_safetensors_checkpoint(d / "c").size(), model_tensors().size());
}

// metadata.total_size is a hint: a float in range is kept (truncated); a value that no
// uint64 holds (1e114, found by the safetensors fuzz target, where the conversion was
// undefined behaviour), a negative one or a string reads as absent, and the index still loads.
TEST(Sharded, TotalSizeOutOfRangeReadsAsAbsent) {
  TempDir d;
  save_sharded_safetensors(d / "c", model_tensors(), 1000);
  const std::string idx_path = d / "c/model.safetensors.index.json";
  json j = json::parse(read_file(idx_path));
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"1e114", 0}, {"-5", 0}, {"-1.5", 0}, {"1.8446744073709552e19", 0}, {"\"12\"", 0},
      {"4096.75", 4096}, {"18446744073709551615", 18446744073709551615ull}};
  for (const auto& [text, want] : cases) {
    json k = j;
    k["metadata"]["total_size"] = json::parse(text);
    write_raw(idx_path, k.dump());
    EXPECT_EQ(read_safetensors_index(idx_path).total_size, want) << text;
    EXPECT_EQ(load_safetensors_checkpoint(d / "c").size(), model_tensors().size()) << text;
  }
}

TEST(Sharded, FailedSaveKeepsPreviousCheckpoint) {
  TempDir d;
  const TensorMap in = model_tensors();
  save_sharded_safetensors(d / "c", in, 1000);
  std::vector<std::string> before;
  for (const auto& f : std::filesystem::directory_iterator(d / "c")) before.push_back(read_file(f.path()));
  TensorMap broken = in;
  broken["model.zzz"] = Tensor();
  EXPECT_TRUE(throws_with([&] { save_sharded_safetensors(d / "c", broken, 1000); }, {"tensor 'model.zzz' is undefined"}));
  std::vector<std::string> after;
  for (const auto& f : std::filesystem::directory_iterator(d / "c")) after.push_back(read_file(f.path()));
  EXPECT_EQ(before, after);
  EXPECT_EQ(load_safetensors_checkpoint(d / "c").size(), in.size());
}

// An index opens no shard; each is mapped the first time one of its tensors is
// needed, so a damaged shard does not stop the others from loading.
TEST(Sharded, ShardsAreMappedOnDemand) {
  TempDir d;
  const TensorMap in = model_tensors();
  save_sharded_safetensors(d / "c", in, 1000);
  SafetensorsCheckpoint ck(d / "c");
  EXPECT_EQ(ck.num_shards(), 4u);
  EXPECT_EQ(ck.num_open_shards(), 0u);
  EXPECT_EQ(ck.names().size(), in.size());
  EXPECT_TRUE(ck.contains("model.layers.5.w"));
  EXPECT_NE(ck.shard_of("model.layers.5.w").find("model-00004-of-00004"), std::string::npos);
  EXPECT_EQ(ck.num_open_shards(), 0u);
  EXPECT_TRUE(same_bytes(ck.load("model.layers.1.w"), in.at("model.layers.1.w")));
  EXPECT_EQ(ck.num_open_shards(), 1u);
  EXPECT_EQ(ck.entry("model.layers.0.w").shape, (Shape{10, 10}));  // same shard
  EXPECT_EQ(ck.num_open_shards(), 1u);

  // Shard 3 cut short: shard 2 still loads; shard 3's tensors name it.
  const std::string s3 = d / "c/model-00003-of-00004.safetensors";
  const std::string bytes = read_file(s3);
  write_raw(s3, bytes.substr(0, bytes.size() - 4));
  SafetensorsCheckpoint ck2(d / "c");
  EXPECT_TRUE(same_bytes(ck2.load("model.layers.0.w"), in.at("model.layers.0.w")));
  EXPECT_TRUE(throws_with([&] { ck2.load("model.layers.2.w"); }, {"model-00003-of-00004.safetensors", "truncated"}));
  EXPECT_TRUE(throws_with([&] { ck2.load_all(); }, {"model-00003-of-00004.safetensors", "truncated"}));
}

// A 100k-deep value in the index is an error, not a stack overflow.
TEST(Sharded, DeeplyNestedIndexIsAnError) {
  TempDir d;
  save_sharded_safetensors(d / "c", model_tensors(), 1000);
  write_raw(d / "c/model.safetensors.index.json",
            "{\"weight_map\": {\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}}");
  EXPECT_TRUE(throws_with([&] { SafetensorsCheckpoint ck(d / "c"); },
                          {"model.safetensors.index.json", "nested deeper than 64 levels"}));
}
