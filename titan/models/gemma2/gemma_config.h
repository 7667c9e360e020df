// The config.json fields Gemma 2 and Gemma 3 share (Gemma2Config / Gemma3TextConfig,
// in HFConfig::extra), read into and written from the decoder's variant flags.
#pragma once
#include <string>

#include "titan/checkpoint/hf_config.h"
#include "titan/models/common/config.h"

namespace titan::models {

// The HF class defaults of the fields that Gemma 2 and Gemma 3 set differently.
struct GemmaDefaults {
  double attn_logit_softcapping;   // Gemma 2: 50, Gemma 3: null (0)
  double final_logit_softcapping;  // Gemma 2: 30, Gemma 3: null (0)
  int64_t sliding_window_pattern;  // every n-th layer global: Gemma 2: 2, Gemma 3: 6
};

// Sets post_norms, norm_unit_offset, embedding_multiplier = sqrt(hidden_size) and reads
// attn_logit_softcapping, final_logit_softcapping (null = off), query_pre_attn_scalar
// (default 256), sliding_window (default 4096), hidden_activation (or hidden_act;
// default gelu_pytorch_tanh) and layer_types (default: sliding except every
// sliding_window_pattern-th layer). Throws titan::Error naming the field for a value of
// the wrong type, a sliding_window < 1, use_bidirectional_attention = true.
void read_gemma_fields(const HFConfig& hf, TransformerConfig& c, const GemmaDefaults& d);
// The same fields into h.extra (a soft-cap of 0 written as null).
void write_gemma_fields(const TransformerConfig& c, HFConfig& h);

// What every Gemma 2 / Gemma 3 flavor shares: sandwich norms, gain-centred RMSNorm
// (eps 1e-6), the GeGLU activation gelu_pytorch_tanh, a tied LM head, bos 2 / eos 1;
// `family` is the config's family name.
TransformerConfig gemma_base_config(const std::string& family);

}  // namespace titan::models
