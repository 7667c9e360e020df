// The shared decoder's configuration. Field names follow Hugging Face config.json
// (LlamaConfig / Qwen3Config / Qwen3MoeConfig / DeepseekV3Config) so families map
// 1:1; families differ only by these fields, never by their name (DESIGN.md §7).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan::models {

// RoPE frequency scaling (HF rope_scaling); factor 0 = off. rope_type "llama3": Llama 3.1
// frequency bands (low/high_freq_factor); "yarn": YaRN (Peng et al. 2023) as DeepSeek-V3
// configures it (beta_fast/beta_slow correction range, mscale/mscale_all_dim attention
// factor; models/common/rope_yarn.h).
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  std::string rope_type = "llama3";  // llama3 | yarn
  double beta_fast = 32.0;      // yarn
  double beta_slow = 1.0;       // yarn
  double mscale = 0.0;          // yarn: 0 = absent
  double mscale_all_dim = 0.0;  // yarn: 0 = absent
  bool truncate = true;         // yarn: round the correction range out to whole dims (gpt-oss: false)
};

struct TransformerConfig {
  std::string family = "llama3";      // registry key (models/family.h): HF names, init style
  int64_t vocab_size = 32000;
  int64_t hidden_size = 512;          // D
  int64_t intermediate_size = 1536;   // F (SwiGLU hidden of dense layers)
  int64_t num_hidden_layers = 8;      // L
  int64_t num_attention_heads = 8;    // H
  int64_t num_key_value_heads = 8;    // Hkv
  int64_t head_dim = 64;              // Dh (independent of D / H for qwen3)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qk_norm = false;               // qwen3: RMSNorm over Dh on q and k before RoPE
  bool attention_bias = false;
  int64_t sliding_window = 0;         // 0 = full causal attention
  int64_t bos_token_id = -1, eos_token_id = -1;

  // ---- mixture of experts (0 experts = every layer dense). Which layers are MoE:
  // layer l is dense when l < first_k_dense_replace (DeepSeek-V3), when l is listed in
  // mlp_only_layers, or when (l + 1) % decoder_sparse_step != 0 (Qwen3-MoE).
  int64_t num_experts = 0;            // E routed experts (DeepSeek: n_routed_experts)
  int64_t num_experts_per_tok = 0;    // K
  int64_t moe_intermediate_size = 0;  // F of one routed expert
  bool norm_topk_prob = false;        // softmax router: renormalise the K weights to sum 1
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t first_k_dense_replace = 0;
  int64_t n_shared_experts = 0;       // shared experts, each of width moe_intermediate_size
  // softmax | sigmoid (DeepSeek-V3 / Kimi K2) | softmax_topk (gpt-oss: the K largest
  // logits, softmax over those K only; models/ffn/moe.h).
  std::string scoring_func = "softmax";
  bool router_bias = false;           // the router gate has a bias (gpt-oss mlp.router.bias)
  // Routed experts' projections have biases (gpt-oss gate_up_proj_bias / down_proj_bias).
  bool expert_proj_bias = false;
  // The routed experts' gated activation: silu (SwiGLU: silu(gate) * up) or swiglu_oai
  // (gpt-oss: (clamp(up, ±swiglu_limit) + 1) * g * sigmoid(swiglu_alpha * g), g = min(gate,
  // swiglu_limit); ops/activation.h swiglu_oai). The HF gpt-oss fields swiglu_limit and
  // swiglu_alpha; both must be > 0.
  std::string expert_act = "silu";
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
  int64_t n_group = 1;                // sigmoid router: expert groups for group-limited top-k
  int64_t topk_group = 1;             // groups kept per token
  double routed_scaling_factor = 1.0; // multiplies the routed experts' combined output
  double router_aux_loss_coef = 0.0;  // sequence-level load-balancing loss weight (0 = off)
  // Aux-loss-free balancing rate of the sigmoid router's expert bias (TorchTitan
  // load_balance_coeff; 0 = the bias is not updated). Not an HF config field.
  double load_balance_coeff = 0.0;
  // TorchTitan MoEArgs.score_before_experts (Llama 4): a routed expert's input is its
  // router weight times x, and its output joins unweighted (HF Llama4TextMoe); false:
  // the output is weighted.
  bool score_before_experts = false;

  // ---- hybrid linear attention (Qwen3-Next). layer_types[l] is "full_attention" (the
  // gqa mixer) or "linear_attention" (the Gated DeltaNet mixer, models/mixers/gdn.h);
  // empty: every layer full attention. The GDN layer: linear_num_key_heads q/k heads of
  // linear_key_head_dim, linear_num_value_heads value heads of linear_value_head_dim,
  // a causal depthwise conv1d of linear_conv_kernel_dim taps.
  std::vector<std::string> layer_types;
  // The mixer of the linear_attention layers: "gdn" (Gated DeltaNet, scalar decay;
  // Qwen3-Next) or "kda" (Kimi Delta Attention, per-channel decay; Kimi Linear, with
  // linear_num_key_heads == linear_num_value_heads and equal head dims). HF encodes it
  // by model_type.
  std::string linear_attn_type = "gdn";
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;
  double partial_rotary_factor = 1.0;  // RoPE on the first head_dim * factor dims of q and k
  bool attn_output_gate = false;       // q_proj also yields a per-head gate: out *= sigmoid(gate)
  bool norm_unit_offset = false;       // RMSNorm weights applied as (1 + w), stored as w (init 0)

