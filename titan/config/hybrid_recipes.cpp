// Recipes of the hybrid linear-attention models.
//
// kimi_linear_debugmodel: debugmodel as a Kimi Linear hybrid (3 Kimi Delta Attention
// layers + 1 GQA layer, dim 64, byte tokens) from the shipped config
// recipes/kimi_linear_debugmodel.json.
//
// The alphabet_sort pair on a hybrid linear-attention model (Qwen3-Next layout: 3 Gated
// DeltaNet layers + 1 gated full-attention layer, dim 128, byte_chat tokens, from the
// shipped HF config recipes/alphabet_sort_hybrid.json). Everything else is the
// alphabet_sort_sft / alphabet_sort_grpo recipe: the same task, samples, optimizer and
// RL settings, so the two pairs compare a hybrid against a pure-attention policy. The
// generator decodes the GDN layers from per-sequence state slots with the trainer's
// arithmetic (docs/linear-attention.md), so logprob_diff_max stays 0.0.
#include "titan/config/recipes.h"

namespace titan::config {

JobConfig kimi_linear_debugmodel() {
  JobConfig c = debugmodel();
  c.job.description = "debugmodel as a Kimi Linear hybrid (Kimi Delta Attention + GQA), byte tokens";
  c.model.name = "kimi_linear";
  c.model.hf_config = "recipes/kimi_linear_debugmodel.json";
  c.training.steps = 30;
  c.validation.freq = 10;
  c.checkpoint.interval = 10;
  return c;
}

JobConfig alphabet_sort_hybrid_sft() {
  JobConfig c = alphabet_sort_sft();
  c.job.description =
      "alphabet_sort SFT on a Qwen3-Next hybrid (3 Gated DeltaNet + 1 gated attention layer, dim 128), byte_chat";
  c.model.name = "qwen3_next";
  c.model.flavor = "";
  c.model.hf_config = "recipes/alphabet_sort_hybrid.json";
  return c;
}

JobConfig alphabet_sort_hybrid_grpo() {
  JobConfig c = alphabet_sort_grpo();
  c.job.description = "GRPO on alphabet_sort from the alphabet_sort_hybrid_sft checkpoint (hybrid GDN policy)";
  c.model = alphabet_sort_hybrid_sft().model;
  c.rl.init_from = "outputs/alphabet_sort_hybrid_sft/hf";
  return c;
}

}  // namespace titan::config
