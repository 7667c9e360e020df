// Engine: requests, outputs and the blocking generate(); the forward/sampling step is
// in engine_step.cpp.
#include "titan/infer/engine.h"

#include <algorithm>
#include <chrono>

#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/infer/engine_request.h"
#include "titan/infer/sampler.h"

namespace titan::infer {

namespace {
int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// State rows of a model with recurrent layers: one per running sequence and as many
// prefix snapshots; none otherwise.
int64_t state_rows(const EngineConfig& cfg, const models::Decoder& model) {
  return Engine::state_bytes_per_slot(model) > 0 ? 2 * cfg.max_num_seqs : 0;
}

int64_t blocks_from_config(const EngineConfig& cfg, const models::Decoder& model) {
  TITAN_CHECK(cfg.host_cache_bytes >= -1,
              "Engine: host_cache_bytes must be >= -1 (-1 = auto), got {}", cfg.host_cache_bytes);
  TITAN_CHECK(cfg.block_size >= 16 && cfg.block_size <= 256 && cfg.block_size % 16 == 0,
              "Engine: block_size must be a multiple of 16 in [16, 256], got {}", cfg.block_size);
  TITAN_CHECK(cfg.max_num_seqs >= 1, "Engine: max_num_seqs must be >= 1, got {}", cfg.max_num_seqs);
  if (cfg.num_kv_blocks > 0) return cfg.num_kv_blocks;
  TITAN_CHECK(cfg.kv_cache_bytes >= 0, "Engine: kv_cache_bytes must be >= 0, got {}", cfg.kv_cache_bytes);
  const int64_t per_block = Engine::kv_bytes_per_block(model, cfg.block_size);
  const int64_t state = state_rows(cfg, model) * Engine::state_bytes_per_slot(model);
  TITAN_CHECK(state <= cfg.kv_cache_bytes,
              "Engine: kv_cache_bytes = {} is smaller than the recurrent state of max_num_seqs = {} "
              "sequences and as many prefix snapshots ({} bytes)", cfg.kv_cache_bytes, cfg.max_num_seqs, state);
  if (per_block == 0)  // no paged layers: blocks only count tokens
    return cfg.max_num_seqs * ((model.config().max_position_embeddings + cfg.block_size - 1) / cfg.block_size);
  return (cfg.kv_cache_bytes - state) / per_block;
}
}  // namespace

int64_t Engine::state_bytes_per_slot(const models::Decoder& model) {
  int64_t n = 0;
  for (const auto& l : model.cache_spec(kernels::cpu::kKvBlockSize))
    for (const auto& t : l.state) n += t.numel();
  return n * static_cast<int64_t>(sizeof(float));
}

int64_t Engine::kv_bytes_per_block(const models::Decoder& model, int block_size) {
  return models::cache_bytes_per_block(model.cache_spec(block_size));
}

Engine::Engine(const models::Decoder& model, const data::Tokenizer* tokenizer, const EngineConfig& cfg)
    : model_(model),
      tok_(tokenizer),
      cfg_(cfg),
      pool_(blocks_from_config(cfg, model), cfg.block_size),
      states_(state_rows(cfg, model) / 2, state_rows(cfg, model) / 2),
      sched_(pool_, SchedulerConfig{cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.enable_prefix_caching},
             &states_) {
  const auto& mc = model.config();
  sample_vocab_ = tok_ ? std::min<int64_t>(mc.vocab_size, tok_->vocab_size()) : mc.vocab_size;
  eos_ = cfg.eos_token_ids;
  if (eos_.empty()) {
    if (tok_ && tok_->eos_id() >= 0) eos_.push_back(tok_->eos_id());
    else if (mc.eos_token_id >= 0) eos_.push_back(static_cast<int32_t>(mc.eos_token_id));
  }
  // The cache the model declares per layer (paged K/V for attention layers).
  kv_ = models::allocate_cache(model.cache_spec(cfg.block_size), pool_.num_blocks(), cfg.block_size,
                               states_.num_rows());
  if (const int64_t hc = host_cache_bytes(); hc > 0) host_cache_.emplace(static_cast<size_t>(hc));
  t0_ns_ = monotonic_ns();
}

int64_t Engine::host_cache_bytes() const {
  if (cfg_.host_cache_bytes >= 0) return cfg_.host_cache_bytes;
  const int64_t weights = model_.num_parameters() * int64_t{sizeof(float)};
  return std::min((weights + kv_cache_bytes()) / 20, int64_t{256} << 20);
}

Engine::~Engine() = default;

double Engine::now() const { return static_cast<double>(monotonic_ns() - t0_ns_) * 1e-9; }

void Engine::validate_request(const Request& r) const {
  const auto& mc = model_.config();
  r.params.validate();
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  TITAN_CHECK(P > 0, "request {}: the prompt is empty", r.id);
  TITAN_CHECK(P < mc.max_position_embeddings,
              "request {}: the prompt has {} tokens, the model's context is {} (no room for a generated token)",
              r.id, P, mc.max_position_embeddings);
  for (int64_t i = 0; i < P; ++i)
    TITAN_CHECK(r.prompt[i] >= 0 && r.prompt[i] < mc.vocab_size,
                "request {}: prompt token {} = {} is outside the vocabulary [0, {})", r.id, i, r.prompt[i],
                mc.vocab_size);
  TITAN_CHECK(r.params.stop.empty() || tok_ != nullptr,
              "request {}: stop strings need a tokenizer (the engine has none)", r.id);
}

int64_t Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  auto req = std::make_unique<Request>();
  Request& r = *req;
  r.id = next_id_++;
  r.params = params;
  r.prompt = std::move(prompt);
  r.metrics.arrival_time = now();
  ++stats_.requests;
  std::string error;
  try {
    validate_request(r);
  } catch (const Error& e) {
    error = e.what();
  }
  const int n = error.empty() ? params.n : 1;
  const uint64_t seed = params.seed ? *params.seed : derive_request_seed(cfg_.seed, static_cast<uint64_t>(r.id));
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Sequence>();
    s->request_id = r.id;
    s->sample_index = i;
    s->seed = seed;
    s->salt = cfg_.enable_prefix_caching ? 0 : static_cast<uint64_t>(r.id) + 1;
    s->params = &r.params;
    s->leader = i ? r.seqs[0].get() : nullptr;
    s->tokens = r.prompt;
    s->num_prompt = static_cast<int64_t>(r.prompt.size());
    s->detok.reset(params.detokenize ? tok_ : nullptr, r.prompt);
    if (!error.empty()) {
      s->status = SeqStatus::finished;
      s->finish = FinishReason::error;
      s->error = error;
    }
    r.seqs.push_back(std::move(s));
  }
  if (error.empty())
    for (auto& s : r.seqs) sched_.add(s.get());
  touched_.push_back(r.id);
  requests_.emplace(r.id, std::move(req));
  return r.id;
}

