// Named recipes: plain functions returning a complete JobConfig (TorchTitan's
// config_registry functions). A recipe derives from another by calling it and
// changing fields:
//
//   JobConfig debugmodel() {
//     JobConfig c = shakespeare_char();
//     c.model.n_layers = 2;
//     return c;
//   }
//
// Built-in recipes are listed in the table in recipes.cpp (one line each, so that
// they survive static linking); register_recipe() adds more at run time.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "titan/config/job_config.h"

namespace titan::config {

struct Recipe {
  std::string name;
  std::string doc;  // one line; also the recipe's default job.description
  std::function<JobConfig()> make;
};

// All recipes, sorted by name.
std::vector<Recipe> list_recipes();

// Adds a recipe; throws titan::Error if the name is taken or empty.
void register_recipe(Recipe recipe);

// The config of recipe `name`, with job.dump_folder defaulted to outputs/<name>
// and job.description to the recipe's doc when the recipe leaves them empty.
// Throws titan::Error "unknown recipe 'x' (did you mean 'y'?; available: a, b)".
JobConfig make_recipe(const std::string& name);

// The built-in recipes, callable directly for derivation.
JobConfig shakespeare_char();   // nanoGPT's baby GPT on Tiny Shakespeare, byte tokens
JobConfig debugmodel();         // shakespeare_char shrunk to a seconds-long smoke run
JobConfig qwen3_debugmodel();   // debugmodel as a Qwen3 model with the Qwen3 BPE tokenizer
JobConfig alphabet_sort_sft();  // small Qwen3-style chat model trained on alphabet_sort demonstrations
JobConfig alphabet_sort_grpo(); // GRPO on alphabet_sort from the alphabet_sort_sft export (rl_recipes.cpp)
JobConfig alphabet_sort_hybrid_sft();   // alphabet_sort_sft on a Qwen3-Next hybrid (hybrid_recipes.cpp)
JobConfig alphabet_sort_hybrid_grpo();  // alphabet_sort_grpo from the alphabet_sort_hybrid_sft export
JobConfig kimi_linear_debugmodel();     // debugmodel as a Kimi Linear hybrid (hybrid_recipes.cpp)
JobConfig alphabet_sort_moe_sft();   // alphabet_sort_sft on a small Qwen3-MoE chat model (rl_recipes.cpp)
JobConfig alphabet_sort_moe_grpo();  // GRPO from the alphabet_sort_moe_sft export (rl_recipes.cpp)
JobConfig tool_use_sft();       // the alphabet_sort_sft model on tool_use demonstrations (tool_use_recipes.cpp)
JobConfig tool_use_grpo();      // GRPO on tool_use from the tool_use_sft export (tool_use_recipes.cpp)
JobConfig compaction_sft();     // the alphabet_sort_sft model on running-list episodes with summaries (compaction_recipes.cpp)
JobConfig compaction_grpo();    // GRPO on compaction from the compaction_sft export (compaction_recipes.cpp)
JobConfig long_context_warmup_sft();  // SFT stage 1: the needle line alone, from scratch (long_context_recipes.cpp)
JobConfig long_context_sft();   // SFT stage 2: the needle among 1-4 filler lines (long_context_recipes.cpp)
JobConfig long_context_grpo();  // GRPO on long_context from the long_context_sft export (long_context_recipes.cpp)
JobConfig self_play_sft();      // the alphabet_sort_sft model on Nim games of random moves (self_play_recipes.cpp)
JobConfig self_play_grpo();     // GRPO self-play on Nim from the self_play_sft export (self_play_recipes.cpp)

// The common part of a chat workload's recipe pair (rl_recipes.cpp). workload_sft(TASK,
// TASK_CONFIG): alphabet_sort_sft's model (flavor "<TASK>_sft") trained from scratch on
// TASK's demonstrations (training.task, training.task_config), 2 rows per step, metrics
// every 50 steps. workload_grpo(TASK, TASK_CONFIG): alphabet_sort_grpo on environment TASK
// with the same config from "outputs/<TASK>_sft/hf", lr 1e-4, group 8, no overlong
// penalty, 4096-token microbatches. The callers set lengths, steps and sample counts.
JobConfig workload_sft(const std::string& task, const std::string& task_config);
JobConfig workload_grpo(const std::string& task, const std::string& task_config);

}  // namespace titan::config
