#include "titan/models/common/decoder.h"

#include <cmath>

#include "titan/autograd/checkpoint.h"
#include "titan/nn/hooks.h"
#include "titan/autograd/node.h"
#include "titan/core/philox.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/ops/matmul.h"

namespace titan::models {

void TransformerConfig::validate() const {
  auto pos = [](const char* f, int64_t v) {
    TITAN_CHECK(v > 0, "model config: {} must be > 0, got {}", f, v);
  };
  pos("vocab_size", vocab_size);
  pos("hidden_size", hidden_size);
  pos("intermediate_size", intermediate_size);
  pos("num_hidden_layers", num_hidden_layers);
  pos("num_attention_heads", num_attention_heads);
  pos("num_key_value_heads", num_key_value_heads);
  pos("head_dim", head_dim);
  pos("max_position_embeddings", max_position_embeddings);
  TITAN_CHECK(num_attention_heads % num_key_value_heads == 0,
              "model config: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
              num_attention_heads, num_key_value_heads);
  TITAN_CHECK(head_dim % 8 == 0, "model config: head_dim must be a multiple of 8, got {}", head_dim);
  TITAN_CHECK(family == "llama3" || family == "qwen3",
              "model config: unknown family '{}' (expected llama3 or qwen3)", family);
}

int64_t TransformerConfig::num_params() const {
  const int64_t D = hidden_size, L = num_hidden_layers;
  int64_t attn = D * num_attention_heads * head_dim * 2 + D * num_key_value_heads * head_dim * 2;
  if (attention_bias) attn += (num_attention_heads + 2 * num_key_value_heads) * head_dim;
  if (qk_norm) attn += 2 * head_dim;
  int64_t block = attn + 3 * D * intermediate_size + 2 * D;
  int64_t n = vocab_size * D + L * block + D;
  if (!tie_word_embeddings) n += vocab_size * D;
  return n;
}

double TransformerConfig::train_flops_per_token(int64_t seq_len) const {
  // Matmul params: everything but norms and the input embedding (the LM head counts;
  // when tied it is the embedding matrix used as a matmul).
  const int64_t D = hidden_size, L = num_hidden_layers;
  double matmul = static_cast<double>(L) * (D * num_attention_heads * head_dim * 2 +
                                            D * num_key_value_heads * head_dim * 2 +
                                            3.0 * D * intermediate_size) +
                  static_cast<double>(vocab_size) * D;
  return 6.0 * matmul + 6.0 * L * num_attention_heads * 2.0 * head_dim * seq_len;
}

ForwardBatch make_packed_batch(const std::vector<std::vector<int32_t>>& docs) {
  TITAN_CHECK(!docs.empty(), "make_packed_batch: no documents");
  std::vector<int32_t> toks, pos, cu{0};
  for (size_t d = 0; d < docs.size(); ++d) {
    TITAN_CHECK(!docs[d].empty(), "make_packed_batch: document {} is empty", d);
    for (size_t i = 0; i < docs[d].size(); ++i) {
      toks.push_back(docs[d][i]);
      pos.push_back(static_cast<int32_t>(i));
    }
    cu.push_back(static_cast<int32_t>(toks.size()));
  }
  ForwardBatch b;
  const int64_t T = static_cast<int64_t>(toks.size());
  b.tokens = Tensor::from_vector(toks, {T});
  b.positions = Tensor::from_vector(pos, {T});
  b.cu_seqlens = Tensor::from_vector(cu, {static_cast<int64_t>(cu.size())});
  return b;
}

Decoder::Decoder(const TransformerConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  tok_embeddings = register_module("tok_embeddings", std::make_unique<Embedding>(cfg.vocab_size, cfg.hidden_size));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    layers.push_back(register_module("layers." + std::to_string(l),
                                     std::make_unique<TransformerBlock>(cfg, static_cast<int>(l))));
  norm = register_module("norm", std::make_unique<RMSNorm>(cfg.hidden_size, cfg.rms_norm_eps));
  if (!cfg.tie_word_embeddings)
    output = register_module("output", std::make_unique<Linear>(cfg.hidden_size, cfg.vocab_size, false));
  rope_ = build_rope_tables(cfg_);
}

void Decoder::repack_for_decode() {
  for (TransformerBlock* b : layers)
    for (Linear* l : {b->attention->wq, b->attention->wk, b->attention->wv, b->attention->wo,
                      b->feed_forward->w1, b->feed_forward->w2, b->feed_forward->w3})
      l->repack_for_decode();
  if (output)
    output->repack_for_decode();
  else
    tok_embeddings->repack_for_decode();
}

bool Decoder::lm_head_repacked() const {
  return output ? output->repacked() : tok_embeddings->repacked();
}

const Tensor& Decoder::lm_head() const {
  return output ? output->weight : tok_embeddings->weight;
}

Tensor Decoder::lm_head_weight() const {
  TITAN_CHECK(!lm_head_repacked(),
              "Decoder::lm_head_weight: the LM head is repacked for inference "
              "(Decoder::repack_for_decode); use Decoder::logits or Decoder::logprobs");
  return lm_head();
}

Tensor Decoder::logits(const Tensor& hidden) const {
  return lm_head_repacked() ? linear_panels(hidden, lm_head(), cfg_.vocab_size)
                            : linear(hidden, lm_head());
}

Tensor Decoder::logprobs(const Tensor& hidden, const Tensor& targets, double temperature) const {
  return lm_head_repacked()
             ? logprobs_panels(hidden, lm_head(), cfg_.vocab_size, targets, temperature)
             : titan::logprobs(hidden, lm_head(), targets, temperature);
}

Tensor Decoder::forward(const ForwardBatch& batch) const {
  const int64_t T = batch.num_tokens();
  TITAN_CHECK(T > 0, "Decoder::forward: empty batch");
  TITAN_CHECK(batch.positions.defined() && batch.positions.numel() == T,
              "Decoder::forward: positions must have {} entries", T);
  TITAN_CHECK(batch.tokens.dtype() == DType::i32 && batch.positions.dtype() == DType::i32,
              "Decoder::forward: tokens and positions must be i32");
  const int32_t* pp = batch.positions.data<int32_t>();
  for (int64_t i = 0; i < T; ++i)
    TITAN_CHECK(pp[i] >= 0 && pp[i] < cfg_.max_position_embeddings,
                "Decoder::forward: position {} at token {} is outside the model's context [0, {})",
                pp[i], i, cfg_.max_position_embeddings);
  Tensor h = tok_embeddings->forward(batch.tokens);
  for (auto* layer : layers) {
    if (activation_checkpoint == ActivationCheckpoint::full && autograd::GradMode::enabled() &&
        !batch.is_paged()) {
      // The recompute runs in backward, after this loop: capture the layer and the
      // batch (Tensor handles) by value, not the loop variable by reference.
      h = autograd::checkpoint(
          [this, layer, batch](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{
                nn::call_forward(*layer, [&] { return layer->forward(in[0], batch, rope_); })};
          },
          {h})[0];
    } else {
      h = nn::call_forward(*layer, [&] { return layer->forward(h, batch, rope_); });
    }
  }
  return norm->forward(h);
}

namespace {
// Normal(0, std) truncated to [a*std, b*std] by rejection, from Philox keyed by
// (seed, stream = parameter index): element i tries counters (i, attempt).
void fill_normal(Tensor& t, double std, double trunc, uint64_t seed, uint64_t stream) {
  autograd::NoGradGuard ng;
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    for (uint64_t attempt = 0;; ++attempt) {
      auto r = philox_draw(seed ^ (stream * 0x9E3779B97F4A7C15ull), static_cast<uint64_t>(i) | (attempt << 40), stream);
      float z = box_muller(r[0], r[1]);
      if (trunc <= 0 || std::fabs(z) <= trunc) {
        p[i] = static_cast<float>(z * std);
        break;
      }
    }
  }
}
}  // namespace

