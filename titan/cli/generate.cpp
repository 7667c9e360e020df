// `titan generate`: text generation with the paged-KV-cache engine (titan/infer).
//
//   titan generate --llama2c stories260K.bin --tokenizer tok512.model --prompt "" --temperature 0
//   titan generate --hf DIR --prompt "Hello" --max-tokens 64 --temperature 0.8 --top-p 0.95 --seed 1
//   titan generate --checkpoint outputs/run/checkpoint/step-100 --prompt "ROMEO:"
//   titan generate --hf DIR --input prompts.jsonl --output completions.jsonl
//
// --prompt streams the completion to stdout; --input/--output runs every line of a
// JSONL file ({"prompt": "...", optional sampling fields}) through the engine at
// once (continuous batching) and writes one line per completion, in input order,
// atomically. A summary (prefill and decode tokens/s, time to first token,
// inter-token latency) goes to stderr.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>
#include <type_traits>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "titan/cli/command.h"
#include "titan/cli/model_source.h"
#include "titan/models/common/overrides.h"
#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/core/thread_pool.h"
#include "titan/infer/engine.h"
#include "titan/infer/model_loader.h"
#include "titan/infer/request_jsonl.h"
#include "titan/train/trainer.h"

namespace {

using namespace titan;

struct GenerateArgs {
  cli::ModelSource source;
  std::string prompt, input, output;
  bool has_prompt = false;
  int64_t max_tokens = 256;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0;
  int top_k = 0, n = 1, logprobs = 0;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool ignore_eos = false, no_prefix_caching = false, quiet = false, no_repack = false;
  int64_t kv_cache_bytes = int64_t{1} << 30, max_num_seqs = 64, max_num_batched_tokens = 2048;
  int64_t host_cache_bytes = -1;
  int kv_block_size = kernels::cpu::kKvBlockSize;
  int threads = 0;
};

infer::SamplingParams params_from_args(const GenerateArgs& a, const infer::LoadedModel& m) {
  infer::SamplingParams p;
  p.n = a.n;
  p.temperature = a.temperature;
  p.top_p = a.top_p;
  p.top_k = a.top_k;
  p.min_p = a.min_p;
  p.max_tokens = a.max_tokens;
  if (a.seed >= 0) p.seed = static_cast<uint64_t>(a.seed);
  p.stop = a.stop;
  p.stop_token_ids = m.stop_token_ids;
  p.ignore_eos = a.ignore_eos;
  p.logprobs = a.logprobs;
  return p;
}

std::vector<int32_t> encode_prompt(const infer::LoadedModel& m, const std::string& text) {
  std::vector<int32_t> ids;
  if (m.bos_id >= 0) ids.push_back(m.bos_id);
  m.tokenizer->encode_append(text, true, ids);
  return ids;
}

// Prefill tokens/s over the steps that computed prompt tokens; decode tokens/s over the
// decode-only steps; inter-token latency = mean decode-only step time (each such step
// gives every running stream one token); time to first token from arrival.
void print_summary(const infer::Engine& e, const std::vector<infer::RequestMetrics>& ms, int64_t prompt_tokens,
                   int64_t gen_tokens, double wall_s) {
  const auto& st = e.stats();
  double ttft = 0;
  int n_ttft = 0;
  for (const auto& m : ms)
    if (m.first_token_time >= 0) {
      ttft += m.first_token_time - m.arrival_time;
      ++n_ttft;
    }
  const double prefill_tps = st.prefill_step_s > 0 ? st.prefill_tokens / st.prefill_step_s : 0;
  const double decode_tps = st.decode_step_s > 0 ? st.decode_only_tokens / st.decode_step_s : 0;
  const double itl_ms = st.decode_steps > 0 ? 1e3 * st.decode_step_s / st.decode_steps : 0;
  fmt::print(stderr,
             "--- {} request(s): {} prompt + {} generated tokens in {:.3f} s | prefill {:.1f} tok/s | decode {:.1f} "
             "tok/s | time to first token {:.1f} ms | inter-token latency {:.2f} ms | {} steps, {} preemptions, {} "
             "prefix-cached tokens | KV pool {} blocks x {} tokens ({:.1f} MiB) ---\n",
             ms.size(), prompt_tokens, gen_tokens, wall_s, prefill_tps, decode_tps, n_ttft ? 1e3 * ttft / n_ttft : 0.0,
             itl_ms, st.steps, st.preemptions, st.cached_prompt_tokens, e.num_kv_blocks(), e.config().block_size,
             static_cast<double>(e.kv_cache_bytes()) / (1 << 20));
}

}  // namespace

