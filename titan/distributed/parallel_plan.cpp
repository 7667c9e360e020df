#include "titan/distributed/parallel_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "titan/core/error.h"
#include "titan/distributed/dtensor.h"

namespace titan::distributed {

PlanModel llama3_405b() {
  PlanModel m;
  m.name = "Llama-3-405B";
  m.vocab = 128256;
  m.dim = 16384;
  m.layers = 126;
  m.heads = 128;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn = 53248;
  return m;
}

PlanModel deepseek_v3_671b() {
  PlanModel m;
  m.name = "DeepSeek-V3-671B";
  m.vocab = 129280;
  m.dim = 7168;
  m.layers = 61;
  m.heads = 128;
  m.kv_heads = 128;
  m.head_dim = 192;
  m.ffn = 18432;  // the 3 dense layers
  m.mla = true;
  m.q_lora = 1536;
  m.kv_lora = 512;
  m.qk_nope = 128;
  m.qk_rope = 64;
  m.v_head = 128;
  m.experts = 256;
  m.top_k = 8;
  m.moe_ffn = 2048;
  m.shared_experts = 1;
  m.dense_layers = 3;
  return m;
}

std::string PlanLayout::str() const {
  std::string s = fmt::format("pp {} × dp_replicate {} × dp_shard {} × cp {} × tp {}", pp, dp_replicate, dp_shard, cp, tp);
  if (ep > 1) s += fmt::format(" (ep {})", ep);
  return s + fmt::format(" = {} ranks", world());
}

std::vector<PlanParam> plan_parameters(const PlanModel& m) {
  std::vector<PlanParam> ps;
  const int64_t D = m.dim;
  ps.push_back({"tok_embeddings.weight", {m.vocab, D}, 0, false, -1});
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    if (m.mla) {
      if (m.q_lora > 0) {
        ps.push_back({p + "attention.wq_a.weight", {m.q_lora, D}, -1, false, l});
        ps.push_back({p + "attention.q_norm.weight", {m.q_lora}, -1, false, l});
        ps.push_back({p + "attention.wq_b.weight", {m.heads * (m.qk_nope + m.qk_rope), m.q_lora}, 0, false, l});
      } else {
        ps.push_back({p + "attention.wq.weight", {m.heads * (m.qk_nope + m.qk_rope), D}, 0, false, l});
      }
      ps.push_back({p + "attention.wkv_a.weight", {m.kv_lora + m.qk_rope, D}, -1, false, l});
      ps.push_back({p + "attention.kv_norm.weight", {m.kv_lora}, -1, false, l});
      ps.push_back({p + "attention.wkv_b.weight", {m.heads * (m.qk_nope + m.v_head), m.kv_lora}, 0, false, l});
      ps.push_back({p + "attention.wo.weight", {D, m.heads * m.v_head}, 1, false, l});
    } else {
      ps.push_back({p + "attention.wq.weight", {m.heads * m.head_dim, D}, 0, false, l});
      ps.push_back({p + "attention.wk.weight", {m.kv_heads * m.head_dim, D}, 0, false, l});
      ps.push_back({p + "attention.wv.weight", {m.kv_heads * m.head_dim, D}, 0, false, l});
      ps.push_back({p + "attention.wo.weight", {D, m.heads * m.head_dim}, 1, false, l});
    }
    ps.push_back({p + "attention_norm.weight", {D}, -1, false, l});
    if (m.experts > 0 && l >= m.dense_layers) {
      ps.push_back({p + "moe.router.gate.weight", {m.experts, D}, -1, false, l});
      ps.push_back({p + "moe.experts.w1", {m.experts, m.moe_ffn, D}, -1, true, l});
      ps.push_back({p + "moe.experts.w2", {m.experts, D, m.moe_ffn}, -1, true, l});
      ps.push_back({p + "moe.experts.w3", {m.experts, m.moe_ffn, D}, -1, true, l});
      if (m.shared_experts > 0) {
        const int64_t F = m.shared_experts * m.moe_ffn;
        ps.push_back({p + "moe.shared_experts.w1.weight", {F, D}, 0, false, l});
        ps.push_back({p + "moe.shared_experts.w2.weight", {D, F}, 1, false, l});
        ps.push_back({p + "moe.shared_experts.w3.weight", {F, D}, 0, false, l});
      }
    } else {
      ps.push_back({p + "feed_forward.w1.weight", {m.ffn, D}, 0, false, l});
      ps.push_back({p + "feed_forward.w2.weight", {D, m.ffn}, 1, false, l});
      ps.push_back({p + "feed_forward.w3.weight", {m.ffn, D}, 0, false, l});
    }
    ps.push_back({p + "ffn_norm.weight", {D}, -1, false, l});
  }
  ps.push_back({"norm.weight", {D}, -1, false, -1});
  if (!m.tied) ps.push_back({"output.weight", {m.vocab, D}, 0, false, -1});
  return ps;
}

