// A memory and communication model of a training layout (no run): per rank, the bytes
// of parameters, gradients, optimizer state, checkpoint pieces, FSDP's gathered units
// and activations, and the bytes each rank receives per step from every parallelism
// (`titan plan`, docs/distributed.md "Sizing a layout").
//
// Pieces are sized with the rules the real shards use: a tensor dim split over k ranks
// gives rank i shard_range(n, k, i) rows (torch.chunk, dtensor.h), nested in the mesh
// order (tp on the Megatron dim — colwise wq wk wv w1 w3 on dim 0, rowwise wo w2 on
// dim 1, the vocabulary of the embedding and LM head on dim 0 —, the expert dim over ep,
// then FSDP dim 0 over dp_shard, or over dp_shard / ep for expert weights as in
// TorchTitan), and pipeline stages take layers by the same chunk rule, stage 0 with the
// embedding, the last stage with the final norm and LM head. The parameter names and
// shapes of a dense model are those of models::Decoder (tests/train/parallel_plan_test).
//
// Bytes (f32 training, as the trainer runs): a parameter element costs 4 (value) + 4
// (gradient) + 8 (AdamW's two moments) bytes; a checkpoint holds the value and the
// moments (12 bytes). Communication, bytes received per rank per step:
//   FSDP   per microbatch and unit: forward all-gather + backward all-gather
//          2·(S−1)/S·B, gradient reduction (G−1)/S·B with G the ranks the gradient is
//          reduced over (dp_shard, or dp_replicate × dp_shard for HSDP: fsdp.h),
//          B = the unit's bytes after TP / EP;
//   TP+SP  per layer and microbatch: 2 all-gathers + 2 reduce-scatters of the m·D
//          activations forward, the same backward: 8·(T−1)/T·m·D·4;
//   CP     per layer and microbatch: K and V all-gathered forward, dK and dV
//          reduce-scattered backward (context_parallel.h): 4·(C−1)·m·Hkv·Dh/T·4;
//   PP     per microbatch: the stage's input activations and output gradients, m·D·4 each;
//   EP     per MoE layer and microbatch: dispatch + combine, forward and backward,
//          4·(E−1)/E·m·K·D·4 (K experts per token).
// Activations per layer and microbatch (Korthikanti et al. 2022, "Reducing Activation
// Recomputation", the sequence-parallel count with the attention scores not stored, as
// a fused attention does, doubled for f32): m·D·34·2/T bytes without activation
// checkpointing, m·D·4/T (the layer input, sequence-sharded) with full checkpointing;
// stage p of a 1F1B pipeline holds min(pp − p, microbatches) microbatches at once. The
// FSDP figure is titan's FullyShard, which gathers every unit again for each
// microbatch (reshard after forward); keeping the gathered units over a step's
// microbatches divides it by the microbatch count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::distributed {

struct PlanModel {
  std::string name;
  int64_t vocab = 0, dim = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  bool tied = false;
  // Multi-head latent attention (DeepSeek-V2/V3); q_lora 0 = a plain wq.
  bool mla = false;
  int64_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  // Mixture of experts on layers >= dense_layers.
  int64_t experts = 0, top_k = 0, moe_ffn = 0, shared_experts = 0, dense_layers = 0;
};
PlanModel llama3_405b();
PlanModel deepseek_v3_671b();

struct PlanLayout {
  int pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, ep = 1;
  int64_t seq = 4096, global_batch = 0, microbatch = 1;  // sequences
  int world() const { return pp * dp_replicate * dp_shard * cp * tp; }
  std::string str() const;
};

// One parameter: global shape, the dim TP splits (-1: none), an expert weight (dim 0 =
// the expert index, split over ep), its layer (-1: embedding / final norm / LM head).
struct PlanParam {
  std::string name;
  Shape shape;
  int tp_dim = -1;
  bool expert = false;
  int64_t layer = -1;
};
// Every parameter of the model, in models::Decoder's order and names for dense models.
std::vector<PlanParam> plan_parameters(const PlanModel& m);
// The elements rank (tp_rank, ep_rank, fsdp_rank) holds of p.
int64_t plan_local_numel(const PlanParam& p, const PlanLayout& l, int tp_rank, int ep_rank, int fsdp_rank);

struct PlanStage {
  int stage = 0;
  int64_t layers = 0, params_local = 0;                // elements on one rank of this stage
  double param_gb = 0, grad_gb = 0, optim_gb = 0, checkpoint_gb = 0, gathered_gb = 0;
  double act_gb = 0, act_full_ac_gb = 0;               // activations in flight
  double fsdp_gb = 0, tp_gb = 0, cp_gb = 0, pp_gb = 0, ep_gb = 0;  // received per step
};
struct PlanResult {
  PlanModel model;
  PlanLayout layout;
  int64_t total_params = 0;
  int64_t microbatches = 0;  // per dp rank per step
  std::vector<PlanStage> stages;
};
// Throws titan::Error for a layout that is not consistent (degrees < 1, ep not dividing
// dp_shard × cp or the experts, a global batch not divisible by dp × microbatch, more
// stages than layers).
PlanResult plan_layout(const PlanModel& m, const PlanLayout& l);
// A markdown report of the result (one row per pipeline stage).
std::string plan_report(const PlanResult& r);

}  // namespace titan::distributed
