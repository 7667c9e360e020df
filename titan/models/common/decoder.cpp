#include "titan/models/common/decoder.h"

#include <algorithm>
#include <cmath>

#include "titan/autograd/checkpoint.h"
#include "titan/models/ffn/moe.h"
#include "titan/models/mixers/dsa.h"
#include "titan/nn/hooks.h"
#include "titan/autograd/node.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/ops/bf16_compute.h"
#include "titan/ops/lm_head_bf16.h"
#include "titan/ops/matmul.h"

namespace titan::models {

bool family_registered(const std::string& name);  // models/family.cpp (throws when not)

namespace {
// Keys a query of a seq_len-token sequence attends at most in layer l: the window or
// the chunk bound it (FLOP counts).
int64_t attended_keys(const TransformerConfig& c, int64_t l, int64_t seq_len) {
  int64_t keys = seq_len;
  if (c.layer_window(l) > 0) keys = std::min(keys, c.layer_window(l));
  if (c.layer_chunk(l) > 0) keys = std::min(keys, c.layer_chunk(l));
  return keys;
}

// Feed-forward parameters of layer l: dense SwiGLU 3·D·F; MoE: the router gate E·D
// (+ E with router_bias), the routed experts (all E, or the K a token uses when
// `active`; 3·D·F each, + 2·F + D with expert_proj_bias) and the shared experts,
// 3·D·moe_intermediate_size each.
int64_t ffn_params(const TransformerConfig& c, int64_t l, bool active) {
  const int64_t D = c.hidden_size, F = c.moe_intermediate_size;
  if (!c.is_moe_layer(l)) return 3 * D * c.intermediate_size;
  const int64_t expert = 3 * D * F;
  const int64_t routed = active ? c.num_experts_per_tok : c.num_experts;
  return c.num_experts * D + (c.router_bias ? c.num_experts : 0) + (routed + c.n_shared_experts) * expert +
         (c.expert_proj_bias ? routed * (2 * F + D) : 0);
}
}  // namespace

// Parameters of an MLA layer (models/mixers/mla.h): q (low-rank or one q_proj),
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj (+ biases of q_a, kv_a and o).
static int64_t mla_params(const TransformerConfig& c) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  int64_t n = c.q_lora_rank > 0 ? D * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * H * qk : D * H * qk;
  n += D * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank +
       c.kv_lora_rank * H * (c.qk_nope_head_dim + c.v_head_dim) + H * c.v_head_dim * D;
  if (c.attention_bias) n += (c.q_lora_rank > 0 ? c.q_lora_rank : 0) + c.kv_lora_rank + c.qk_rope_head_dim + D;
  // DSA's lightning indexer: wq_b, wk, k_norm (LayerNorm weight + bias), weights_proj.
  if (c.is_dsa())
    n += c.q_lora_rank * c.index_n_heads * c.index_head_dim + D * c.index_head_dim + 2 * c.index_head_dim +
         D * c.index_n_heads;
  return n;
}

