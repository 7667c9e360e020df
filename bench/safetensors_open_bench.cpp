// safetensors open time against the tensor count: SafetensorsReader on a file of N
// one-byte tensors named like an MoE checkpoint's
// ("model.layers.<l>.mlp.experts.<e>.<proj>.weight", ~100-byte header entries),
// N = 10k, 100k, 1M, and an index-based sharded open (model.safetensors.index.json,
// 16 shards, every shard then mapped). Results: docs/benchmarks.md, "Checkpoints at
// MoE scale".
//
//   build/bench/safetensors_open_bench [--benchmark_filter=...]
//   /work/venv/bin/python bench/safetensors_open_peer.py   # the same files, Rust reader
//
// The files are written once to $TMPDIR (or /tmp) as titan_st_open_<N>.safetensors and
// kept for the peer script (safetensors' Rust safe_open via PyPI, run after this
// program). The 1M-tensor header is ~100 MB, above the default 100 MB cap, so that
// case raises the cap with TITAN_SAFETENSORS_MAX_HEADER_BYTES as a user would.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/sharded.h"

namespace {

std::string tmp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// "model.layers.<l>.mlp.experts.<e>.<gate|up|down>_proj.weight" for i in [0, n): 3
// projections x 256 experts per layer, as DeepSeek-V3 names its routed experts.
std::string tensor_name(size_t i) {
  static const char* proj[] = {"gate_proj", "up_proj", "down_proj"};
  return fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", i / 768, (i / 3) % 256, proj[i % 3]);
}

std::string header(size_t begin, size_t end) {
  std::string h = "{";
  for (size_t i = begin; i < end; ++i)
    h += fmt::format("{}\"{}\":{{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[{},{}]}}", i > begin ? "," : "",
                     tensor_name(i), i - begin, i - begin + 1);
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

void write_file(const std::string& path, size_t begin, size_t end) {
  const std::string h = header(begin, end);
  const uint64_t n = h.size();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << std::string(end - begin, '\x01');
}

const std::string& single_file(size_t n) {
  static std::map<size_t, std::string> files;
  auto& p = files[n];
  if (p.empty()) {
    p = fmt::format("{}/titan_st_open_{}.safetensors", tmp_dir(), n);
    write_file(p, 0, n);
  }
  return p;
}

void BM_OpenSingleFile(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const std::string& path = single_file(n);
  ::setenv(titan::kSafetensorsMaxHeaderEnv, "1000000000", 1);
  size_t count = 0;
  for (auto _ : state) {
    titan::SafetensorsReader r(path);
    count = r.names().size();
    benchmark::DoNotOptimize(count);
  }
  ::unsetenv(titan::kSafetensorsMaxHeaderEnv);
  state.counters["tensors"] = static_cast<double>(count);
  state.counters["us_per_tensor"] = benchmark::Counter(static_cast<double>(n) * 1e-6,
                                                       benchmark::Counter::kIsIterationInvariantRate |
                                                           benchmark::Counter::kInvert);
}
BENCHMARK(BM_OpenSingleFile)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->Iterations(3);

// 16 shards + index: open (index only), then map every shard (load_all).
void BM_OpenShardedIndex(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)), shards = 16;
  const std::string dir = fmt::format("{}/titan_st_open_sharded_{}", tmp_dir(), n);
  ::mkdir(dir.c_str(), 0755);
  std::string idx = "{\"metadata\":{\"total_size\":" + std::to_string(n) + "},\"weight_map\":{";
  for (size_t s = 0; s < shards; ++s) {
    const size_t b = n * s / shards, e = n * (s + 1) / shards;
    const std::string f = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    write_file(dir + "/" + f, b, e);
    for (size_t i = b; i < e; ++i) idx += fmt::format("{}\"{}\":\"{}\"", i ? "," : "", tensor_name(i), f);
  }
  idx += "}}";
  std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << idx;
  size_t count = 0;
  for (auto _ : state) {
    titan::SafetensorsCheckpoint ck(dir);
    count = ck.load_all().size();
    benchmark::DoNotOptimize(count);
  }
  state.counters["tensors"] = static_cast<double>(count);
}
BENCHMARK(BM_OpenShardedIndex)->Arg(100000)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