namespace {
int fsdp_degree(const PlanParam& p, const PlanLayout& l) {
  const int s = l.dp_shard * l.cp;  // the FSDP group is dp_shard × cp
  return p.expert ? s / l.ep : s;
}
// The piece of p after TP and EP (what FSDP gathers), on tp rank / ep rank 0 (the
// largest piece under the chunk rule).
Shape tp_ep_piece(const PlanParam& p, const PlanLayout& l, int tp_rank, int ep_rank) {
  Shape s = p.shape;
  if (p.tp_dim >= 0) s[p.tp_dim] = shard_range(s[p.tp_dim], l.tp, tp_rank).length;
  if (p.expert) s[0] = shard_range(s[0], l.ep, ep_rank).length;
  return s;
}
int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
}  // namespace

int64_t plan_local_numel(const PlanParam& p, const PlanLayout& l, int tp_rank, int ep_rank, int fsdp_rank) {
  Shape s = tp_ep_piece(p, l, tp_rank, ep_rank);
  if (!s.empty()) s[0] = shard_range(s[0], fsdp_degree(p, l), fsdp_rank).length;
  return numel_of(s);
}

PlanResult plan_layout(const PlanModel& m, const PlanLayout& l) {
  TITAN_CHECK(l.pp >= 1 && l.dp_replicate >= 1 && l.dp_shard >= 1 && l.cp >= 1 && l.tp >= 1 && l.ep >= 1,
              "plan: every degree must be >= 1 ({})", l.str());
  TITAN_CHECK((l.dp_shard * l.cp) % l.ep == 0, "plan: ep={} does not divide dp_shard × cp = {}", l.ep,
              l.dp_shard * l.cp);
  TITAN_CHECK(l.ep == 1 || (m.experts > 0 && m.experts % l.ep == 0), "plan: ep={} does not divide the {} experts of {}",
              l.ep, m.experts, m.name);
  TITAN_CHECK(l.pp <= m.layers, "plan: {} pipeline stages is more than the {} layers of {}", l.pp, m.layers, m.name);
  TITAN_CHECK(l.seq > 0 && l.seq % (2 * l.cp) == 0,
              "plan: seq={} must be a positive multiple of 2 × cp={} (each cp rank takes one head and one tail chunk)",
              l.seq, l.cp);
  const int64_t dp = static_cast<int64_t>(l.dp_replicate) * l.dp_shard;
  TITAN_CHECK(l.microbatch >= 1 && l.global_batch > 0 && l.global_batch % (dp * l.microbatch) == 0,
              "plan: global_batch={} must be a positive multiple of dp ({}) × microbatch ({})", l.global_batch, dp,
              l.microbatch);
  PlanResult r;
  r.model = m;
  r.layout = l;
  r.microbatches = l.global_batch / (dp * l.microbatch);
  const std::vector<PlanParam> params = plan_parameters(m);
  for (const PlanParam& p : params) r.total_params += numel_of(p.shape);

  const double GB = 1e9, f32 = 4;
  const double tokens = static_cast<double>(l.microbatch * l.seq / l.cp);  // m: tokens per microbatch on a rank
  const double D = static_cast<double>(m.dim);
  for (int s = 0; s < l.pp; ++s) {
    PlanStage st;
    st.stage = s;
    const ShardRange lr = shard_range(m.layers, l.pp, s);
    st.layers = lr.length;
    auto on_stage = [&](const PlanParam& p) {
      if (p.layer >= 0) return p.layer >= lr.offset && p.layer < lr.offset + lr.length;
      if (p.name == "tok_embeddings.weight") return s == 0;
      return s == l.pp - 1;  // final norm, LM head
    };
    double root_unit = 0, fsdp_bytes = 0;
    std::vector<double> block_unit(static_cast<size_t>(m.layers), 0.0);
    int64_t moe_layers = 0;
    for (const PlanParam& p : params) {
      if (!on_stage(p)) continue;
      st.params_local += plan_local_numel(p, l, 0, 0, 0);
      const double piece = static_cast<double>(numel_of(tp_ep_piece(p, l, 0, 0))) * f32;
      const int S = fsdp_degree(p, l);
      if (S > 1) {
        (p.layer < 0 ? root_unit : block_unit[static_cast<size_t>(p.layer)]) += piece;
        const int G = S * l.dp_replicate;  // fsdp.h: the gradient is reduced over the whole dp group at once
        fsdp_bytes += (2.0 * (S - 1) + (G - 1)) / S * piece;
      } else if (l.dp_replicate > 1) {
        fsdp_bytes += 2.0 * (l.dp_replicate - 1) / l.dp_replicate * piece;  // a DDP all-reduce of the gradient
      }
      if (p.expert && p.name.find(".moe.experts.w1") != std::string::npos) ++moe_layers;
    }
    const double n = static_cast<double>(st.params_local);
    st.param_gb = n * f32 / GB;
    st.grad_gb = n * f32 / GB;
    st.optim_gb = n * 2 * f32 / GB;
    st.checkpoint_gb = n * 3 * f32 / GB;
    const double largest_block = *std::max_element(block_unit.begin(), block_unit.end());
    st.gathered_gb = (root_unit + 2 * largest_block) / GB;  // the block's full values and its full gradient
    const int64_t in_flight = std::min<int64_t>(l.pp - s, r.microbatches);
    st.act_gb = static_cast<double>(st.layers) * tokens * D * 34 * 2 / l.tp * static_cast<double>(in_flight) / GB;
    st.act_full_ac_gb =
        static_cast<double>(st.layers) * tokens * D * f32 / l.tp * static_cast<double>(in_flight) / GB;
    const double mb = static_cast<double>(r.microbatches);
    st.fsdp_gb = fsdp_bytes * mb / GB;
    if (l.tp > 1) st.tp_gb = 8.0 * (l.tp - 1) / l.tp * tokens * D * f32 * static_cast<double>(st.layers) * mb / GB;
    if (l.pp > 1) st.pp_gb = ((s > 0) + (s < l.pp - 1)) * tokens * D * f32 * mb / GB;
    if (l.cp > 1)  // K and V all-gathered forward, dK and dV reduce-scattered backward (context_parallel.h)
      st.cp_gb = 4.0 * (l.cp - 1) * tokens * static_cast<double>(m.kv_heads * m.head_dim) / l.tp * f32 *
                 static_cast<double>(st.layers) * mb / GB;
    if (l.ep > 1)
      st.ep_gb = 4.0 * (l.ep - 1) / l.ep * tokens * static_cast<double>(m.top_k) * D * f32 *
                 static_cast<double>(moe_layers) * mb / GB;
    r.stages.push_back(st);
  }
  return r;
}