// Parameters of layer l's token mixer (attn: those of a gqa layer).
static int64_t mixer_params(const TransformerConfig& c, int64_t l, int64_t attn) {
  if (c.is_mla() && !c.is_linear_attention_layer(l)) return mla_params(c);
  if (!c.is_linear_attention_layer(l)) return attn;
  const int64_t D = c.hidden_size, Hv = c.linear_num_value_heads;
  if (c.linear_attn_type == "kda") {  // q/k/v, conv, forget gate, beta, output gate, o_norm, o_proj
    const int64_t K = c.linear_key_head_dim, HK = Hv * K;
    return 3 * D * HK + 3 * HK * c.linear_conv_kernel_dim + (D * K + K * HK + HK + Hv) + D * Hv +
           (D * K + K * HK) + K + HK * D;
  }
  const int64_t kd = c.linear_num_key_heads * c.linear_key_head_dim, vd = Hv * c.linear_value_head_dim;
  return D * (2 * kd + 2 * vd) + D * 2 * Hv + (2 * kd + vd) * c.linear_conv_kernel_dim + 2 * Hv +
         c.linear_value_head_dim + vd * D;
}

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
  TITAN_CHECK(num_experts >= 0, "model config: num_experts must be >= 0, got {}", num_experts);
  if (is_moe()) {
    pos("num_experts_per_tok", num_experts_per_tok);
    pos("moe_intermediate_size", moe_intermediate_size);
    pos("decoder_sparse_step", decoder_sparse_step);
    TITAN_CHECK(num_experts_per_tok <= num_experts,
                "model config: num_experts_per_tok ({}) must be <= num_experts ({})", num_experts_per_tok,
                num_experts);
    TITAN_CHECK(scoring_func == "softmax" || scoring_func == "sigmoid" || scoring_func == "softmax_topk",
                "model config: scoring_func must be softmax, sigmoid or softmax_topk, got '{}'", scoring_func);
    TITAN_CHECK(expert_act == "silu" || expert_act == "swiglu_oai",
                "model config: expert_act '{}' is not supported (silu, swiglu_oai)", expert_act);
    if (expert_act == "swiglu_oai") {
      TITAN_CHECK(swiglu_limit > 0 && std::isfinite(swiglu_limit), "model config: swiglu_limit must be > 0, got {}",
                  swiglu_limit);
      TITAN_CHECK(swiglu_alpha > 0 && std::isfinite(swiglu_alpha), "model config: swiglu_alpha must be > 0, got {}",
                  swiglu_alpha);
    }
    pos("n_group", n_group);
    pos("topk_group", topk_group);
    TITAN_CHECK(num_experts % n_group == 0, "model config: n_routed_experts ({}) must be divisible by n_group ({})",
                num_experts, n_group);
    TITAN_CHECK(topk_group <= n_group, "model config: topk_group ({}) must be <= n_group ({})", topk_group,
                n_group);
    TITAN_CHECK(n_shared_experts >= 0, "model config: n_shared_experts must be >= 0, got {}", n_shared_experts);
    TITAN_CHECK(first_k_dense_replace >= 0, "model config: first_k_dense_replace must be >= 0, got {}",
                first_k_dense_replace);
  }
  if (!layer_types.empty()) {
    TITAN_CHECK(static_cast<int64_t>(layer_types.size()) == num_hidden_layers,
                "model config: layer_types has {} entries, num_hidden_layers is {}", layer_types.size(),
                num_hidden_layers);
    bool any_linear = false;
    for (size_t l = 0; l < layer_types.size(); ++l) {
      TITAN_CHECK(layer_types[l] == "full_attention" || layer_types[l] == "linear_attention" ||
                      layer_types[l] == "sliding_attention" || layer_types[l] == "chunked_attention",
                  "model config: layer_types[{}] = '{}' is not a known layer type (full_attention, "
                  "sliding_attention, chunked_attention, linear_attention)", l, layer_types[l]);
      TITAN_CHECK(layer_types[l] != "chunked_attention" || attention_chunk_size >= 1,
                  "model config: layer_types[{}] is chunked_attention but attention_chunk_size = {} (must be >= 1)",
                  l, attention_chunk_size);
      TITAN_CHECK(layer_types[l] != "sliding_attention" || sliding_window >= 1,
                  "model config: layer_types[{}] is sliding_attention but sliding_window = {} (must be >= 1)", l,
                  sliding_window);
      any_linear = any_linear || layer_types[l] == "linear_attention";
    }
    if (any_linear) {
      pos("linear_num_key_heads", linear_num_key_heads);
      pos("linear_num_value_heads", linear_num_value_heads);
      TITAN_CHECK(linear_key_head_dim >= 1 && linear_key_head_dim <= 1024,
                  "model config: linear_key_head_dim = {} is outside [1, 1024] (the chunked delta-rule "
                  "kernels' limit)", linear_key_head_dim);
      TITAN_CHECK(linear_value_head_dim >= 1 && linear_value_head_dim <= 1024,
                  "model config: linear_value_head_dim = {} is outside [1, 1024] (the chunked delta-rule "
                  "kernels' limit)", linear_value_head_dim);
      TITAN_CHECK(linear_num_value_heads % linear_num_key_heads == 0,
                  "model config: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})",
                  linear_num_value_heads, linear_num_key_heads);
      TITAN_CHECK(linear_attn_type == "gdn" || linear_attn_type == "kda",
                  "model config: linear_attn_type = '{}' is not a known linear-attention mixer (gdn, kda)",
                  linear_attn_type);
      TITAN_CHECK(linear_attn_type != "kda" || (linear_num_key_heads == linear_num_value_heads &&
                                                 linear_key_head_dim == linear_value_head_dim),
                  "model config: Kimi Delta Attention needs linear_num_key_heads == linear_num_value_heads "
                  "({} vs {}) and linear_key_head_dim == linear_value_head_dim ({} vs {})",
                  linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim);
      TITAN_CHECK(linear_conv_kernel_dim >= 1 && linear_conv_kernel_dim <= 64,
                  "model config: linear_conv_kernel_dim must be in [1, 64], got {}", linear_conv_kernel_dim);
    }
  }
  if (is_mla()) {
    pos("qk_nope_head_dim", qk_nope_head_dim);
    pos("qk_rope_head_dim", qk_rope_head_dim);
    pos("v_head_dim", v_head_dim);
    TITAN_CHECK(q_lora_rank >= 0, "model config: q_lora_rank must be >= 0 (0 = null), got {}", q_lora_rank);
    TITAN_CHECK(head_dim == qk_rope_head_dim,
                "model config: head_dim ({}) must equal qk_rope_head_dim ({}) in an MLA model (the RoPE dims)",
                head_dim, qk_rope_head_dim);
    TITAN_CHECK(std::max(qk_nope_head_dim + qk_rope_head_dim, v_head_dim) <= 256,
                "model config: qk_nope_head_dim + qk_rope_head_dim = {} and v_head_dim = {} must be <= 256 (the "
                "attention kernels' head-dim limit)", qk_nope_head_dim + qk_rope_head_dim, v_head_dim);
    TITAN_CHECK(layer_types.empty(), "model config: layer_types is not supported with MLA (kv_lora_rank = {})",
                kv_lora_rank);
  }
  TITAN_CHECK(sliding_window >= 0, "model config: sliding_window must be >= 1 (or 0 = off), got {}", sliding_window);
  TITAN_CHECK(attention_chunk_size >= 0 && attention_chunk_size <= (int64_t{1} << 30),
              "model config: attention_chunk_size must be >= 1 (or 0 = off), got {}", attention_chunk_size);
  TITAN_CHECK(attn_logit_softcapping >= 0 && std::isfinite(attn_logit_softcapping),
              "model config: attn_logit_softcapping must be >= 0 (0 = off), got {}", attn_logit_softcapping);
  TITAN_CHECK(final_logit_softcapping >= 0 && std::isfinite(final_logit_softcapping),
              "model config: final_logit_softcapping must be >= 0 (0 = off), got {}", final_logit_softcapping);
  TITAN_CHECK(query_pre_attn_scalar >= 0 && std::isfinite(query_pre_attn_scalar),
              "model config: query_pre_attn_scalar must be > 0 (or 0 = head_dim), got {}", query_pre_attn_scalar);
  TITAN_CHECK(rope_local_base_freq >= 0 && std::isfinite(rope_local_base_freq),
              "model config: rope_local_base_freq must be > 0 (or 0 = rope_theta), got {}", rope_local_base_freq);
  TITAN_CHECK(embedding_multiplier > 0 && std::isfinite(embedding_multiplier),
              "model config: embedding_multiplier must be > 0, got {}", embedding_multiplier);
  TITAN_CHECK(hidden_act == "silu" || hidden_act == "gelu_pytorch_tanh",
              "model config: hidden_act '{}' is not supported (silu, gelu_pytorch_tanh)", hidden_act);
  TITAN_CHECK(pre_norms || post_norms, "model config: pre_norms and post_norms are both off (a block needs one)");
  TITAN_CHECK(no_rope_layers.empty() || static_cast<int64_t>(no_rope_layers.size()) == num_hidden_layers,
              "model config: no_rope_layers has {} entries, num_hidden_layers is {}", no_rope_layers.size(),
              num_hidden_layers);
  for (size_t l = 0; l < no_rope_layers.size(); ++l)
    TITAN_CHECK(no_rope_layers[l] == 0 || no_rope_layers[l] == 1,
                "model config: no_rope_layers[{}] = {} must be 0 (NoPE) or 1 (RoPE)", l, no_rope_layers[l]);
  TITAN_CHECK(floor_scale >= 1 && std::isfinite(floor_scale), "model config: floor_scale must be >= 1, got {}",
              floor_scale);
  TITAN_CHECK(std::isfinite(attn_scale), "model config: attn_scale must be finite, got {}", attn_scale);
  if (is_mla())
    TITAN_CHECK(!attention_sinks && attn_logit_softcapping == 0 && sliding_window == 0,
                "model config: attention_sinks, attn_logit_softcapping and sliding_window are not supported with "
                "MLA (kv_lora_rank = {})", kv_lora_rank);
  if (index_topk != 0 || index_n_heads != 0 || index_head_dim != 0) {
    TITAN_CHECK(is_mla() && q_lora_rank > 0,
                "model config: index_topk = {} needs MLA with q_lora_rank > 0 (DeepSeek sparse attention's indexer "
                "reads the q latent), got kv_lora_rank {} and q_lora_rank {}", index_topk, kv_lora_rank, q_lora_rank);
    pos("index_topk", index_topk);
    pos("index_n_heads", index_n_heads);
    TITAN_CHECK(index_head_dim >= qk_rope_head_dim && index_head_dim <= 1024,
                "model config: index_head_dim ({}) must be in [qk_rope_head_dim = {}, 1024] (the indexer rotates its "
                "first qk_rope_head_dim dims)", index_head_dim, qk_rope_head_dim);
  }
  TITAN_CHECK(indexer_loss_coeff >= 0.0 && std::isfinite(indexer_loss_coeff),
              "model config: indexer_loss_coeff must be a finite number >= 0 (0 = off), got {}", indexer_loss_coeff);
  TITAN_CHECK(indexer_loss_coeff == 0.0 || is_dsa(),
              "model config: indexer_loss_coeff = {} needs DeepSeek sparse attention (index_topk > 0)",
              indexer_loss_coeff);
  TITAN_CHECK(indexer_loss_stage == "dense" || indexer_loss_stage == "sparse",
              "model config: indexer_loss_stage '{}' is not supported (dense, sparse)", indexer_loss_stage);
  if (rope_scaling.factor > 0)
    TITAN_CHECK(rope_scaling.rope_type == "llama3" || rope_scaling.rope_type == "yarn",
                "model config: rope_scaling.rope_type '{}' is not supported (llama3, yarn)", rope_scaling.rope_type);
  TITAN_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1 && rotary_dim() % 2 == 0 &&
                  rotary_dim() >= 2,
              "model config: partial_rotary_factor = {} must give an even rotary dim in [2, head_dim = {}]",
              partial_rotary_factor, head_dim);
  family_registered(family);
}

