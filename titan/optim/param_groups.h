// Parameter descriptions for the optimizers: which parameters exist (HF-style dotted
// names), what kind each one is (norm weight, bias, embedding, output head, 2-D hidden
// matrix), and which ones get weight decay.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::optim {

// One trainable parameter: its full name ("model.layers.0.self_attn.q_proj.weight")
// and its fp32 master tensor (gradient in param.grad()).
struct ParamRef {
  std::string name;
  Tensor param;
};

// From nn::Module::named_parameters() (or any (name, tensor) list), order kept.
std::vector<ParamRef> to_param_refs(const std::vector<std::pair<std::string, Tensor>>& named);

enum class ParamKind {
  norm,       // RMSNorm/LayerNorm weight: "...norm.weight", "...layernorm.weight", "ln_f.weight"
  bias,       // "...bias"
  embedding,  // "embed_tokens.weight", "tok_embeddings.weight", "wte.weight", "wpe.weight"
  output,     // the output head: "lm_head.weight", "output.weight"
  matrix,     // any other 2-D weight: a hidden matrix (Muon-eligible)
  other,      // anything else (1-D non-norm vectors, scalars, ≥3-D tensors)
};
std::string_view param_kind_name(ParamKind k);

// Classifies by name and shape, in this order: last name component "bias" → bias;
// module name (the component before ".weight") containing "norm" or starting with
// "ln" → norm; module containing "embed" or equal to "wte"/"wpe" → embedding; module
// "lm_head" or "output" → output; 2-D → matrix; else other. The module name is the
// second-to-last component ("model.layers.0.input_layernorm.weight" → "input_layernorm").
ParamKind classify_param(std::string_view name, const Shape& shape);

// Which kinds get weight decay. Defaults: decay on hidden matrices and the output
// head; none on norms, biases and embeddings (TorchTitan/HF practice). nanoGPT's rule
// ("every tensor with dim >= 2 decays") is norms = biases = false, embeddings = true.
// `other` parameters decay iff they have dim >= 2 (nanoGPT's rule).
struct WeightDecayRules {
  bool decay_norms = false;
  bool decay_biases = false;
  bool decay_embeddings = false;
  bool decay_output = true;
};
bool gets_weight_decay(ParamKind kind, int64_t dim, const WeightDecayRules& rules);

// Muon applies to 2-D hidden matrices only (Keller Jordan et al. 2024: embeddings, the
// output head, norms and biases stay on AdamW).
inline bool is_muon_eligible(ParamKind kind, int64_t dim) {
  return kind == ParamKind::matrix && dim == 2;
}

}  // namespace titan::optim