std::string plan_report(const PlanResult& r) {
  const PlanLayout& l = r.layout;
  std::string out = fmt::format(
      "### {}: {:.1f}B parameters, {}\n\nseq {}, global batch {} sequences, microbatch {} ({} microbatches per dp "
      "rank per step), f32 weights + AdamW. Per rank of each pipeline stage (rank 0 of its tp / ep / FSDP groups: "
      "the largest piece); GB = 1e9 bytes.\n\n",
      r.model.name, static_cast<double>(r.total_params) / 1e9, l.str(), l.seq, l.global_batch, l.microbatch,
      r.microbatches);
  out +=
      "| stage | layers | params / rank | weights | grads | AdamW | checkpoint | FSDP gathered | activations (no AC / "
      "full AC) | total (no AC) | FSDP recv | TP recv | CP recv | PP recv | EP recv | recv / step |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const PlanStage& s : r.stages) {
    const double total = s.param_gb + s.grad_gb + s.optim_gb + s.gathered_gb + s.act_gb;
    out += fmt::format(
        "| {} | {} | {:.2f}B | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} / {:.1f} | {:.1f} | {:.1f} | {:.1f} | "
        "{:.1f} | {:.2f} | {:.1f} | {:.1f} |\n",
        s.stage, s.layers, static_cast<double>(s.params_local) / 1e9, s.param_gb, s.grad_gb, s.optim_gb, s.checkpoint_gb,
        s.gathered_gb, s.act_gb, s.act_full_ac_gb, total, s.fsdp_gb, s.tp_gb, s.cp_gb, s.pp_gb, s.ep_gb,
        s.fsdp_gb + s.tp_gb + s.cp_gb + s.pp_gb + s.ep_gb);
  }
  return out;
}

}  // namespace titan::distributed
