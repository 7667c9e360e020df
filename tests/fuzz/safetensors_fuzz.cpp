// Fuzz target: safetensors files and sharded checkpoints (model.safetensors.index.json).
// Input: byte 0 picks the form, the rest is the file:
//   'I'   an index.json beside two valid shards, model-00001-of-00002.safetensors
//         ("a": f32 [2, 3], "b": i64 [2]) and model-00002-of-00002.safetensors
//         ("c": bf16 [4]); opened with SafetensorsCheckpoint, then every tensor loaded;
//   else  a .safetensors file: SafetensorsReader, then every tensor loaded (mmap and
//         copy) and its bytes read.
// Property: an accepted tensor's byte count is its entry's span.
#include <cstring>

#include "tests/fuzz/fuzz_util.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/sharded.h"

using namespace titan;

namespace {

const std::string& shard_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/ckpt";
    std::string cmd = "mkdir -p '" + d + "'";
    if (std::system(cmd.c_str()) != 0) std::abort();
    save_safetensors(d + "/model-00001-of-00002.safetensors",
                     {{"a", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})},
                      {"b", Tensor::from_vector(std::vector<int64_t>{7, 8}, {2})}});
    save_safetensors(d + "/model-00002-of-00002.safetensors", {{"c", Tensor::zeros({4}, DType::bf16)}});
    return d;
  }();
  return dir;
}

uint64_t checksum(const Tensor& t) {
  uint64_t s = 0;
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) s = s * 31 + p[i];
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body = fuzz::as_text(data + 1, size - 1);
  if (data[0] == 'I') {
    const std::string dir = shard_dir();
    fuzz::write_scratch("ckpt/model.safetensors.index.json", body);
    fuzz::expect_ok_or_error([&] {
      SafetensorsCheckpoint ck(dir);
      for (const std::string& name : ck.names()) {
        const SafetensorsEntry& e = ck.entry(name);
        const Tensor t = ck.load(name, LoadMode::copy);
        TITAN_FUZZ_ASSERT(t.nbytes() == e.end - e.begin);
      }
    });
    return 0;
  }
  const std::string path = fuzz::write_scratch("x.safetensors", body);
  fuzz::expect_ok_or_error([&] {
    SafetensorsReader r(path);
    uint64_t sum = 0;
    for (const std::string& name : r.names()) {
      const SafetensorsEntry& e = r.entry(name);
      for (LoadMode mode : {LoadMode::mmap, LoadMode::copy}) {
        const Tensor t = r.load(name, mode);
        TITAN_FUZZ_ASSERT(t.nbytes() == e.end - e.begin);
        sum += checksum(t);
      }
    }
    (void)sum;
    (void)r.metadata().size();
  });
  return 0;
}
