#include "titan/config/recipes.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "titan/config/field_text.h"
#include "titan/core/error.h"

namespace titan::config {

// nanoGPT config/train_shakespeare_char.py with the README's CPU "baby GPT"
// settings (block_size 64, batch 12, 4 layers, 4 heads, n_embd 128, 2000 iters,
// lr_decay_iters 2000, dropout 0), as a Llama-style decoder over byte tokens.
JobConfig shakespeare_char() {
  JobConfig c;
  c.job.description = "nanoGPT shakespeare_char baby GPT: 4 layers, 4 heads, dim 128, byte tokens, context 64";
  c.model.name = "llama3";
  c.model.flavor = "shakespeare_char";
  c.model.tokenizer_path = "";  // byte-level
  c.model.vocab_size = 0;  // the byte tokenizer: 256 bytes + 3 specials
  c.model.dim = 128;
  c.model.n_layers = 4;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 4;
  c.model.head_dim = 0;
  c.model.ffn_hidden_dim = 512;  // nanoGPT's 4 × dim (also Llama's SwiGLU rounding of 8/3 × dim to 256)
  c.model.rope_theta = 10000.0;
  c.model.norm_eps = 1e-5;
  c.model.tie_embeddings = true;  // nanoGPT ties wte and lm_head
  c.model.qk_norm = false;
  // nanoGPT's init (normal 0.02, residual outputs 0.02/sqrt(2L)): TorchTitan's llama3
  // init draws the tied matrix with std dim^-0.5, which starts the loss at ~10 instead
  // of ln(259) = 5.56 (each token's own logit begins near sqrt(dim)).
  c.model.init = ModelInit::gpt2;
  c.training.dataset = "text";
  c.training.dataset_path = "tinyshakespeare/input.txt";
  c.training.seq_len = 64;
  c.training.local_batch_size = 12;
  c.training.global_batch_size = 0;
  c.training.steps = 2000;
  c.training.max_norm = 1.0;
  c.training.seed = 1337;
  c.validation.enabled = true;
  c.validation.split_fraction = 0.1;  // first 90% train, last 10% validation
  c.validation.freq = 250;
  c.validation.steps = 20;
  c.optimizer.name = OptimizerName::adamw;
  c.optimizer.lr = 1e-3;
  c.optimizer.beta1 = 0.9;
  c.optimizer.beta2 = 0.99;
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = 0.1;
  c.lr_scheduler.warmup_steps = 100;
  c.lr_scheduler.decay_type = DecayType::cosine;
  c.lr_scheduler.min_lr = 1e-4;
  c.metrics.log_freq = 10;
  return c;
}

JobConfig debugmodel() {
  JobConfig c = shakespeare_char();
  c.job.description = "tiny smoke run: shakespeare_char data, 2-layer dim-64 GQA model, 10 steps";
  c.model.flavor = "debugmodel";
  c.model.init = ModelInit::family;  // TorchTitan's init, as for every flavor but shakespeare_char
  c.model.dim = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.ffn_hidden_dim = 192;
  c.training.seq_len = 32;
  c.training.local_batch_size = 4;
  c.training.steps = 10;
  c.validation.freq = 5;
  c.validation.steps = 2;
  c.lr_scheduler.warmup_steps = 2;
  c.metrics.log_freq = 1;
  c.checkpoint.interval = 5;
  return c;
}

JobConfig qwen3_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as Qwen3 (q/k RMSNorm, head_dim != dim/heads) with the Qwen3 BPE tokenizer";
  c.model.name = "qwen3";
  c.model.tokenizer_path = "qwen3-tokenizer/tokenizer.json";
  c.model.vocab_size = 0;  // from the tokenizer
  c.model.head_dim = 32;
  c.model.qk_norm = true;
  c.model.norm_eps = 1e-6;
  c.model.rope_theta = 1e6;
  c.model.tie_embeddings = true;
  return c;
}

// debugmodel as a Qwen3-Next hybrid: 3 Gated DeltaNet layers + 1 gated full-attention
// layer, dim 64, byte tokens, from the shipped HF config.json
// (recipes/qwen3_next_debugmodel.json).
JobConfig qwen3_next_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as a Qwen3-Next hybrid (Gated DeltaNet + gated attention), byte tokens";
  c.model.name = "qwen3_next";
  c.model.hf_config = "recipes/qwen3_next_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// debugmodel as the Qwen3.5 text model: Qwen3-Next's hybrid layout with dense MLPs,
