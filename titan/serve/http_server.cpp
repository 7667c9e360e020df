// HttpServer: routes, limits, streaming and shutdown of `titan serve` (http_server.h).
#include "titan/serve/http_server.h"

#include <fmt/core.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "titan/core/error.h"

namespace titan::serve {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const char* finish_name(infer::FinishReason r) { return infer::finish_reason_name(r); }

void set_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_body(e)), "application/json");
}

// Decrements a counter when it goes out of scope (or when release() is called).
struct InFlight {
  std::atomic<int64_t>* n;
  void release() {
    if (n) n->fetch_sub(1);
    n = nullptr;
  }
};

}  // namespace

struct HttpServer::Impl {
  EngineLoop& loop;
  ServedModel model;
  ServerOptions opt;
  httplib::Server svr;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};  // generation requests being answered
  std::atomic<uint64_t> next_id{0};
  uint64_t id_salt = std::random_device{}();

  Impl(EngineLoop& l, ServedModel m, ServerOptions o) : loop(l), model(std::move(m)), opt(std::move(o)) {}

  std::string new_id(Endpoint e) {
    return fmt::format("{}-{:08x}{:08x}", e == Endpoint::chat ? "chatcmpl" : "cmpl",
                       static_cast<uint32_t>(id_salt), static_cast<uint32_t>(next_id.fetch_add(1)));
  }

  void routes();
  void health(httplib::Response& res);
  void generate(Endpoint e, const httplib::Request& req, httplib::Response& res);
  void respond_whole(const ApiRequest& r, const std::shared_ptr<Stream>& s, httplib::Response& res);
  void respond_stream(ApiRequest r, std::shared_ptr<Stream> s, InFlight guard, httplib::Response& res);
};

void HttpServer::Impl::routes() {
  svr.set_payload_max_length(static_cast<size_t>(opt.limits.max_body_bytes));
  const size_t threads = static_cast<size_t>(opt.limits.max_concurrent_requests) + 8;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    if (res.status == 404) msg = fmt::format("no route {} {}", req.method, req.path);
    else if (res.status == 413) msg = fmt::format("the request body is over the limit of {} bytes", opt.limits.max_body_bytes);
    else msg = fmt::format("HTTP {}", res.status);
    set_error(res, ApiError(res.status, msg, "", res.status == 404 ? "not_found" : ""));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = fmt::format("internal error: {}", e.what());
    } catch (...) {
    }
    set_error(res, ApiError(500, msg, "", "", "server_error"));
  });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", model.name}, {"object", "model"}, {"created", model.created}, {"owned_by", "titan"},
              {"max_model_len", model.context}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::completions, req, res);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::chat, req, res);
  });
}

void HttpServer::Impl::health(httplib::Response& res) {
  const LoopStats s = loop.stats();
  json j = {{"status", draining ? "draining" : "ok"},
            {"model", model.name},
            {"kv_cache",
             {{"blocks_total", s.kv_blocks_total},
              {"blocks_free", s.kv_blocks_free},
              {"blocks_cached", s.kv_blocks_cached}}},
            {"requests",
             {{"http_in_flight", in_flight.load()},
              {"engine_in_flight", s.requests_in_flight},
              {"waiting", s.requests_waiting},
              {"total", s.requests_total},
              {"aborted", s.requests_aborted}}},
            {"tokens", {{"prompt", s.prompt_tokens}, {"generated", s.generated_tokens}}},
            {"engine", {{"steps", s.steps}, {"preemptions", s.preemptions}}}};
  res.status = draining ? 503 : 200;
  res.set_content(dump(j), "application/json");
}

void HttpServer::Impl::generate(Endpoint e, const httplib::Request& req, httplib::Response& res) {
  if (draining) {
    set_error(res, ApiError(503, "the server is shutting down", "", "server_shutting_down", "server_error"));
    return;
  }
  ApiRequest r;
  try {
    r = parse_request(e, req.body, model, opt.limits);
  } catch (const ApiError& err) {
    set_error(res, err);
    return;
  }
  if (in_flight.fetch_add(1) >= opt.limits.max_concurrent_requests) {
    in_flight.fetch_sub(1);
    set_error(res, ApiError(429,
                            fmt::format("more than {} requests in flight (--max-concurrent-requests)",
                                        opt.limits.max_concurrent_requests),
                            "", "rate_limit_exceeded", "rate_limit_error"));
    return;
  }
  InFlight guard{&in_flight};
  try {
    auto stream = loop.submit(r.prompts, r.params);
    if (r.stream) {
      respond_stream(std::move(r), std::move(stream), guard, res);  // released when the stream ends
    } else {
      respond_whole(r, stream, res);
      guard.release();
    }
  } catch (...) {
    guard.release();
    throw;
  }
}

