// `titan serve`: an OpenAI-compatible HTTP server on the paged-KV-cache engine.
//
//   titan serve --hf DIR                       # http://127.0.0.1:8000/v1, model name = basename of DIR
//   titan serve --checkpoint outputs/run/checkpoint --port 9000 --served-model-name mine
//   curl localhost:8000/v1/completions -d '{"model": "DIR", "prompt": "Hello", "max_tokens": 16}'
//
// POST /v1/completions, POST /v1/chat/completions (the tokenizer's chat template),
// GET /v1/models, GET /health (KV pool and request counters). Every request in flight
// shares the engine's continuous batching; a request's tokens and logprobs do not
// depend on its neighbours. Binds loopback unless --host says otherwise. SIGINT or
// SIGTERM stops it: new requests get 503, those in flight may finish for
// --shutdown-grace seconds, the rest are cancelled, then it exits 0.
#include <fmt/core.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include "titan/cli/command.h"
#include "titan/cli/model_source.h"
#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/core/thread_pool.h"
#include "titan/infer/engine.h"
#include "titan/serve/engine_loop.h"
#include "titan/serve/http_server.h"

namespace {

using namespace titan;

struct ServeArgs {
  cli::ModelSource source;
  std::string served_model_name, port_file;
  serve::ServerOptions server;
  int64_t kv_cache_bytes = int64_t{1} << 30, max_num_seqs = 64, max_num_batched_tokens = 2048;
  int64_t host_cache_bytes = -1, seed = 0;
  bool no_prefix_caching = false, no_repack = false;
  int threads = 0;
};

std::string default_model_name(const cli::ModelSource& s) {
  const std::string p = !s.hf.empty() ? s.hf : !s.checkpoint.empty() ? s.checkpoint : s.llama2c;
  std::filesystem::path path = std::filesystem::path(p).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  return !s.llama2c.empty() ? path.stem().string() : path.filename().string();
}

int run_serve(ServeArgs& a) {
  // SIGINT/SIGTERM are taken by a waiting thread (blocked here, before any thread
  // starts, so every thread inherits the mask); SIGUSR1 wakes it when serving ends
  // otherwise. A client that hangs up must not kill the process: SIGPIPE is ignored.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (a.threads > 0) set_num_threads(a.threads);
  infer::LoadedModel m = cli::load_model_source(a.source, "serve");
  fmt::print(stderr, "model: {}\n", m.description);
  if (!a.no_repack) infer::prepare_for_inference(*m.model);
  TITAN_CHECK(a.seed >= 0, "serve: --seed must be >= 0, got {}", a.seed);
  infer::EngineConfig ec;
  ec.kv_cache_bytes = a.kv_cache_bytes;
  ec.host_cache_bytes = a.host_cache_bytes;
  ec.max_num_seqs = a.max_num_seqs;
  ec.max_num_batched_tokens = a.max_num_batched_tokens;
  ec.enable_prefix_caching = !a.no_prefix_caching;
  ec.eos_token_ids = m.eos_token_ids;
  ec.seed = static_cast<uint64_t>(a.seed);
  infer::Engine engine(*m.model, m.tokenizer.get(), ec);

  const auto& lim = a.server.limits;
  TITAN_CHECK(lim.max_body_bytes > 0, "serve: --max-body-bytes must be > 0, got {}", lim.max_body_bytes);
  TITAN_CHECK(lim.max_prompt_tokens >= 0, "serve: --max-prompt-tokens must be >= 0, got {}", lim.max_prompt_tokens);
  TITAN_CHECK(lim.max_tokens > 0, "serve: --max-tokens-limit must be > 0, got {}", lim.max_tokens);
  TITAN_CHECK(lim.max_concurrent_requests > 0 && lim.max_concurrent_requests <= 4096,
              "serve: --max-concurrent-requests must be in [1, 4096], got {}", lim.max_concurrent_requests);
  TITAN_CHECK(lim.max_n >= 1, "serve: --max-n must be >= 1, got {}", lim.max_n);
  TITAN_CHECK(a.server.shutdown_grace_s >= 0, "serve: --shutdown-grace must be >= 0, got {}",
              a.server.shutdown_grace_s);

  serve::ServedModel sm;
  sm.name = a.served_model_name.empty() ? default_model_name(a.source) : a.served_model_name;
  sm.context = m.model->config().max_position_embeddings;
  sm.vocab_size = m.model->config().vocab_size;
  sm.tokenizer = m.tokenizer.get();
  sm.bos_id = m.bos_id;
  sm.stop_token_ids = m.stop_token_ids;
  sm.created = static_cast<int64_t>(std::time(nullptr));

  serve::EngineLoop loop(engine);
  serve::HttpServer server(loop, sm, a.server);
  const int port = server.bind();
  if (!a.port_file.empty()) {
    AtomicFileWriter w(a.port_file);
    w.write(std::to_string(port) + "\n");
    w.commit();
  }
  fmt::print(stderr, "serving '{}' on http://{}:{}/v1 (KV pool {} blocks x {} tokens, context {}, {} threads)\n",
             sm.name, a.server.host, port, engine.num_kv_blocks(), ec.block_size, sm.context, num_threads());

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGUSR1) return;
    fmt::print(stderr, "serve: {} received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.shutdown();
  });
  server.listen();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  fmt::print(stderr, "serve: stopped\n");
  return 0;
}