int64_t TransformerConfig::num_params() const {
  const int64_t D = hidden_size, L = num_hidden_layers;
  int64_t attn = D * num_attention_heads * head_dim * 2 + D * num_key_value_heads * head_dim * 2;
  if (attention_bias) attn += (num_attention_heads + 2 * num_key_value_heads) * head_dim + D;
  if (qk_norm) attn += 2 * head_dim;
  if (attn_output_gate) attn += D * num_attention_heads * head_dim;
  if (attention_sinks) attn += num_attention_heads;
  int64_t n = vocab_size * D + D;
  const int64_t norms = ((pre_norms ? 2 : 0) + (post_norms ? 2 : 0)) * D;
  for (int64_t l = 0; l < L; ++l) n += mixer_params(*this, l, attn) + norms + ffn_params(*this, l, /*active=*/false);
  if (!tie_word_embeddings) n += vocab_size * D;
  return n;
}

int64_t TransformerConfig::num_active_params() const {
  int64_t n = num_params();
  for (int64_t l = 0; l < num_hidden_layers; ++l)
    n += ffn_params(*this, l, /*active=*/true) - ffn_params(*this, l, /*active=*/false);
  return n;
}

double TransformerConfig::train_flops_per_token(int64_t seq_len) const {
  // Matmul params: everything but norms and the input embedding (the LM head counts;
  // when tied it is the embedding matrix used as a matmul).
  // For MoE layers only the K routed experts a token visits (plus shared experts and
  // the router gate) count.
  const int64_t D = hidden_size, L = num_hidden_layers;
  double ffn = 0;
  for (int64_t l = 0; l < L; ++l) ffn += static_cast<double>(ffn_params(*this, l, /*active=*/true));
  int64_t attn = D * num_attention_heads * head_dim * 2 + D * num_key_value_heads * head_dim * 2;
  if (attn_output_gate) attn += D * num_attention_heads * head_dim;
  double matmul = ffn + static_cast<double>(vocab_size) * D, mix = 0;
  // MLA's q_a_layernorm / kv_a_layernorm are inside mixer_params but are norms.
  if (is_mla()) matmul -= static_cast<double>(L) * static_cast<double>(kv_lora_rank + q_lora_rank);
  // DSA's indexer runs forward only (no gradient reaches it): its projections count 2x,
  // not 6x, plus its q·k scores over all seq_len keys; its k_norm is a norm.
  double forward_only = 0;
  if (is_dsa()) {
    const double Hi = static_cast<double>(index_n_heads), Di = static_cast<double>(index_head_dim);
    const double proj = static_cast<double>(q_lora_rank) * Hi * Di + static_cast<double>(D) * (Di + Hi);
    matmul -= static_cast<double>(L) * (proj + 2.0 * Di);
    forward_only = static_cast<double>(L) * (2.0 * proj + 2.0 * Hi * Di * static_cast<double>(seq_len));
  }
  for (int64_t l = 0; l < L; ++l) {
    matmul += static_cast<double>(mixer_params(*this, l, attn));
    // Softmax attention: 2·Dh per head per key over seq_len keys (QKᵀ and PV);
    // Gated DeltaNet: ~4 passes over the (Dk, Dv) state per value head.
    // MLA: QKᵀ over nope + rope dims, PV over v_head_dim. A sliding-window layer visits
    // at most sliding_window keys.
    mix += is_linear_attention_layer(l)
               ? 4.0 * linear_num_value_heads * linear_key_head_dim * linear_value_head_dim
           : is_mla() ? num_attention_heads * static_cast<double>(qk_nope_head_dim + qk_rope_head_dim + v_head_dim) *
                            static_cast<double>(is_dsa() ? std::min(index_topk, seq_len) : seq_len)
                      : num_attention_heads * 2.0 * head_dim * static_cast<double>(attended_keys(*this, l, seq_len));
  }
  return 6.0 * matmul + 6.0 * mix + forward_only;
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
  rope_ = std::make_shared<const RopeCache>(build_rope_tables(cfg_));
  if (cfg_.rope_local_base_freq > 0) {
    TransformerConfig local = cfg_;
    local.rope_theta = cfg_.rope_local_base_freq;
    local.rope_scaling = RopeScaling{};  // Gemma 3: the local layers' RoPE is unscaled
    rope_local_ = std::make_shared<const RopeCache>(build_rope_tables(local));
  }
  specs_ = models::layer_specs(cfg_);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const LayerSpec& spec = specs_[static_cast<size_t>(l)];
    layers.push_back(register_module(
        "layers." + std::to_string(l),
        std::make_unique<TransformerBlock>(cfg_, spec, static_cast<int>(l),
                                           rope_local_ && spec.window > 0 ? rope_local_ : rope_)));
  }
  norm = register_module("norm", std::make_unique<RMSNorm>(cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_unit_offset));
  if (!cfg.tie_word_embeddings)
    output = register_module("output", std::make_unique<Linear>(cfg.hidden_size, cfg.vocab_size, false));
}