void Decoder::init_weights(uint64_t seed, InitScheme scheme) {
  const double L = static_cast<double>(cfg_.num_hidden_layers);
  uint64_t stream = 0;
  for (auto& [name, t] : named_parameters()) {
    ++stream;
    Tensor p = t;
    const bool is_norm = name.find("norm") != std::string::npos;
    if (is_norm) {
      p.fill_(1.0);
      continue;
    }
    if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") {
      p.fill_(0.0);
      continue;
    }
    int layer = -1;
    if (name.rfind("layers.", 0) == 0) layer = std::stoi(name.substr(7));
    const bool residual_out = name.find(".wo.") != std::string::npos || name.find(".w2.") != std::string::npos;
    if (cfg_.family == "qwen3" || scheme == InitScheme::gpt2) {
      // Qwen3 (TorchTitan) and GPT-2/nanoGPT: normal(0.02) everywhere; residual outputs 0.02/sqrt(2L).
      double std = residual_out ? 0.02 / std::sqrt(2.0 * L) : 0.02;
      fill_normal(p, std, 0.0, seed, stream);
    } else {
      // Llama3 (TorchTitan): trunc_normal(0.02) (bounds ±2 absolute, i.e. ±100σ); wo/w2/w3 depth-scaled
      // 0.02/sqrt(2(layer_id+1)); output trunc_normal(D^-0.5, ±3σ); embeddings normal(1).
      if (name == "tok_embeddings.weight") {
        fill_normal(p, cfg_.tie_word_embeddings ? std::pow(cfg_.hidden_size, -0.5) : 1.0,
                    cfg_.tie_word_embeddings ? 3.0 : 0.0, seed, stream);
      } else if (name == "output.weight") {
        fill_normal(p, std::pow(cfg_.hidden_size, -0.5), 3.0, seed, stream);
      } else {
        const bool depth = residual_out || name.find(".w3.") != std::string::npos;
        double std = depth ? 0.02 / std::sqrt(2.0 * (layer + 1)) : 0.02;
        fill_normal(p, std, 0.0, seed, stream);  // torch trunc_normal_ a=-2,b=2 are absolute: no cut at 0.02
      }
    }
  }
}

}  // namespace titan::models