// dim 64, byte tokens, from the shipped HF config.json (recipes/qwen3_5_debugmodel.json).
JobConfig qwen3_5_debugmodel() {
  JobConfig c = qwen3_next_debugmodel();
  c.job.description = "debugmodel as the Qwen3.5 text model (Gated DeltaNet + gated attention), byte tokens";
  c.model.name = "qwen3_5";
  c.model.hf_config = "recipes/qwen3_5_debugmodel.json";
  return c;
}

// debugmodel as Gemma 2: 4 layers alternating sliding window 32 / global, attention and
// final logit soft-caps, sandwich norms, GeGLU, dim 64, byte tokens, from the shipped HF
// config.json (recipes/gemma2_debugmodel.json).
JobConfig gemma2_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as Gemma 2 (local/global attention, soft-caps, sandwich norms), byte tokens";
  c.model.name = "gemma2";
  c.model.hf_config = "recipes/gemma2_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// debugmodel as DeepSeek-V3 with every feed-forward dense: 4 MLA layers (YaRN RoPE,
// q low-rank), dim 64, byte tokens, from the shipped HF config.json
// (recipes/deepseek_v3_dense_debugmodel.json; first_k_dense_replace = num_hidden_layers).
// debugmodel as DeepSeek-V3: 4 MLA layers (YaRN RoPE, q low-rank), layer 0 dense, then
// MoE layers of 8 routed experts (sigmoid router, 2 groups, top-2, 1 shared expert),
// dim 64, byte tokens (recipes/deepseek_v3_debugmodel.json).
JobConfig deepseek_v3_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as DeepSeek-V3 (MLA, YaRN, one dense layer then 8-expert MoE), byte tokens";
  c.model.name = "deepseek_v3";
  c.model.hf_config = "recipes/deepseek_v3_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// debugmodel as DeepSeek-V3.2: deepseek_v3_debugmodel's layers with DeepSeek sparse
// attention (a lightning indexer of 4 heads of 32 dims keeping 16 of the 32 keys per query)
// (recipes/deepseek_v32_debugmodel.json).
JobConfig deepseek_v32_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as DeepSeek-V3.2 (MLA + DeepSeek sparse attention, YaRN, MoE), byte tokens";
  c.model.name = "deepseek_v32";
  c.model.hf_config = "recipes/deepseek_v32_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

JobConfig deepseek_v3_dense_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as DeepSeek-V3 with dense feed-forwards (MLA, YaRN), byte tokens";
  c.model.name = "deepseek_v3";
  c.model.hf_config = "recipes/deepseek_v3_dense_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// debugmodel as gpt-oss: 4 layers of dim 64 alternating sliding window 16 / full
// attention with sinks and q/k/v/o biases, YaRN RoPE, every layer 8 biased experts (2 per
// token, softmax over the top-2 logits, clamped SwiGLU), byte tokens, from the shipped HF
// config.json (recipes/gpt_oss_debugmodel.json).
JobConfig gpt_oss_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as gpt-oss (sinks, alternating sliding window, 8-expert MoE), byte tokens";
  c.model.name = "gpt_oss";
  c.model.hf_config = "recipes/gpt_oss_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// debugmodel as Qwen3-MoE: 4 layers of dim 64 (layer 0 dense, then 8 experts of width
// 64, 2 per token), byte tokens, from the shipped HF config.json
// (recipes/qwen3_moe_debugmodel.json).
JobConfig qwen3_moe_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as Qwen3-MoE (8 experts, 2 per token, one dense layer first), byte tokens";
  c.model.name = "qwen3_moe";
  c.model.hf_config = "recipes/qwen3_moe_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// debugmodel as Llama 4: chunked attention (chunks of 16 of the 32-token sequences) on
// three RoPE layers, one NoPE layer, MoE (4 experts, top-1 sigmoid, shared expert) on
// layers 1 and 3 (recipes/llama4_debugmodel.json).
JobConfig llama4_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as Llama 4 (chunked attention, NoPE layer, top-1 MoE + shared expert), byte tokens";
  c.model.name = "llama4";
  c.model.hf_config = "recipes/llama4_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

