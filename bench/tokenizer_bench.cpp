// Tokenizer speed, single thread, on tiny Shakespeare (input.txt, 1,115,394 bytes):
//   Qwen3 BPE encode with a cold pre-token cache (a fresh tokenizer per
//   iteration; loading is not timed) and with a warm one, decode, load time;
//   SentencePiece (tok512) and the byte tokenizer for comparison.
// bytes_per_second is input text bytes (decode: output bytes).
//   build/bench/tokenizer_bench [--benchmark_filter=Qwen3]
// Data: the repository's data/ ($TITAN_DATA or $TITAN_SHARED/data override it).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "titan/config/resolve.h"
#include "titan/data/tokenizer.h"

namespace {

std::string data_dir() { return titan::config::shared_data_dir(); }

const std::string& shakespeare() {
  static const std::string text = [] {
    std::ifstream f(data_dir() + "/tinyshakespeare/input.txt", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }();
  return text;
}

std::string qwen3_path() { return data_dir() + "/qwen3-tokenizer"; }

void BM_Qwen3Load(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(titan::data::load_tokenizer(qwen3_path()));
}
BENCHMARK(BM_Qwen3Load)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Qwen3EncodeColdCache(benchmark::State& state) {
  const std::string& text = shakespeare();
  size_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = titan::data::load_tokenizer(qwen3_path());
    state.ResumeTiming();
    const auto ids = tok->encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
    state.PauseTiming();
    tok.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_Qwen3EncodeColdCache)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Qwen3EncodeWarmCache(benchmark::State& state) {
  const std::string& text = shakespeare();
  auto tok = titan::data::load_tokenizer(qwen3_path());
  tok->encode(text);  // fill the pre-token cache
  for (auto _ : state) benchmark::DoNotOptimize(tok->encode(text).data());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_Qwen3EncodeWarmCache)->Unit(benchmark::kMillisecond);

void BM_Qwen3Decode(benchmark::State& state) {
  const std::string& text = shakespeare();
  auto tok = titan::data::load_tokenizer(qwen3_path());
  const auto ids = tok->encode(text);
  for (auto _ : state) benchmark::DoNotOptimize(tok->decode(ids).data());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_Qwen3Decode)->Unit(benchmark::kMillisecond);

void BM_SentencePieceEncode(benchmark::State& state) {
  const std::string& text = shakespeare();
  auto tok = titan::data::load_tokenizer(data_dir() + "/stories260k/tok512.model");
  for (auto _ : state) benchmark::DoNotOptimize(tok->encode(text).data());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_SentencePieceEncode)->Unit(benchmark::kMillisecond);

void BM_ByteEncode(benchmark::State& state) {
  const std::string& text = shakespeare();
  auto tok = titan::data::load_tokenizer("byte");
  for (auto _ : state) benchmark::DoNotOptimize(tok->encode(text).data());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}
BENCHMARK(BM_ByteEncode)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
