// long_context at one context length: the long_context_sft model shape (qwen3, 2
// layers, dim 128, byte_chat tokens; random weights: time and memory do not depend on
// them) generates 8 greedy tokens for one long_context prompt of ~L tokens (chunked
// prefill, max_num_batched_tokens 2048, paged KV pool), then the trainer runs
// policy_update_backward on that turn as one packed sequence. One length per process,
// so the peak RSS is this length's.
//
//   build/bench/long_context_bench 4096      # prints one line: L, prompt tokens,
//                                            # prefill+decode s, tokens/s, train s,
//                                            # train tokens/s, peak RSS MB, logprob diff
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "titan/data/tokenizer.h"
#include "titan/infer/engine.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/rl/long_context.h"
#include "titan/rl/policy_update.h"
#include "titan/rl/rollouter.h"
#include "titan/train/metrics.h"

using namespace titan;

int main(int argc, char** argv) {
  const int64_t target = argc > 1 ? std::atoll(argv[1]) : 4096;
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  const int pairs = std::max<int>(1, static_cast<int>((target - 60) / 11.9));
  const rl::TaskSpec task = rl::make_task(
      "long_context", nlohmann::json{{"min_pairs", pairs}, {"max_pairs", pairs}, {"num_samples", 2}, {"num_validation", 1}});
  const rl::TaskSample s = task.train->get(0);
  const std::vector<int32_t> prompt = rl::render_prompt_ids(*tok, task.make_env()->init(s), false);
  const int64_t P = static_cast<int64_t>(prompt.size());

  models::TransformerConfig cfg = models::flavor("qwen3", "debugmodel");
  cfg.vocab_size = tok->vocab_size();
  cfg.hidden_size = 128;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 32;
  cfg.intermediate_size = 384;
  cfg.tie_word_embeddings = true;
  cfg.max_position_embeddings = P + 64;
  models::Decoder model(cfg);
  model.init_weights(1);

  infer::EngineConfig ec;
  ec.kv_cache_bytes = int64_t{256} << 20;
  ec.max_num_batched_tokens = 2048;
  infer::Engine engine(model, tok.get(), ec);
  infer::SamplingParams sp;
  sp.temperature = 0.0;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  sp.detokenize = false;
  const auto t0 = std::chrono::steady_clock::now();
  engine.add_request(prompt, sp);
  rl::TokenRollout r;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& o : engine.step())
      if (o.finished) {
        rl::TurnTokens t;
        t.prompt_ids = prompt;
        t.completion_ids = o.outputs[0].token_ids;
        t.logprobs = o.outputs[0].logprobs;
        r.turns.push_back(std::move(t));
      }
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  rl::PolicyUpdateSettings us;
  us.microbatch_tokens = P + 64;
  model.zero_grad();
  const rl::PolicyUpdateStats st = rl::policy_update_backward(model, nullptr, {&r}, {1.0}, us);
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::printf("L %lld | prompt %lld tokens | prefill+decode %.3f s, %.0f tokens/s | train fwd+bwd %.3f s, %.0f tokens/s | "
              "peak RSS %.1f MB | logprob_diff_max %g\n",
              static_cast<long long>(target), static_cast<long long>(P), gen_s, static_cast<double>(P + 8) / gen_s,
              train_s, static_cast<double>(st.packed_tokens) / train_s, train::peak_rss_mb(), st.logprob_diff_max);
  return 0;
}