std::vector<LayerCacheSpec> Decoder::cache_spec(int block_size) const {
  std::vector<LayerCacheSpec> out;
  for (const TransformerBlock* b : layers) out.push_back(b->cache_spec(block_size));
  return out;
}

void Decoder::repack_for_decode() {
  const Bf16ComputeScope precision(bf16_);  // bf16 panels for a bf16-compute model
  for (TransformerBlock* b : layers) b->repack_for_decode();
  if (output) {
    output->repack_for_decode();
  } else if (bf16_) {
    // The tied head's bf16 panels beside the fp32 embedding, whose rows the lookup reads.
    if (!head_bf16_.defined()) head_bf16_ = repack_linear_weight_bf16(tok_embeddings->weight);
  } else {
    tok_embeddings->repack_for_decode();
  }
}

bool Decoder::lm_head_repacked() const {
  return output ? output->repacked() : head_bf16_.defined() || tok_embeddings->repacked();
}

const Tensor& Decoder::lm_head() const {
  return output ? output->weight : head_bf16_.defined() ? head_bf16_ : tok_embeddings->weight;
}

int64_t Decoder::lm_head_bytes() const { return lm_head().nbytes(); }

bool Decoder::lm_head_bf16() const {
  return lm_head_repacked() ? lm_head().dtype() == DType::bf16 : bf16_;
}