// A small Qwen3-style chat model (q/k RMSNorm, GQA, tied embeddings) trained from
// scratch on alphabet_sort demonstrations (rl/sft_data.h: loss on the assistant's
// tokens only) with the byte_chat tokenizer; the starting policy of alphabet_sort_grpo.
// The HF export (outputs/alphabet_sort_sft/hf) names its tokenizer in
// titan_tokenizer.txt, so load_hf_model reloads it. Sized to train in about 3
// minutes on the 2-core machine (docs/benchmarks-history.md, "RL rollouter + SFT").
JobConfig alphabet_sort_sft() {
  JobConfig c;
  c.job.description = "alphabet_sort SFT: Qwen3-style 2-layer dim-128 chat model on byte_chat tokens, from scratch";
  c.model.name = "qwen3";
  c.model.flavor = "alphabet_sort_sft";
  c.model.tokenizer_path = "byte_chat";
  c.model.vocab_size = 0;  // byte_chat: 256 bytes + 7 specials
  c.model.dim = 128;
  c.model.n_layers = 2;  // 2 layers learn as much per step as 4 here, at ~40% of the cost
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 32;
  c.model.ffn_hidden_dim = 384;
  c.model.rope_theta = 10000.0;
  c.model.norm_eps = 1e-6;
  c.model.tie_embeddings = true;
  c.model.qk_norm = true;
  c.training.dataset = "rl_task_sft";
  c.training.dataset_path = "";
  c.training.task = "alphabet_sort";
  // 2-4 names, one turn, names drawn from a pool of 16 first x 16 last names
  // (name_pool): with all ~330 x ~330 names this 2-layer model does not learn to copy
  // names in a few minutes (greedy reward 0.27); with the pool it copies most of them
  // and ordering errors are what is left (greedy reward ~0.58), which RL can improve.
  // Reward = TitanRL's text similarity (difflib ratio of the joined name lines,
  // character level) to the power 1, so partly right answers get partial credit.
  // The teacher is sloppy on purpose (sft_untagged_frac): 60 % of its demonstrations give
  // the sorted names without the <alphabetical_sorted> block the prompt asks for, which the
  // reward scores 0, so the SFT policy leaves the block out as often and GRPO has an error
  // that sampling avoids in about 4 of 10 rollouts to learn from (docs/benchmarks.md, "Main job").
  c.training.task_config =
      R"({"num_samples": 20256, "num_validation": 256, "min_names": 2, "max_names": 4, "similarity": "text", "similarity_power": 1, "name_pool": 16, "sft_untagged_frac": 0.6})";
  c.training.seq_len = 1024;
  c.training.local_batch_size = 2;  // ~6 demonstrations per step: more steps per minute
  c.training.global_batch_size = 0;
  c.training.steps = 800;
  c.training.max_norm = 1.0;
  c.training.seed = 1234;
  c.validation.enabled = true;
  c.validation.freq = 200;
  c.validation.steps = 4;
  c.optimizer.name = OptimizerName::adamw;
  c.optimizer.lr = 4e-3;
  c.optimizer.beta1 = 0.9;
  c.optimizer.beta2 = 0.95;
  c.optimizer.weight_decay = 0.1;
  c.lr_scheduler.warmup_steps = 40;
  c.lr_scheduler.decay_type = DecayType::cosine;
  c.lr_scheduler.min_lr = 4e-4;
  c.metrics.log_freq = 50;
  c.checkpoint.enable = false;
  c.checkpoint.export_hf = true;
  return c;
}