void HttpServer::Impl::respond_whole(const ApiRequest& r, const std::shared_ptr<Stream>& s, httplib::Response& res) {
  const int n = r.params.n;
  std::vector<ChoiceResult> choices(r.prompts.size() * static_cast<size_t>(n));
  std::string error;
  bool aborted = false;
  int64_t completion_tokens = 0;
  while (!s->done())
    for (auto& [prompt, out] : s->take(100ms))
      for (infer::CompletionOutput& c : out.outputs) {
        if (!c.finished()) continue;
        if (c.finish_reason == infer::FinishReason::error) error = c.error;
        aborted |= c.finish_reason == infer::FinishReason::abort;
        ChoiceResult& ch = choices[static_cast<size_t>(prompt * n + c.index)];
        ch.text = std::move(c.text);
        ch.token_ids = std::move(c.token_ids);
        ch.logprobs = std::move(c.logprobs);
        ch.top_logprobs = std::move(c.top_logprobs);
        ch.finish_reason = finish_name(c.finish_reason);
        completion_tokens += static_cast<int64_t>(ch.token_ids.size());
      }
  if (!error.empty()) return set_error(res, ApiError(400, error));
  if (aborted)
    return set_error(res, ApiError(503, "the request was cancelled: the server is shutting down", "",
                                   "server_shutting_down", "server_error"));
  res.set_content(dump(response_body(r, model, new_id(r.endpoint), std::time(nullptr), choices, completion_tokens)),
                  "application/json");
}

// Server-sent events: one `data: {chunk}` per choice with news, then (with
// stream_options.include_usage) the usage chunk, then `data: [DONE]`.
void HttpServer::Impl::respond_stream(ApiRequest r, std::shared_ptr<Stream> s, InFlight guard,
                                      httplib::Response& res) {
  struct State {
    ApiRequest req;
    std::shared_ptr<Stream> stream;
    std::string id;
    int64_t created = 0, completion_tokens = 0;
    std::vector<bool> started;
    bool finished = false;
    InFlight guard;
  };
  auto st = std::make_shared<State>();
  st->req = std::move(r);
  st->stream = std::move(s);
  st->id = new_id(st->req.endpoint);
  st->created = std::time(nullptr);
  st->started.assign(st->req.prompts.size() * static_cast<size_t>(st->req.params.n), false);
  st->guard = guard;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) {
        if (st->finished) {
          sink.done();
          return true;
        }
        std::string buf;
        const int n = st->req.params.n;
        for (auto& [prompt, out] : st->stream->take(100ms))
          for (infer::CompletionOutput& c : out.outputs) {
            if (c.finish_reason == infer::FinishReason::error) {
              buf += "data: " + dump(error_body(ApiError(400, c.error))) + "\n\n";
              continue;
            }
            const int index = prompt * n + c.index;
            st->completion_tokens += static_cast<int64_t>(c.new_token_ids.size());
            const bool first = !st->started[static_cast<size_t>(index)];
            st->started[static_cast<size_t>(index)] = true;
            const std::string fr = c.finished() ? finish_name(c.finish_reason) : "";
            buf += "data: " +
                   dump(stream_chunk(st->req, model, st->id, st->created, index, first, c.new_text, c.new_token_ids,
                                     c.new_logprobs, c.new_top_logprobs, fr)) +
                   "\n\n";
          }
        if (st->stream->done()) {
          if (st->req.include_usage)
            buf += "data: " + dump(usage_chunk(st->req, model, st->id, st->created, st->completion_tokens)) + "\n\n";
          buf += "data: [DONE]\n\n";
          st->finished = true;
        }
        if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
          loop.cancel(*st->stream);  // the client went away
          return false;
        }
        if (st->finished) sink.done();
        return true;
      },
      [this, st](bool) {
        if (!st->stream->done()) loop.cancel(*st->stream);
        st->guard.release();
      });
}

HttpServer::HttpServer(EngineLoop& loop, ServedModel model, ServerOptions options)
    : impl_(std::make_unique<Impl>(loop, std::move(model), std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& o = impl_->opt;
  if (o.port == 0) {
    const int port = impl_->svr.bind_to_any_port(o.host);
    TITAN_CHECK(port > 0, "serve: cannot bind {} (any port)", o.host);
    o.port = port;
  } else {
    TITAN_CHECK(impl_->svr.bind_to_port(o.host, o.port), "serve: cannot bind {}:{} (in use, or not an address here)",
                o.host, o.port);
  }
  return o.port;
}

void HttpServer::listen() { impl_->svr.listen_after_bind(); }

void HttpServer::shutdown() {
  Impl& m = *impl_;
  m.draining = true;
  const auto until = [&](double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (m.in_flight.load() > 0 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(20ms);
  };
  until(m.opt.shutdown_grace_s);
  if (m.in_flight.load() > 0) {
    fmt::print(stderr, "serve: cancelling {} request(s) still in flight\n", m.in_flight.load());
    m.loop.cancel_all();
    until(10);
  }
  m.svr.stop();
}

}  // namespace titan::serve
