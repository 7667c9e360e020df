// `titan serve`'s HTTP front end (cpp-httplib): OpenAI's POST /v1/completions and
// POST /v1/chat/completions (JSON or server-sent events), GET /v1/models and
// GET /health (KV pool and request counters), on an EngineLoop.
//
// Each HTTP request runs on a handler thread that submits its prompts to the loop and
// waits for (or streams) their outputs; the loop's one engine batches every request in
// flight. A streaming client that goes away has its requests aborted (their KV blocks
// return to the pool). Bad requests get OpenAI's error body with a 4xx status
// (openai_protocol.h); more generation requests in flight than
// limits.max_concurrent_requests get 429; a body over limits.max_body_bytes gets 413.
#pragma once
#include <memory>
#include <string>

#include "titan/serve/engine_loop.h"
#include "titan/serve/openai_protocol.h"

namespace titan::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8000;                 // 0 = any free port
  ServeLimits limits;
  double shutdown_grace_s = 30;    // in-flight requests may finish this long after shutdown()
};

class HttpServer {
 public:
  // loop must outlive the server.
  HttpServer(EngineLoop& loop, ServedModel model, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the bound port. Throws titan::Error naming host and port.
  int bind();
  // Serves until shutdown() has finished. Call after bind().
  void listen();
  // Graceful stop, callable from any thread: new generation requests get 503; those in
  // flight may finish for up to shutdown_grace_s seconds, then are aborted
  // (finish_reason "abort" in a stream, 503 otherwise); then listen() returns.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan::serve