Tensor Decoder::lm_head_weight() const {
  TITAN_CHECK(!lm_head_repacked(),
              "Decoder::lm_head_weight: the LM head is repacked for inference "
              "(Decoder::repack_for_decode); use Decoder::logits or Decoder::logprobs");
  return lm_head();
}

namespace {
// Gemma 2's final logit soft-cap: cap * tanh(z / cap).
Tensor softcap_logits(const Tensor& z, double cap) { return scale(tanh(scale(z, 1.0 / cap)), cap); }
}  // namespace

Tensor Decoder::logits(const Tensor& hidden) const {
  const bool packed = lm_head_repacked();
  Tensor z = lm_head_bf16() ? (packed ? logits_panels_bf16(hidden, lm_head(), cfg_.vocab_size)
                                      : logits_bf16(hidden, lm_head()))
             : packed ? linear_panels(hidden, lm_head(), cfg_.vocab_size)
                      : linear(hidden, lm_head());
  return cfg_.final_logit_softcapping > 0 ? softcap_logits(z, cfg_.final_logit_softcapping) : z;
}

Tensor Decoder::loss_sum(const Tensor& hidden, const Tensor& targets, double expected_grad) const {
  if (cfg_.final_logit_softcapping > 0)
    return cross_entropy(logits(hidden), targets, -100, 0.0, Reduction::sum);
  if (bf16_)  // the bf16 head: the logits of logits_bf16, bf16 gradients (lm_head_bf16.h)
    return linear_cross_entropy_bf16(hidden, lm_head_weight(), targets, -100, 0.0, Reduction::sum, expected_grad);
  return linear_cross_entropy(hidden, lm_head_weight(), targets, -100, 0.0, Reduction::sum, expected_grad);
}