  // ---- attention variants (Gemma 2, gpt-oss, Llama 4; docs/model-layout.md).
  // layer_types may also say "sliding_attention" (a gqa layer
  // with a sliding_window-token window) next to "full_attention"; with layer_types empty
  // sliding_window applies to every gqa layer (Mistral).
  double attn_logit_softcapping = 0.0;   // attention scores s -> cap * tanh(s / cap); 0 = off
  double final_logit_softcapping = 0.0;  // LM logits z -> cap * tanh(z / cap); 0 = off
  double query_pre_attn_scalar = 0.0;    // attention scale query_pre_attn_scalar^-1/2 (Gemma); 0 = head_dim
  bool attention_sinks = false;          // gpt-oss: one learned sink logit per query head (self_attn.sinks)
  bool pre_norms = true;                 // attention_norm / ffn_norm before mixer and feed-forward
  bool post_norms = false;               // Gemma 2 / OLMo 2: RMSNorm of the mixer's and feed-forward's outputs
  double embedding_multiplier = 1.0;     // token embeddings scaled by this (Gemma: sqrt(hidden_size))
  double rope_local_base_freq = 0.0;     // RoPE theta of the sliding-window layers (Gemma 3); 0 = rope_theta
  std::string hidden_act = "silu";       // gated feed-forward activation: silu | gelu_pytorch_tanh (Gemma)
  // Llama 4 iRoPE: no_rope_layers[l] = 1 where layer l uses RoPE, 0 for a NoPE layer
  // (empty: every layer RoPE). attn_temperature_tuning scales a NoPE layer's queries
  // at position p by 1 + attn_scale * log(1 + floor((p + 1) / floor_scale)).
  std::vector<int64_t> no_rope_layers;
  bool attn_temperature_tuning = false;
  double floor_scale = 8192.0;
  double attn_scale = 0.1;
  // Llama 4 chunked local attention: layer_types[l] == "chunked_attention" makes layer l
  // a gqa layer whose query at position p sees only keys j <= p of its own chunk,
  // floor(j / attention_chunk_size) == floor(p / attention_chunk_size). 0 = no chunked layers.
  int64_t attention_chunk_size = 0;
  // Llama 4 use_qk_norm: on the RoPE layers, q and k are divided by their RMS over
  // head_dim (no weight, eps rms_norm_eps) after RoPE (HF Llama4TextL2Norm).
  bool use_qk_norm = false;
  // gqa layers rotate interleaved pairs (2i, 2i+1) (Meta's complex RoPE, HF llama4
  // apply_rotary_emb) instead of rotate-half (d, d + R/2). MLA's pairing is rope_interleave.
  bool rope_interleave_gqa = false;

  // ---- Multi-head Latent Attention (DeepSeek-V2/V3, Kimi K2; models/mixers/mla.h).
  // kv_lora_rank > 0 makes every layer an MLA layer: queries through a q_lora_rank
  // bottleneck (0 = HF null: one q_proj), keys/values from a kv_lora_rank latent plus a
  // shared qk_rope_head_dim RoPE key; head_dim is then qk_rope_head_dim (as HF sets it).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = true;  // RoPE pairs (2i, 2i+1) of the rope dims (HF default)

  // ---- DeepSeek sparse attention (DeepSeek-V3.2; models/mixers/dsa.h). index_topk > 0
  // (with MLA and q_lora_rank > 0) makes every MLA layer a DSA layer: a lightning indexer
  // of index_n_heads heads of index_head_dim picks, per query, the index_topk keys the
  // attention visits. indexer_loss_coeff (>= 0; 0 = off): weight of the indexer's KL loss
  // in training (DeepSeek-V3.2-Exp §2.1); indexer_loss_stage: "dense" (the warm-up stage:
  // KL against the main attention over every causal key) or "sparse" (over the selected
  // keys only). Both are titan fields of config.json (DeepseekV32Config has none).
  int64_t index_topk = 0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  double indexer_loss_coeff = 0.0;
  std::string indexer_loss_stage = "dense";

  bool is_moe() const { return num_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  bool is_dsa() const { return is_mla() && index_topk > 0; }
  // Whether layer l is a Gated DeltaNet layer (layer_types[l] == "linear_attention").
  bool is_linear_attention_layer(int64_t l) const;
  // Layer l's attention window: sliding_window where layer_types[l] is
  // "sliding_attention" (or every layer when layer_types is empty), else 0.
  int64_t layer_window(int64_t l) const;
  // Layer l's attention chunk: attention_chunk_size where layer_types[l] is
  // "chunked_attention", else 0.
  int64_t layer_chunk(int64_t l) const;
  // Whether layer l applies RoPE (no_rope_layers[l] != 0, or no_rope_layers empty).
  bool layer_uses_rope(int64_t l) const;
  // RoPE dims per head: head_dim * partial_rotary_factor.
  int64_t rotary_dim() const;
  // Whether layer l uses the MoE feed-forward (false for every layer when !is_moe()).
  bool is_moe_layer(int64_t l) const;

  // Throws titan::Error naming the field when sizes are inconsistent.
  void validate() const;
  // Parameter count (embeddings included once when tied).
  int64_t num_params() const;
  // Parameters one token uses: routed experts count K of E (num_params() for dense).
  int64_t num_active_params() const;
  // Training FLOPs per token, TorchTitan convention (survey §4):
  // 6 * active matmul params + 6 * L * H * 2 * Dh * seq_len (no causal halving); DSA:
  // attention over min(index_topk, seq_len) keys, the indexer forward only (2x).
  // seq_len is the keys a token attends to: the trainer passes its step's mean
  // document length per token (Σ length² / Σ length), seq_len for unbroken windows.
  double train_flops_per_token(int64_t seq_len) const;
};

}  // namespace titan::models
