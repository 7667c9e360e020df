// Data path speed on tiny Shakespeare (input.txt, 1,115,394 bytes), one thread
// unless stated:
//   CacheBuild*   read + hash + split + tokenise + write the train-split cache file
//   CacheReuse*   the same call when the cache is valid (read + hash + tokenizer
//                 identity + mmap), the cost every run pays at start-up
//   Identity      tokenizer_identity alone (one id_to_token per vocabulary id)
//   XxHash64 / Fnv1a / ReadFile   the content hash (XXH64), FNV-1a, reading the file (peer)
//   NextBatch     DataLoader::next (random windows, packing into a ForwardBatch)
// items_per_second = tokens (batches) or bytes (hash).
//   build/bench/data_loader_bench [--benchmark_filter=Byte]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "titan/config/resolve.h"
#include "titan/core/fs.h"
#include "titan/data/loader.h"
#include "titan/data/tokenizer.h"

namespace {

using namespace titan::data;

std::string data_dir() { return titan::config::shared_data_dir(); }
std::string shakespeare_path() {
  return data_dir() + "/tinyshakespeare/input.txt";
}

std::string scratch(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("titan_data_bench_" + tag + "_" + std::to_string(::getpid())))
      .string();
}

const Tokenizer& tokenizer(const std::string& which) {
  static auto byte = load_tokenizer("byte");
  static std::unique_ptr<Tokenizer> qwen3;
  if (which == "byte") return *byte;
  if (!qwen3) qwen3 = load_tokenizer(data_dir() + "/qwen3-tokenizer");
  return *qwen3;
}

TokenCacheOptions cache_in(const std::string& dir) {
  TokenCacheOptions o;
  o.cache_dir = dir;
  return o;
}

void cache_build(benchmark::State& state, const std::string& which) {
  const Tokenizer& tok = tokenizer(which);
  const std::string dir = scratch("build");
  int64_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
    auto d = load_token_dataset(DatasetSpec::text_file(shakespeare_path()), Split::train, 0.1, tok,
                                cache_in(dir));
    tokens = d->num_tokens();
  }
  std::filesystem::remove_all(dir);
  state.counters["tokens"] = static_cast<double>(tokens);
}

void cache_reuse(benchmark::State& state, const std::string& which) {
  const Tokenizer& tok = tokenizer(which);
  const std::string dir = scratch("reuse");
  const auto spec = DatasetSpec::text_file(shakespeare_path());
  load_token_dataset(spec, Split::train, 0.1, tok, cache_in(dir));
  for (auto _ : state) {
    auto d = load_token_dataset(spec, Split::train, 0.1, tok, cache_in(dir));
    if (d->rebuilt()) state.SkipWithError("cache was rebuilt");
    benchmark::DoNotOptimize(d->tokens().data());
  }
  std::filesystem::remove_all(dir);
}

void BM_CacheBuildByte(benchmark::State& s) {
  cache_build(s, "byte");
}
void BM_CacheReuseByte(benchmark::State& s) {
  cache_reuse(s, "byte");
}
void BM_CacheBuildQwen3(benchmark::State& s) {
  cache_build(s, "qwen3");
}
void BM_CacheReuseQwen3(benchmark::State& s) {
  cache_reuse(s, "qwen3");
}
BENCHMARK(BM_CacheBuildByte)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CacheReuseByte)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CacheBuildQwen3)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_CacheReuseQwen3)->Unit(benchmark::kMillisecond);

void BM_IdentityQwen3(benchmark::State& state) {
  const Tokenizer& tok = tokenizer("qwen3");
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer_identity(tok));
}
BENCHMARK(BM_IdentityQwen3)->Unit(benchmark::kMillisecond);

void BM_Fnv1a(benchmark::State& state) {
  const std::string text = titan::read_file(shakespeare_path());
  for (auto _ : state) benchmark::DoNotOptimize(fnv1a64(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Fnv1a)->Unit(benchmark::kMicrosecond);

void BM_XxHash64(benchmark::State& state) {
  const std::string text = titan::read_file(shakespeare_path());
  for (auto _ : state) benchmark::DoNotOptimize(xxhash64(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_XxHash64)->Unit(benchmark::kMicrosecond);

void BM_ReadFile(benchmark::State& state) {
  size_t n = 0;
  for (auto _ : state) n = titan::read_file(shakespeare_path()).size();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_ReadFile)->Unit(benchmark::kMicrosecond);

void BM_NextBatch(benchmark::State& state) {
  static auto data = load_token_dataset(DatasetSpec::text_file(shakespeare_path()), Split::train,
                                        0.1, tokenizer("byte"), {});
  LoaderOptions o;
  o.batch_size = state.range(0);
  o.seq_len = state.range(1);
  DataLoader loader(data, o);
  for (auto _ : state) benchmark::DoNotOptimize(loader.next().input.tokens.data_ptr());
  state.SetItemsProcessed(state.iterations() * o.batch_size * o.seq_len);
}
BENCHMARK(BM_NextBatch)->Args({8, 256})->Args({16, 1024})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