Tensor Decoder::logprobs(const Tensor& hidden, const Tensor& targets, double temperature) const {
  if (cfg_.final_logit_softcapping > 0) {
    TITAN_CHECK(std::isfinite(temperature) && temperature > 0,
                "Decoder::logprobs: temperature must be finite and > 0, got {}", temperature);
    return neg(cross_entropy(scale(logits(hidden), 1.0 / temperature), targets, -100, 0.0, Reduction::none));
  }
  const bool packed = lm_head_repacked();
  if (lm_head_bf16())
    return packed ? logprobs_panels_bf16(hidden, lm_head(), cfg_.vocab_size, targets, temperature)
                  : logprobs_bf16(hidden, lm_head(), targets, temperature);
  return packed ? logprobs_panels(hidden, lm_head(), cfg_.vocab_size, targets, temperature)
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
  TITAN_CHECK(!batch.is_paged() || batch.kv->layers.size() == layers.size(),
              "Decoder::forward: the cache has {} layers, the model {}", batch.is_paged() ? batch.kv->layers.size() : 0,
              layers.size());
  if (batch.routed_experts) batch.routed_experts->assign(layers.size(), Tensor());
  Tensor h = nn::call_forward(*tok_embeddings, [&] { return tok_embeddings->forward(batch.tokens); });
  if (cfg_.embedding_multiplier != 1.0) h = scale(h, cfg_.embedding_multiplier);
  const Bf16ComputeScope precision(bf16_);
  for (size_t l = 0; l < layers.size(); ++l) {
    const TransformerBlock* layer = layers[l];
    LayerCache* cache = batch.is_paged() ? &batch.kv->layers[l] : nullptr;
    if (activation_checkpoint == ActivationCheckpoint::full && autograd::GradMode::enabled() &&
        !batch.is_paged()) {
      // The recompute runs in backward, after this loop: capture the layer and the
      // batch (Tensor handles) by value, not the loop variable by reference.
      h = autograd::checkpoint(
          [layer, batch, bf16 = bf16_](const std::vector<Tensor>& in) {
            const Bf16ComputeScope recompute_precision(bf16);
            return std::vector<Tensor>{
                nn::call_forward(*layer, [&] { return layer->forward(in[0], batch, nullptr); })};
          },
          {h})[0];
    } else {
      h = nn::call_forward(*layer, [&] { return layer->forward(h, batch, cache); });
    }
  }
  return norm->forward(h);
}

