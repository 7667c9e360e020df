#include "titan/distributed/pipeline_schedule.h"

#include <algorithm>

#include "titan/core/error.h"

namespace titan::distributed {

PipelineScheduleKind parse_pipeline_schedule(const std::string& name) {
  if (name == "GPipe") return PipelineScheduleKind::gpipe;
  if (name == "1F1B") return PipelineScheduleKind::one_f_one_b;
  if (name == "Interleaved1F1B") return PipelineScheduleKind::interleaved_1f1b;
  fail("parallelism.pipeline_parallel_schedule='{}' is not one of: GPipe, 1F1B, Interleaved1F1B", name);
}

const char* pipeline_schedule_name(PipelineScheduleKind k) {
  switch (k) {
    case PipelineScheduleKind::gpipe: return "GPipe";
    case PipelineScheduleKind::one_f_one_b: return "1F1B";
    case PipelineScheduleKind::interleaved_1f1b: return "Interleaved1F1B";
  }
  return "?";
}

std::vector<int> PipelinePlan::stages_of_rank(int rank) const {
  std::vector<int> out;
  for (int s = rank; s < num_stages(); s += pp) out.push_back(s);
  return out;
}

std::vector<PipelineStage> split_stages(int64_t n_layers, int num_stages) {
  TITAN_CHECK(num_stages >= 1 && num_stages <= std::max<int64_t>(n_layers, 1),
              "pipeline: {} stages for {} layers", num_stages, n_layers);
  std::vector<PipelineStage> out(static_cast<size_t>(num_stages));
  if (num_stages == 1) {
    out[0] = {0, n_layers, true, true};
    return out;
  }
  const int64_t effective = n_layers + 2;  // the embedding and the head weigh one layer each
  const int64_t per = effective / num_stages, extra = effective % num_stages;
  int64_t next = 0;
  for (int s = 0; s < num_stages; ++s) {
    int64_t take = per + (s < extra ? 1 : 0);
    PipelineStage& st = out[static_cast<size_t>(s)];
    st.embeddings = s == 0;
    st.head = s == num_stages - 1;
    take -= (st.embeddings ? 1 : 0) + (st.head ? 1 : 0);
    st.first_layer = next;
    next = std::min(n_layers, next + std::max<int64_t>(take, 0));
    st.end_layer = next;
  }
  out.back().end_layer = n_layers;  // the counts above sum to n_layers; this only guards it
  return out;
}

PipelinePlan plan_pipeline(const config::JobConfig& job, int pp, int64_t n_layers, bool tied) {
  const config::ParallelismConfig& p = job.parallelism;
  PipelinePlan plan;
  plan.schedule = parse_pipeline_schedule(p.pipeline_parallel_schedule);
  plan.pp = pp;
  const int64_t lps = p.pipeline_parallel_layers_per_stage;
  TITAN_CHECK(lps >= 0, "parallelism.pipeline_parallel_layers_per_stage={} must be >= 0 (0 = TorchTitan's default)",
              lps);
  if (pp == 1) {
    // No pipeline: its keys would be ignored, so they must keep their defaults.
    TITAN_CHECK(lps == 0, "parallelism.pipeline_parallel_layers_per_stage={} needs pipeline_parallel_degree > 1",
                lps);
    TITAN_CHECK(p.pipeline_parallel_microbatch_size == 1,
                "parallelism.pipeline_parallel_microbatch_size={} needs pipeline_parallel_degree > 1 (on one stage "
                "training.local_batch_size is the microbatch)",
                p.pipeline_parallel_microbatch_size);
    TITAN_CHECK(plan.schedule == PipelineScheduleKind::one_f_one_b,
                "parallelism.pipeline_parallel_schedule={} needs pipeline_parallel_degree > 1", p.pipeline_parallel_schedule);
    plan.stages = split_stages(n_layers, 1);
    plan.microbatch_size = job.training.local_batch_size;
    return plan;
  }
  const bool multi = plan.schedule == PipelineScheduleKind::interleaved_1f1b;
  int64_t stages = 0;
  if (lps > 0) {
    stages = (n_layers + 2 + lps - 1) / lps;  // TorchTitan: ceil((L + 2) / layers_per_stage)
    TITAN_CHECK(stages % pp == 0,
                "parallelism.pipeline_parallel_layers_per_stage={} cuts the model's {} layers (+ embedding and head) "
                "into {} stages, which pipeline_parallel_degree={} does not divide",
                lps, n_layers, stages, pp);
  } else {
    stages = int64_t{pp} * (multi ? 2 : 1);  // TorchTitan's default: 1 stage per rank, 2 when interleaved
  }
  plan.stages_per_rank = static_cast<int>(stages / pp);
  TITAN_CHECK(stages <= n_layers,
              "parallelism: {} pipeline stages (pipeline_parallel_degree={} × {} per rank for {}) are more stages "
              "than the model's {} layers",
              stages, pp, plan.stages_per_rank, p.pipeline_parallel_schedule, n_layers);
  TITAN_CHECK(multi || plan.stages_per_rank == 1,
              "parallelism.pipeline_parallel_schedule={} runs one stage per rank, but "
              "pipeline_parallel_layers_per_stage={} gives {} per rank (Interleaved1F1B runs several)",
              p.pipeline_parallel_schedule, lps, plan.stages_per_rank);
  TITAN_CHECK(!multi || plan.stages_per_rank >= 2,
              "parallelism.pipeline_parallel_schedule=Interleaved1F1B needs at least 2 stages per rank, but "
              "pipeline_parallel_layers_per_stage={} gives 1 (use 1F1B, or fewer layers per stage)",
              lps);
  const int64_t mbs = p.pipeline_parallel_microbatch_size, local = job.training.local_batch_size;
  TITAN_CHECK(local % mbs == 0,
              "parallelism.pipeline_parallel_microbatch_size={} does not divide training.local_batch_size={}", mbs,
              local);
  plan.microbatch_size = mbs;
  plan.n_microbatches = local / mbs;
  TITAN_CHECK(!multi || plan.n_microbatches % pp == 0,
              "parallelism.pipeline_parallel_schedule=Interleaved1F1B needs the microbatches per run "
              "(training.local_batch_size {} / pipeline_parallel_microbatch_size {} = {}) to be a multiple of "
              "pipeline_parallel_degree={}",
              local, mbs, plan.n_microbatches, pp);
  TITAN_CHECK(!tied,
              "model.tie_embeddings=true with parallelism.pipeline_parallel_degree={} is not supported: the embedding "
              "(first stage) and the LM head (last stage) would be one matrix on two ranks",
              pp);
  plan.stages = split_stages(n_layers, static_cast<int>(stages));
  return plan;
}

namespace {

void one_f_one_b(const PipelinePlan& plan, int rank, std::vector<PipelineAction>& out) {
  const int64_t n = plan.n_microbatches;
  const int64_t warmup = std::min<int64_t>(plan.pp - 1 - rank, n);
  for (int64_t m = 0; m < warmup; ++m) out.push_back({PipelineAction::forward, rank, m});
  for (int64_t m = warmup; m < n; ++m) {
    out.push_back({PipelineAction::forward, rank, m});
    out.push_back({PipelineAction::backward, rank, m - warmup});
  }
  for (int64_t m = n - warmup; m < n; ++m) out.push_back({PipelineAction::backward, rank, m});
}

void interleaved(const PipelinePlan& plan, int rank, std::vector<PipelineAction>& out) {
  const int64_t pp = plan.pp, v = plan.stages_per_rank, n = plan.n_microbatches;
  const int64_t total = n * v;  // forwards (and backwards) of this rank
  const int64_t warmup = std::min<int64_t>((v - 1) * pp + 2 * (pp - 1 - rank), total);
  std::vector<int64_t> next_f(static_cast<size_t>(plan.num_stages()), 0), next_b(next_f);
  auto forward = [&](int64_t k) {
    const int s = static_cast<int>(((k / pp) % v) * pp + rank);
    out.push_back({PipelineAction::forward, s, next_f[static_cast<size_t>(s)]++});
  };
  auto backward = [&](int64_t k) {
    const int s = static_cast<int>((v - 1 - (k / pp) % v) * pp + rank);
    out.push_back({PipelineAction::backward, s, next_b[static_cast<size_t>(s)]++});
  };
  for (int64_t k = 0; k < warmup; ++k) forward(k);
  for (int64_t k = warmup; k < total; ++k) {
    forward(k);
    backward(k - warmup);
  }
  for (int64_t k = total - warmup; k < total; ++k) backward(k);
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(const PipelinePlan& plan, int rank) {
  std::vector<PipelineAction> out;
  switch (plan.schedule) {
    case PipelineScheduleKind::gpipe:
      for (int64_t m = 0; m < plan.n_microbatches; ++m) out.push_back({PipelineAction::forward, rank, m});
      for (int64_t m = 0; m < plan.n_microbatches; ++m) out.push_back({PipelineAction::backward, rank, m});
      break;
    case PipelineScheduleKind::one_f_one_b: one_f_one_b(plan, rank, out); break;
    case PipelineScheduleKind::interleaved_1f1b: interleaved(plan, rank, out); break;
  }
  return out;
}

}  // namespace titan::distributed