namespace {

int run_prompt(const GenerateArgs& a, const infer::LoadedModel& m, infer::Engine& engine) {
  const std::vector<int32_t> ids = encode_prompt(m, a.prompt);
  const infer::SamplingParams params = params_from_args(a, m);
  params.validate();  // before anything is printed
  const auto t0 = std::chrono::steady_clock::now();
  engine.add_request(ids, params);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  std::vector<infer::CompletionOutput> done;
  infer::RequestMetrics metrics;
  while (engine.has_unfinished()) {
    for (infer::RequestOutput& o : engine.step()) {
      for (infer::CompletionOutput& c : o.outputs) {
        if (a.n == 1 && !c.new_text.empty()) {
          std::fwrite(c.new_text.data(), 1, c.new_text.size(), stdout);
          std::fflush(stdout);
        }
        if (c.finished()) done.push_back(std::move(c));
      }
      metrics = o.metrics;
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(done.begin(), done.end(), [](auto& x, auto& y) { return x.index < y.index; });
  int64_t gen = 0;
  for (const auto& c : done) {
    TITAN_CHECK(c.finish_reason != infer::FinishReason::error, "generate: {}", c.error);
    if (a.n > 1) fmt::print("\n--- sample {} ({}) ---\n{}{}", c.index, infer::finish_reason_name(c.finish_reason),
                            a.prompt, c.text);
    gen += static_cast<int64_t>(c.token_ids.size());
  }
  fmt::print("\n");
  std::fflush(stdout);
  if (!a.quiet) print_summary(engine, {metrics}, static_cast<int64_t>(ids.size()), gen, wall);
  return 0;
}

int run_jsonl(const GenerateArgs& a, const infer::LoadedModel& m, infer::Engine& engine) {
  TITAN_CHECK(!a.output.empty(), "generate: --input needs --output FILE");
  std::string text;
  try {
    text = read_file(a.input);  // refuses a directory or other non-regular file
  } catch (const Error& e) {
    fail("generate: --input: {}", e.what());
  }
  std::vector<std::vector<int32_t>> prompts;
  std::vector<infer::SamplingParams> params;
  std::vector<nlohmann::json> prompt_text;
  for (infer::JsonlRequest& r : infer::parse_request_jsonl(text, params_from_args(a, m), a.input)) {
    if (r.prompt) {
      prompts.push_back(encode_prompt(m, *r.prompt));
      prompt_text.emplace_back(*r.prompt);
    } else {
      prompts.push_back(std::move(r.prompt_token_ids));
      prompt_text.emplace_back(nullptr);
    }
    params.push_back(std::move(r.params));
  }
  TITAN_CHECK(!prompts.empty(), "generate: --input {} holds no requests (expected one JSON object per line)",
              a.input);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<infer::RequestOutput> outs = engine.generate(prompts, params);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  AtomicFileWriter w(a.output);
  int64_t prompt_tokens = 0, gen = 0, errors = 0, lines = 0;
  std::vector<infer::RequestMetrics> ms;
  for (size_t i = 0; i < outs.size(); ++i) {
    ms.push_back(outs[i].metrics);
    prompt_tokens += static_cast<int64_t>(prompts[i].size());
    for (const infer::CompletionOutput& c : outs[i].outputs) {
      nlohmann::json o;
      o["prompt"] = prompt_text[i];
      o["completion"] = c.text;
      o["prompt_token_ids"] = prompts[i];
      o["token_ids"] = c.token_ids;
      o["logprobs"] = c.logprobs;
      o["finish_reason"] = infer::finish_reason_name(c.finish_reason);
      if (params[i].n > 1) o["index"] = c.index;
      if (!c.stop_reason.empty()) o["stop_reason"] = c.stop_reason;
      if (!c.error.empty()) o["error"] = c.error;
      if (!c.top_logprobs.empty()) {
        nlohmann::json tl = nlohmann::json::array();
        for (const auto& pos : c.top_logprobs) {
          nlohmann::json row = nlohmann::json::array();
          for (const auto& [id, lp] : pos) row.push_back({id, lp});
          tl.push_back(row);
        }
        o["top_logprobs"] = tl;
      }
      w.write(o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
      gen += static_cast<int64_t>(c.token_ids.size());
      errors += c.finish_reason == infer::FinishReason::error;
      ++lines;
    }
  }
  w.commit();
  if (!a.quiet) {
    fmt::print(stderr, "wrote {} completion(s) of {} prompt(s) to {}{}\n", lines,
               prompts.size(), a.output, errors ? fmt::format(" ({} with finish_reason \"error\")", errors) : "");
    print_summary(engine, ms, prompt_tokens, gen, wall);
  }
  return 0;
}

void setup_generate(CLI::App& app, std::function<int()>& run) {
  auto a = std::make_shared<GenerateArgs>();
  cli::add_model_source_options(app, a->source);
  auto* prompt = app.add_option("--prompt", a->prompt, "prompt text (may be empty); the completion is streamed");
  app.add_option("--input", a->input, "JSONL of {\"prompt\": ..., optional sampling fields} (batch mode)");
  app.add_option("--output", a->output, "JSONL of completions, in input order (batch mode)");
  app.add_option("--max-tokens", a->max_tokens, "most generated tokens per sample")->capture_default_str();
  app.add_option("--temperature", a->temperature, "sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-p", a->top_p, "nucleus sampling mass in (0, 1]")->capture_default_str();
  app.add_option("--top-k", a->top_k, "sample among the k most likely tokens; 0 = off")->capture_default_str();
  app.add_option("--min-p", a->min_p, "drop tokens below min_p x the top probability")->capture_default_str();
  app.add_option("--seed", a->seed, "sampling seed (default: derived from the engine seed 0 per request)");
  app.add_option("--n", a->n, "samples per prompt")->capture_default_str();
  app.add_option("--stop", a->stop, "stop string (repeatable)");
  app.add_option("--logprobs", a->logprobs, "also return the top-N logprobs per token (JSONL output)");
  app.add_flag("--ignore-eos", a->ignore_eos, "do not stop at EOS");
  app.add_option("--kv-cache-bytes", a->kv_cache_bytes, "KV pool size in bytes")->capture_default_str();
  app.add_option("--host-cache-bytes", a->host_cache_bytes,
                 "freed activation blocks kept for reuse; -1 = auto (5 % of weights + KV pool, <= "
                 "256 MiB), 0 = none")
      ->capture_default_str();
  app.add_option("--kv-block-size", a->kv_block_size, "tokens per KV block (trainer parity needs the default)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", a->max_num_seqs, "most sequences per engine step")->capture_default_str();
  app.add_option("--max-num-batched-tokens", a->max_num_batched_tokens, "token budget per engine step")
      ->capture_default_str();
  app.add_flag("--no-prefix-caching", a->no_prefix_caching, "share KV blocks only between samples of one prompt");
  app.add_flag("--no-repack", a->no_repack,
               "keep the weights in the trainer's (out, in) layout (default: repacked into GEMM "
               "panels at load, faster decode, same bits)");
  app.add_option("--threads", a->threads, "worker threads (default: TITAN_NUM_THREADS or all cores)");
  app.add_flag("--quiet", a->quiet, "no summary on stderr");
  run = [a, prompt]() -> int {
    a->has_prompt = prompt->count() > 0;
    TITAN_CHECK(a->has_prompt != !a->input.empty(), "generate: give either --prompt TEXT or --input FILE");
    TITAN_CHECK(a->threads >= 0, "generate: --threads={} must be >= 0 (0 = TITAN_NUM_THREADS or all cores)", a->threads);
    {
      // The command-line sampling values, checked before the model loads.
      const infer::LoadedModel none;
      params_from_args(*a, none).validate();
    }
    if (a->threads > 0) set_num_threads(a->threads);
    infer::LoadedModel m = cli::load_model_source(a->source, "generate");
    if (!a->quiet) fmt::print(stderr, "model: {}\n", m.description);
    if (!a->no_repack) infer::prepare_for_inference(*m.model);
    infer::EngineConfig ec;
    ec.kv_cache_bytes = a->kv_cache_bytes;
    ec.host_cache_bytes = a->host_cache_bytes;
    ec.block_size = a->kv_block_size;
    ec.max_num_seqs = a->max_num_seqs;
    ec.max_num_batched_tokens = a->max_num_batched_tokens;
    ec.enable_prefix_caching = !a->no_prefix_caching;
    ec.eos_token_ids = m.eos_token_ids;
    infer::Engine engine(*m.model, m.tokenizer.get(), ec);
    const int rc = a->has_prompt ? run_prompt(*a, m, engine) : run_jsonl(*a, m, engine);
    // The overridden paths the generator ran (trainer parity needs the trainer's).
    if (!a->quiet && !m.overrides.empty())
      fmt::print(stderr, "model.overrides: {}\n", models::override_calls_summary(m.overrides));
    return rc;
  };
}

}  // namespace
TITAN_REGISTER_COMMAND(generate, "Generate text with the paged-KV-cache engine (streaming or JSONL batch)",
                       setup_generate);