void Decoder::set_compute_bf16(bool on) {
  if (on)
    for (size_t l = 0; l < specs_.size(); ++l)
      TITAN_CHECK(specs_[l].mixer == MixerKind::gqa && specs_[l].ffn == FfnKind::dense,
                  "model.compute_dtype=bf16 is not supported for layer {} ({}+{}): bf16 compute covers "
                  "gqa attention with a dense feed-forward",
                  l, mixer_kind_name(specs_[l].mixer), ffn_kind_name(specs_[l].ffn));
  bf16_ = on;
}

nn::InitStyle family_init_style(const std::string& name);  // models/family.cpp

void Decoder::init_weights(uint64_t seed, InitScheme scheme) {
  nn::InitContext ctx;
  ctx.seed = seed;
  ctx.style = scheme == InitScheme::gpt2 ? nn::InitStyle::gpt2 : family_init_style(cfg_.family);
  ctx.num_layers = cfg_.num_hidden_layers;
  ctx.hidden_size = cfg_.hidden_size;
  ctx.tied_embeddings = cfg_.tie_word_embeddings;
  ctx.number_parameters(*this);
  init_weights(ctx);
}

void Decoder::init_weights(const nn::InitContext& ctx) {
  tok_embeddings->init_weights(ctx);
  for (TransformerBlock* b : layers) b->init_weights(ctx);
  norm->init_weights(ctx);
  if (output) output->init(ctx, nn::InitRole::lm_head, -1);
}

void Decoder::update_expert_bias(const std::function<void(std::vector<int64_t>&)>& sum_loads) {
  for (TransformerBlock* b : layers)
    if (b->moe) b->moe->update_expert_bias(sum_loads);
}

std::map<std::string, double> Decoder::take_moe_metrics() {
  std::map<std::string, double> m;
  double indexer_loss = 0;
  int64_t indexer_layers = 0;
  for (TransformerBlock* b : layers)
    if (auto* dsa = dynamic_cast<DeepSeekSparseAttention*>(b->mla)) {
      const IndexerLossStats s = dsa->take_indexer_loss_stats();
      if (s.forwards == 0) continue;
      indexer_loss += s.loss_sum / static_cast<double>(s.forwards);
      ++indexer_layers;
    }
  if (indexer_layers > 0) m["indexer_loss"] = indexer_loss;
  double max_load = 0, ent = 0, aux = 0;
  int64_t tokens = 0, moe_layers = 0, aux_layers = 0;
  for (TransformerBlock* b : layers) {
    if (!b->moe) continue;
    const MoEStats& s = b->moe->stats();
    ++moe_layers;
    if (s.tokens > 0) {
      int64_t mx = 0, tot = 0;
      for (int64_t v : s.tokens_per_expert) {
        mx = std::max(mx, v);
        tot += v;
      }
      const double mean = static_cast<double>(tot) / static_cast<double>(s.tokens_per_expert.size());
      max_load = std::max(max_load, static_cast<double>(mx) / mean);
      ent += s.entropy_sum;
      tokens += s.tokens;
    }
    if (s.aux_batches > 0) {
      aux += s.aux_loss_sum / static_cast<double>(s.aux_batches);
      ++aux_layers;
    }
    b->moe->reset_stats();
  }
  if (moe_layers == 0 || tokens == 0) return m;
  m["moe_max_load"] = max_load;
  m["moe_router_entropy"] = ent / static_cast<double>(tokens);
  if (aux_layers > 0) m["moe_aux_loss"] = aux;
  return m;
}

}  // namespace titan::models
