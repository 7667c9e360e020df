// LayerSpec: what one decoder layer is made of, derived from the model config
// (DESIGN.md §7). The decoder builds layer l's mixer and feed-forward from
// layer_specs(cfg)[l] and otherwise knows no architecture.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/models/common/config.h"

namespace titan::models {

// Token mixers. gqa: grouped-query softmax attention (models/mixers/attention.h).
// gdn: Gated DeltaNet (models/mixers/gdn.h). mla: Multi-head Latent Attention
// (models/mixers/mla.h). kda: Kimi Delta Attention (models/mixers/kda.h). dsa: MLA with
// DeepSeek sparse attention (models/mixers/dsa.h).
enum class MixerKind { gqa, gdn, mla, kda, dsa };
// Feed-forwards. dense: SwiGLU (models/ffn/dense.h); moe: routed experts
// (models/ffn/moe.h).
enum class FfnKind { dense, moe };

const char* mixer_kind_name(MixerKind k);
const char* ffn_kind_name(FfnKind k);

struct LayerSpec {
  MixerKind mixer = MixerKind::gqa;
  FfnKind ffn = FfnKind::dense;
  int64_t window = 0;     // attention window in tokens (0 = full causal)
  int64_t chunk = 0;      // chunked local attention, chunk length in tokens (0 = off)
  bool use_rope = true;   // rotary position embedding on q and k
  bool operator==(const LayerSpec&) const = default;
};

// One LayerSpec per layer (cfg.num_hidden_layers of them): gdn where layer_types says
// "linear_attention", dsa when cfg.is_dsa(), else mla when cfg.is_mla(), gqa attention
// elsewhere; window = cfg.layer_window(l), chunk = cfg.layer_chunk(l) (gqa layers), use_rope = cfg.layer_uses_rope(l)
// (gqa, mla and dsa layers), ffn = moe where cfg.is_moe_layer(l).
std::vector<LayerSpec> layer_specs(const TransformerConfig& cfg);

// "L0 gqa+dense, L1 gqa+moe window 4096, L2 gqa+dense nope, ..." with runs collapsed
// ("L0-3 gqa+moe"), for logs.
std::string describe_layers(const std::vector<LayerSpec>& specs);

}  // namespace titan::models
