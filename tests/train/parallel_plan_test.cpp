// The layout planner (titan/distributed/parallel_plan.h) against the real model and
// against hand-computed figures:
//   - its parameter inventory of a dense model is models::Decoder's (names and shapes);
//   - its pieces follow torch.chunk over tp, ep and FSDP (shard_range);
//   - the 512-rank Llama-3-405B and DeepSeek-V3-671B layouts give the parameter counts
//     of the published models and per-rank bytes computed here by hand;
//   - inconsistent layouts are refused.
#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/distributed/parallel_plan.h"
#include "titan/models/common/decoder.h"

using namespace titan;
using namespace titan::distributed;

TEST(ParallelPlan, InventoryIsTheDecoders) {
  for (bool tied : {false, true}) {
    models::TransformerConfig c;
    c.family = "llama3";
    c.vocab_size = 300;
    c.hidden_size = 64;
    c.intermediate_size = 160;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.tie_word_embeddings = tied;
    models::Decoder model(c);
    std::map<std::string, Shape> real;
    for (auto& [n, p] : model.named_parameters()) real[n] = p.shape();
    PlanModel m;
    m.vocab = 300;
    m.dim = 64;
    m.ffn = 160;
    m.layers = 3;
    m.heads = 4;
    m.kv_heads = 2;
    m.head_dim = 16;
    m.tied = tied;
    std::map<std::string, Shape> planned;
    for (const PlanParam& p : plan_parameters(m)) planned[p.name] = p.shape;
    EXPECT_EQ(planned, real) << "tied=" << tied;
  }
}

TEST(ParallelPlan, PiecesFollowTheChunkRule) {
  PlanParam wq{"wq", {10, 6}, 0, false, 0}, wo{"wo", {6, 10}, 1, false, 0}, ex{"w1", {8, 5, 6}, -1, true, 0};
  PlanLayout l;
  l.tp = 4;
  l.dp_shard = 3;
  // wq: tp splits 10 rows 3,3,3,1; FSDP splits the 3 rows 1,1,1; tp rank 3 has 1 row: 1,0,0.
  EXPECT_EQ(plan_local_numel(wq, l, 0, 0, 0), 6);
  EXPECT_EQ(plan_local_numel(wq, l, 3, 0, 0), 6);
  EXPECT_EQ(plan_local_numel(wq, l, 3, 0, 1), 0);
  // wo: tp splits dim 1 (10 -> 3), FSDP dim 0 (6 -> 2,2,2).
  EXPECT_EQ(plan_local_numel(wo, l, 0, 0, 2), 2 * 3);
  // Experts: ep 2 of dp_shard 4 -> 4 experts per rank, FSDP over dp_shard / ep = 2 -> 2.
  PlanLayout e;
  e.dp_shard = 4;
  e.ep = 2;
  EXPECT_EQ(plan_local_numel(ex, e, 0, 1, 1), 2 * 5 * 6);
}

TEST(ParallelPlan, PublishedModelsAnd512RankLayouts) {
  int64_t n = 0;
  for (const PlanParam& p : plan_parameters(llama3_405b())) {
    int64_t k = 1;
    for (int64_t d : p.shape) k *= d;
    n += k;
  }
  EXPECT_NEAR(static_cast<double>(n) / 1e9, 405.85, 0.1);  // Llama 3.1 405B: 405.85B
  n = 0;
  for (const PlanParam& p : plan_parameters(deepseek_v3_671b())) {
    int64_t k = 1;
    for (int64_t d : p.shape) k *= d;
    n += k;
  }
  EXPECT_NEAR(static_cast<double>(n) / 1e9, 671.0, 1.0);  // DeepSeek-V3: 671B without the MTP module

  PlanLayout l;
  l.pp = 8;
  l.dp_shard = 8;
  l.tp = 8;
  l.seq = 8192;
  l.global_batch = 128;
  const PlanResult r = plan_layout(llama3_405b(), l);
  ASSERT_EQ(r.stages.size(), 8u);
  EXPECT_EQ(r.microbatches, 16);
  // Stage 1: layers 16..31 (126 = 8 stages of 16, the last 14). One layer: wq 16384²,
  // wk, wv 1024·16384, wo 16384², w1 w2 w3 53248·16384, two norms; tp 8 and FSDP 8 each
  // divide every weight's split dim evenly, so a rank holds 1/64 of them and norms of
  // 16384 / 8 = 2048 elements.
  const int64_t D = 16384, F = 53248;
  const int64_t layer = (2 * D * D + 2 * 1024 * D + 3 * F * D) / 64 + 2 * (D / 8);
  EXPECT_EQ(r.stages[1].layers, 16);
  EXPECT_EQ(r.stages[1].params_local, 16 * layer);
  EXPECT_NEAR(r.stages[1].optim_gb, 16.0 * layer * 8 / 1e9, 1e-9);
  // TP+SP per step: 8·(7/8)·m·D·4 bytes per layer and microbatch, m = 8192 tokens.
  EXPECT_NEAR(r.stages[1].tp_gb, 8.0 * 7 / 8 * 8192 * D * 4 * 16 * 16 / 1e9, 1e-6);
  // PP: a middle stage receives activations and gradients, m·D·4 each, per microbatch.
  EXPECT_NEAR(r.stages[1].pp_gb, 2.0 * 8192 * D * 4 * 16 / 1e9, 1e-9);
  EXPECT_EQ(r.stages[0].pp_gb * 2, r.stages[1].pp_gb);
  EXPECT_EQ(r.stages[1].cp_gb, 0.0);
  // CP 2 (the sequence halves): K and V (8 kv heads of 128 dims, 1 per tp rank) of the
  // m = 4096 local tokens all-gathered forward, dK and dV reduce-scattered backward:
  // 4·(2 − 1)·m·1024/8·4 bytes per layer and microbatch.
  l.cp = 2;
  const PlanResult c = plan_layout(llama3_405b(), l);
  EXPECT_NEAR(c.stages[1].cp_gb, 4.0 * 1 * 4096 * 1024 / 8 * 4 * 16 * 16 / 1e9, 1e-9);
}

TEST(ParallelPlan, BadLayoutsAreRefused) {
  PlanLayout l;
  l.global_batch = 8;
  l.ep = 3;
  EXPECT_THROW(plan_layout(deepseek_v3_671b(), l), Error);  // ep does not divide dp_shard × cp
  l.ep = 1;
  l.pp = 62;
  EXPECT_THROW(plan_layout(deepseek_v3_671b(), l), Error);  // more stages than layers
  l.pp = 1;
  l.dp_shard = 3;
  EXPECT_THROW(plan_layout(deepseek_v3_671b(), l), Error);  // 8 sequences over 3 dp ranks
  l.dp_shard = 1;
  l.cp = 2;
  l.seq = 4098;
  EXPECT_THROW(plan_layout(deepseek_v3_671b(), l), Error);  // not 4 chunks of whole tokens
}
