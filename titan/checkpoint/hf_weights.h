// Checks a Hugging Face checkpoint's tensors against its config.json before a
// model is built from it, so that a config promising more than the weights hold
// (num_hidden_layers: 1000000, a hidden_size of 10^9) fails in milliseconds with
// the field named, instead of allocating the model first and then reporting a
// missing tensor.
#pragma once
#include <string>

#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/sharded.h"

namespace titan {

// Reads tensor names (and the headers of the shards holding the tensors checked
// below), never tensor data. Throws titan::Error "config.json <source>: ..." when
//  - some layer i < num_hidden_layers has no tensor "model.layers.<i>.*";
//  - model.embed_tokens.weight (or lm_head.weight when only that is stored) is not
//    [vocab_size, hidden_size];
//  - layer 0's self_attn.{q,k}_proj.weight or mlp.gate_proj.weight, where present,
//    is not [num_attention_heads x head_dim | num_key_value_heads x head_dim |
//    intermediate_size, hidden_size].
// Shapes of the other tensors are checked when they are loaded (load_hf_state_dict).
void check_hf_weights_match_config(const HFConfig& c, const SafetensorsCheckpoint& weights,
                                   const std::string& source);

}  // namespace titan