void setup_serve(CLI::App& app, std::function<int()>& run) {
  auto a = std::make_shared<ServeArgs>();
  auto& lim = a->server.limits;
  cli::add_model_source_options(app, a->source);
  app.add_option("--host", a->server.host, "address to bind (loopback by default)")->capture_default_str();
  app.add_option("--port", a->server.port, "port to bind; 0 = any free port")->capture_default_str();
  app.add_option("--port-file", a->port_file, "write the bound port to this file once listening");
  app.add_option("--served-model-name", a->served_model_name,
                 "the name requests give in \"model\" (default: the model path's base name)");
  app.add_option("--max-body-bytes", lim.max_body_bytes, "largest request body; larger gets 413")
      ->capture_default_str();
  app.add_option("--max-prompt-tokens", lim.max_prompt_tokens,
                 "most tokens per prompt (after the chat template); 0 = the model's context - 1")
      ->capture_default_str();
  app.add_option("--max-tokens-limit", lim.max_tokens, "the largest max_tokens a request may ask for")
      ->capture_default_str();
  app.add_option("--max-concurrent-requests", lim.max_concurrent_requests,
                 "generation requests in flight at once; more get 429")
      ->capture_default_str();
  app.add_option("--max-n", lim.max_n, "most samples per prompt (n)")->capture_default_str();
  app.add_option("--shutdown-grace", a->server.shutdown_grace_s,
                 "seconds in-flight requests may finish after SIGINT/SIGTERM before they are cancelled")
      ->capture_default_str();
  app.add_option("--seed", a->seed, "engine seed: requests without a seed derive theirs from it")
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", a->kv_cache_bytes, "KV pool size in bytes")->capture_default_str();
  app.add_option("--host-cache-bytes", a->host_cache_bytes,
                 "freed activation blocks kept for reuse; -1 = auto, 0 = none")
      ->capture_default_str();
  app.add_option("--max-num-seqs", a->max_num_seqs, "most sequences per engine step")->capture_default_str();
  app.add_option("--max-num-batched-tokens", a->max_num_batched_tokens, "token budget per engine step")
      ->capture_default_str();
  app.add_flag("--no-prefix-caching", a->no_prefix_caching, "share KV blocks only between samples of one prompt");
  app.add_flag("--no-repack", a->no_repack, "keep the weights in the trainer's layout (same bits, slower decode)");
  app.add_option("--threads", a->threads, "worker threads (default: TITAN_NUM_THREADS or all cores)");
  run = [a]() -> int { return run_serve(*a); };
}

}  // namespace
TITAN_REGISTER_COMMAND(serve, "Serve the model over an OpenAI-compatible HTTP API (completions, chat)",
                       setup_serve);