namespace {

struct Registry {
  std::mutex mu;
  std::vector<Recipe> recipes{
      {"alphabet_sort_sft", "alphabet_sort SFT from scratch: small Qwen3-style chat model, byte_chat tokens, ~3 min",
       alphabet_sort_sft},
      {"alphabet_sort_grpo", "GRPO on alphabet_sort from the alphabet_sort_sft export (titan rl), ~5 min",
       alphabet_sort_grpo},
      {"deepseek_v3_debugmodel", "debugmodel as DeepSeek-V3 (MLA, YaRN RoPE, one dense layer then MoE)",
       deepseek_v3_debugmodel},
      {"deepseek_v3_dense_debugmodel", "debugmodel as DeepSeek-V3 (MLA, YaRN RoPE) with dense feed-forwards",
       deepseek_v3_dense_debugmodel},
      {"deepseek_v32_debugmodel", "debugmodel as DeepSeek-V3.2 (MLA + DeepSeek sparse attention, then MoE)",
       deepseek_v32_debugmodel},
      {"alphabet_sort_hybrid_sft", "alphabet_sort SFT on a Qwen3-Next hybrid (Gated DeltaNet + attention), byte_chat",
       alphabet_sort_hybrid_sft},
      {"alphabet_sort_hybrid_grpo", "GRPO on alphabet_sort from the alphabet_sort_hybrid_sft export (hybrid policy)",
       alphabet_sort_hybrid_grpo},
      {"alphabet_sort_moe_sft", "alphabet_sort SFT from scratch on a small Qwen3-MoE chat model (8 experts, top-2)",
       alphabet_sort_moe_sft},
      {"alphabet_sort_moe_grpo", "GRPO on alphabet_sort from the alphabet_sort_moe_sft export (titan rl)",
       alphabet_sort_moe_grpo},
      {"debugmodel", "tiny smoke run: shakespeare_char data, 2-layer dim-64 GQA model, 10 steps", debugmodel},
      {"gemma2_debugmodel", "debugmodel as Gemma 2 (local/global attention, soft-caps, sandwich norms)",
       gemma2_debugmodel},
      {"gpt_oss_debugmodel", "debugmodel as gpt-oss (sinks, alternating sliding window, 8-expert MoE)",
       gpt_oss_debugmodel},
      {"kimi_linear_debugmodel", "debugmodel as a Kimi Linear hybrid (Kimi Delta Attention + GQA)",
       kimi_linear_debugmodel},
      {"qwen3_debugmodel", "debugmodel as Qwen3 with the Qwen3 BPE tokenizer", qwen3_debugmodel},
      {"qwen3_5_debugmodel", "debugmodel as the Qwen3.5 text model (Gated DeltaNet + gated attention)",
       qwen3_5_debugmodel},
      {"qwen3_next_debugmodel", "debugmodel as a Qwen3-Next hybrid (Gated DeltaNet + gated attention)",
       qwen3_next_debugmodel},
      {"qwen3_moe_debugmodel", "debugmodel as Qwen3-MoE (8 experts, 2 per token)", qwen3_moe_debugmodel},
      {"llama4_debugmodel", "debugmodel as Llama 4 (iRoPE: chunked + NoPE layers, top-1 MoE + shared expert)",
       llama4_debugmodel},
      {"shakespeare_char", "nanoGPT's CPU baby GPT on Tiny Shakespeare (bytes, 2000 steps)", shakespeare_char},
      {"tool_use_sft", "tool_use SFT: search/calculator/python calls on a generated knowledge base", tool_use_sft},
      {"tool_use_grpo", "GRPO on tool_use from the tool_use_sft export (titan rl)", tool_use_grpo},
      {"compaction_sft", "compaction SFT: running sorted lists that outgrow the context, with summaries", compaction_sft},
      {"compaction_grpo", "GRPO on compaction from the compaction_sft export (titan rl)", compaction_grpo},
      {"long_context_warmup_sft", "long_context SFT stage 1: the needle line alone, from scratch", long_context_warmup_sft},
      {"long_context_sft", "long_context SFT stage 2: the needle among 1-4 filler lines, from long_context_warmup_sft",
       long_context_sft},
      {"long_context_grpo", "GRPO on long_context from the long_context_sft export (titan rl)", long_context_grpo},
      {"self_play_sft", "self_play SFT: Nim games of random legal moves (format and legal moves)", self_play_sft},
      {"self_play_grpo", "GRPO self-play on Nim from the self_play_sft export (titan rl)", self_play_grpo},
  };
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::vector<Recipe> list_recipes() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<Recipe> out = r.recipes;
  std::sort(out.begin(), out.end(), [](const Recipe& a, const Recipe& b) { return a.name < b.name; });
  return out;
}

void register_recipe(Recipe recipe) {
  TITAN_CHECK(!recipe.name.empty() && recipe.make, "register_recipe: recipe needs a name and a function");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const auto& x : r.recipes)
    TITAN_CHECK(x.name != recipe.name, "register_recipe: recipe '{}' is already registered", recipe.name);
  r.recipes.push_back(std::move(recipe));
}

JobConfig make_recipe(const std::string& name) {
  std::vector<Recipe> all = list_recipes();
  for (const auto& r : all) {
    if (r.name != name) continue;
    JobConfig c = r.make();
    if (c.job.dump_folder.empty()) c.job.dump_folder = "outputs/" + name;
    if (c.job.description.empty()) c.job.description = r.doc;
    return c;
  }
  std::vector<std::string> names;
  for (const auto& r : all) names.push_back(r.name);
  std::string near = nearest_key(names, name);
  fail("unknown recipe '{}' ({}available: {})", name, near.empty() ? "" : fmt::format("did you mean '{}'?; ", near),
       fmt::join(names, ", "));
}

}  // namespace titan::config