void Engine::abort(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (auto& s : it->second->seqs)
    if (s->finish == FinishReason::none) {
      sched_.remove(s.get());
      finish_seq(*s, FinishReason::abort);
    }
  touched_.push_back(id);
}

void Engine::finish_seq(Sequence& s, FinishReason r) {
  s.finish = r;
  s.status = SeqStatus::finished;
  if (r == FinishReason::length || r == FinishReason::abort) s.text += s.detok.flush();
}

// Builds the output of one request: its samples with news; finished samples carry
// their cumulative results. A finished request is forgotten afterwards.
RequestOutput Engine::collect(Request& r) {
  RequestOutput out;
  out.request_id = r.id;
  bool all_done = true;
  for (auto& sp : r.seqs) {
    Sequence& s = *sp;
    const bool done = s.finish != FinishReason::none;
    all_done &= done;
    const size_t ngen = static_cast<size_t>(s.num_generated());
    size_t text_end = s.text.size();
    if (!done && !s.params->stop.empty()) {  // hold back what may begin a stop string
      size_t hold = 0;
      for (const auto& st : s.params->stop) hold = std::max(hold, st.size() - 1);
      text_end = text_end > s.text_sent + hold ? text_end - hold : s.text_sent;
      while (text_end > s.text_sent && (static_cast<unsigned char>(s.text[text_end]) & 0xC0) == 0x80) --text_end;
    }
    const bool news = s.tokens_sent < ngen || text_end > s.text_sent || (done && !s.finish_reported);
    if (!news) continue;
    CompletionOutput c;
    c.index = s.sample_index;
    c.new_token_ids.assign(s.tokens.begin() + s.num_prompt + s.tokens_sent, s.tokens.end());
    c.new_logprobs.assign(s.logprobs.begin() + s.tokens_sent, s.logprobs.end());
    if (!s.top_logprobs.empty())
      c.new_top_logprobs.assign(s.top_logprobs.begin() + s.tokens_sent, s.top_logprobs.end());
    c.new_text = s.text.substr(s.text_sent, text_end - s.text_sent);
    s.tokens_sent = ngen;
    s.text_sent = text_end;
    if (done) {
      c.finish_reason = s.finish;
      c.stop_reason = s.stop_reason;
      c.error = s.error;
      c.token_ids.assign(s.tokens.begin() + s.num_prompt, s.tokens.end());
      c.logprobs = s.logprobs;
      c.top_logprobs = s.top_logprobs;
      c.routed_experts = s.routed_experts;
      c.text = s.text;
      s.finish_reported = true;
    }
    out.outputs.push_back(std::move(c));
  }
  out.finished = all_done;
  r.metrics.num_preemptions = 0;
  for (auto& s : r.seqs) r.metrics.num_preemptions += s->num_preemptions;
  r.metrics.num_cached_tokens = r.seqs[0]->num_cached_tokens;
  if (all_done) {
    r.metrics.finished_time = now();
    for (auto& s : r.seqs) stats_.cached_prompt_tokens += s->num_cached_tokens;
    out.prompt_token_ids = r.prompt;
  }
  out.metrics = r.metrics;
  return out;
}

