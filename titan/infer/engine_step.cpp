// Engine::run_step: one forward over the scheduled chunks, logits for the rows that
// sample, sampling, logprobs, stop checks.
#include <algorithm>
#include <cstring>

#include "titan/autograd/node.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/infer/engine.h"
#include "titan/infer/engine_request.h"
#include "titan/infer/sampler.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/ops/loss.h"

namespace titan::infer {

namespace kc = titan::kernels::cpu;

namespace {
template <typename T>
Tensor to_tensor(const std::vector<T>& v, Shape shape) {
  return Tensor::from_vector(v, shape);
}
}  // namespace

void Engine::run_step(const StepPlan& plan) {
  const auto& mc = model_.config();
  const int64_t B = cfg_.block_size, T = plan.num_tokens, S = static_cast<int64_t>(plan.chunks.size());
  const double t0 = now();

  // ---- the ForwardBatch of the generator path: flat tokens, block tables, slots.
  int64_t maxb = 1;
  for (const auto& c : plan.chunks) maxb = std::max<int64_t>(maxb, static_cast<int64_t>(c.seq->blocks.size()));
  std::vector<int32_t> tok(T), pos(T), sid(T), tables(S * maxb, 0), cu(S + 1, 0);
  std::vector<int64_t> slots(T), state_slots(S), snap_slots(S), snap_pos(S);
  int64_t t = 0, n_decode = 0, n_prefill = 0;
  for (int64_t i = 0; i < S; ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    Sequence& s = *c.seq;
    Request& r = *requests_.at(s.request_id);
    if (r.metrics.first_scheduled_time < 0) r.metrics.first_scheduled_time = t0;
    for (int64_t j = 0; j < c.count; ++j, ++t) {
      const int64_t p = c.start + j;
      tok[t] = s.tokens[p];
      pos[t] = static_cast<int32_t>(p);
      sid[t] = static_cast<int32_t>(i);
      slots[t] = static_cast<int64_t>(s.blocks[p / B]) * B + p % B;
    }
    std::copy(s.blocks.begin(), s.blocks.end(), tables.begin() + i * maxb);
    cu[i + 1] = static_cast<int32_t>(t);
    state_slots[i] = s.state_slot;
    snap_slots[i] = c.snapshot_slot;
    snap_pos[i] = c.snapshot_pos;
    if (c.count == 1 && c.start == s.len() - 1 && c.start >= s.num_prompt) ++n_decode;
    else n_prefill += c.count;
  }
  models::ForwardBatch fb;
  fb.tokens = to_tensor(tok, {T});
  fb.positions = to_tensor(pos, {T});
  fb.kv = &kv_;
  fb.block_tables = to_tensor(tables, {S, maxb});
  fb.seq_ids = to_tensor(sid, {T});
  fb.slot_mapping = to_tensor(slots, {T});
  fb.cu_seqlens = to_tensor(cu, {S + 1});
  if (states_.enabled()) {
    fb.state_slots = to_tensor(state_slots, {S});
    fb.snapshot_slots = to_tensor(snap_slots, {S});
    fb.snapshot_pos = to_tensor(snap_pos, {S});
    // Admitted sequences start from zeros or from their prefix's snapshot.
    for (const StateRestore& r : plan.restores)
      for (models::LayerCache& lc : kv_.layers)
        for (Tensor& st : lc.state) {
          const int64_t row = st.numel() / st.size(0);
          float* base = st.data<float>();
          if (r.src < 0) std::memset(base + r.dst * row, 0, sizeof(float) * row);
          else std::memcpy(base + r.dst * row, base + r.src * row, sizeof(float) * row);
        }
  }

  std::vector<Tensor> routed;  // MoE: each layer's (T, K) expert ids
  if (mc.is_moe()) fb.routed_experts = &routed;

  autograd::NoGradGuard no_grad;
  Tensor hidden;
  try {
    hidden = model_.forward(fb).contiguous();  // (T, D)
  } catch (const Error& e) {
    for (const auto& c : plan.chunks) {
      c.seq->error = e.what();
      sched_.remove(c.seq);
      finish_seq(*c.seq, FinishReason::error);
      touched_.push_back(c.seq->request_id);
    }
    return;
  }
  sched_.commit(plan);
  const double t_fwd = now();

  // ---- rows that sample: the last token of each sequence that reached its end.
  std::vector<int64_t> rows;
  std::vector<Sequence*> rseq;
  int64_t off = 0;
  for (const auto& c : plan.chunks) {
    off += c.count;
    if (c.start + c.count == c.seq->len()) {
      rows.push_back(off - 1);
      rseq.push_back(c.seq);
    }
  }
  const int64_t R = static_cast<int64_t>(rows.size()), D = mc.hidden_size;
  double t_logits = t_fwd, t_sample = t_fwd;
  if (R > 0) {
    Tensor H = Tensor::empty({R, D});
    for (int64_t r = 0; r < R; ++r)
      std::memcpy(H.data<float>() + r * D, hidden.data<float>() + rows[r] * D, D * sizeof(float));
    Tensor logits = model_.logits(H).contiguous();  // (R, V)
    const int64_t V = logits.size(1);
    t_logits = now();
    std::vector<int32_t> toks(R);
    std::vector<TopLogprobs> tops(R);
    const float* L = logits.data<float>();
    parallel_for(R, [&](int64_t r0, int64_t r1) {
      SamplerScratch scratch;
      for (int64_t r = r0; r < r1; ++r) {
        const Sequence& s = *rseq[r];
        const SamplingParams& sp = *s.params;
        // Only ids the tokenizer has are drawn or listed (sample_vocab_ <= V).
        toks[r] = sample_token(L + r * V, sample_vocab_, sp, s.seed, s.sample_index, s.len(), scratch);
        if (sp.logprobs > 0)
          tops[r] = top_logprobs(L + r * V, V, sp.logprob_temperature(), sp.logprobs, sample_vocab_);
      }
    });
    // ---- logprobs of the sampled tokens, temperature-scaled (greedy: 1.0).
    std::vector<float> lp(R);
    if (cfg_.logprobs_from_hidden) {
      // THE logprob function on the hidden rows, one call per distinct temperature.
      std::vector<double> temps;
      for (Sequence* s : rseq)
        if (std::find(temps.begin(), temps.end(), s->params->logprob_temperature()) == temps.end())
          temps.push_back(s->params->logprob_temperature());
      for (double temp : temps) {
        std::vector<int64_t> idx;
        for (int64_t r = 0; r < R; ++r)
          if (rseq[r]->params->logprob_temperature() == temp) idx.push_back(r);
        const int64_t G = static_cast<int64_t>(idx.size());
        Tensor Hg = H;
        std::vector<int32_t> tg(G);
        if (G != R) {
          Hg = Tensor::empty({G, D});
          for (int64_t g = 0; g < G; ++g)
            std::memcpy(Hg.data<float>() + g * D, H.data<float>() + idx[g] * D, D * sizeof(float));
        }
        for (int64_t g = 0; g < G; ++g) tg[g] = toks[idx[g]];
        Tensor out = model_.logprobs(Hg, to_tensor(tg, {G}), temp);
        const float* po = out.data<float>();
        for (int64_t g = 0; g < G; ++g) lp[idx[g]] = po[g];
      }
    } else {
      // The same kernel on the sampling logits, one call (rows split over the threads)
      // per run of rows with one temperature; rows never mix, so the bits are those of
      // one call per row.
      for (int64_t r0 = 0; r0 < R;) {
        const double temp = rseq[r0]->params->logprob_temperature();
        int64_t r1 = r0 + 1;
        while (r1 < R && rseq[r1]->params->logprob_temperature() == temp) ++r1;
        kc::logprobs_from_logits(&lp[r0], nullptr, L + r0 * V, &toks[r0], r1 - r0, V,
                                 static_cast<float>(1.0 / temp));
        r0 = r1;
      }
    }
    t_sample = now();
    for (int64_t r = 0; r < R; ++r) {
      for (const Tensor& ids : routed) {  // the sampling row's routing, MoE layers in order
        if (!ids.defined()) continue;
        const int64_t K = ids.size(1);
        const int32_t* p = ids.data<int32_t>() + rows[r] * K;
        rseq[r]->routed_experts.insert(rseq[r]->routed_experts.end(), p, p + K);
      }
      Request& req = *requests_.at(rseq[r]->request_id);
      if (req.metrics.first_token_time < 0) req.metrics.first_token_time = t_sample;
      append_token(*rseq[r], toks[r], lp[r], std::move(tops[r]));
      touched_.push_back(rseq[r]->request_id);
    }
  }
  const double t_end = now();
  stats_.prefill_tokens += n_prefill;
  stats_.decode_tokens += n_decode;
  stats_.sampled_tokens += R;
  stats_.forward_s += t_fwd - t0;
  stats_.logits_s += t_logits - t_fwd;
  stats_.sample_s += t_sample - t_logits;
  if (n_prefill > 0) {
    stats_.prefill_step_s += t_end - t0;
  } else {
    stats_.decode_step_s += t_end - t0;
    ++stats_.decode_steps;
    stats_.decode_only_tokens += n_decode;
  }
}

void Engine::append_token(Sequence& s, int32_t token, float logprob, TopLogprobs top) {
  const SamplingParams& p = *s.params;
  s.tokens.push_back(token);
  s.logprobs.push_back(logprob);
  if (p.logprobs > 0) s.top_logprobs.push_back(std::move(top));
  FinishReason reason = FinishReason::none;
  const bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  const bool eos = !p.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
  if (stop_id || eos) {  // stop tokens are not part of the text
    reason = FinishReason::stop;
    s.stop_reason = stop_id ? "token " + std::to_string(token) : "eos";
  } else {
    const size_t old = s.text.size();
    s.text += s.detok.push(token);
    if (!p.stop.empty() && s.text.size() > old) {
      size_t which = 0;
      const size_t at = find_stop_string(s.text, old, p.stop, &which);
      if (at != std::string::npos) {
        s.text.resize(p.include_stop_str_in_output ? at + p.stop[which].size() : at);
        s.stop_reason = p.stop[which];
        reason = FinishReason::stop;
      }
    }
  }
  if (reason == FinishReason::none) {
    if (s.num_generated() >= p.max_tokens) reason = FinishReason::length;
    else if (s.len() >= model_.config().max_position_embeddings) reason = FinishReason::length;
  }
  if (reason != FinishReason::none) {
    sched_.remove(&s);
    finish_seq(s, reason);
  }
}

}  // namespace titan::infer