std::vector<RequestOutput> Engine::step() {
  const double t_start = now();
  StepPlan plan = sched_.schedule();
  for (Sequence* s : plan.failed) {
    finish_seq(*s, s->finish);
    touched_.push_back(s->request_id);
  }
  stats_.preemptions += static_cast<int64_t>(plan.preempted.size());
  if (!plan.chunks.empty()) {
    run_step(plan);
    const double dt = now() - t_start;
    ++stats_.steps;
    stats_.step_s += dt;
  }
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  std::vector<RequestOutput> outs;
  for (int64_t id : touched_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    RequestOutput o = collect(*it->second);
    if (o.outputs.empty() && !o.finished) continue;
    if (o.finished) requests_.erase(it);
    outs.push_back(std::move(o));
  }
  touched_.clear();
  return outs;
}

std::vector<RequestOutput> Engine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> Engine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params) {
  TITAN_CHECK(prompts.size() == params.size(), "Engine::generate: {} prompts but {} SamplingParams",
              prompts.size(), params.size());
  TITAN_CHECK(!has_unfinished(), "Engine::generate: {} requests are already in flight", requests_.size());
  std::vector<RequestOutput> results(prompts.size());
  std::map<int64_t, size_t> slot;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t id = add_request(prompts[i], params[i]);
    slot[id] = i;
    results[i].request_id = id;
    results[i].outputs.resize(static_cast<size_t>(std::max(1, params[i].n)));
  }
  while (has_unfinished()) {
    for (RequestOutput& o : step()) {
      RequestOutput& r = results[slot.at(o.request_id)];
      for (CompletionOutput& c : o.outputs)
        if (c.finished()) {
          c.new_token_ids.clear();
          c.new_logprobs.clear();
          c.new_top_logprobs.clear();
          c.new_text.clear();
          r.outputs[static_cast<size_t>(c.index)] = std::move(c);
        }
      if (o.finished) {
        r.finished = true;
        r.prompt_token_ids = std::move(o.prompt_token_ids);
        r.metrics = o.metrics;
      }
    }
  }
  for (RequestOutput& r : results) {  // a request rejected before sampling has one output
    auto last = std::remove_if(r.outputs.begin(), r.outputs.end(),
                               [](const CompletionOutput& c) { return !c.finished(); });
    r.outputs.erase(last, r.outputs.end());
  }
  return results;
}

}  // namespace titan::infer
