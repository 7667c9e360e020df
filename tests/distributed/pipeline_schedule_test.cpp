// The pipeline plan and schedules (titan/distributed/pipeline_schedule.h) without
// ranks: every schedule is run on a simulated pipeline with unbounded buffers (a
// forward waits for the previous stage's forward of its microbatch, a backward for the
// next stage's backward), which is how the runtime executes them (sends never block,
// receives do). A schedule that could deadlock, skip or repeat a microbatch, or run a
// stage's microbatches out of order fails here.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "titan/core/error.h"
#include "titan/distributed/pipeline_schedule.h"

namespace td = titan::distributed;

namespace {

td::PipelinePlan make_plan(td::PipelineScheduleKind k, int pp, int v, int64_t n, int64_t layers) {
  td::PipelinePlan p;
  p.schedule = k;
  p.pp = pp;
  p.stages_per_rank = v;
  p.n_microbatches = n;
  p.stages = td::split_stages(layers, pp * v);
  return p;
}

// Runs every rank's actions; returns the most activations one rank holds at once
// (forwards whose backward has not run), per rank. Fails the test on a deadlock.
std::vector<int> simulate(const td::PipelinePlan& plan) {
  const int V = plan.num_stages();
  std::vector<std::vector<td::PipelineAction>> acts(plan.pp);
  for (int r = 0; r < plan.pp; ++r) acts[r] = td::pipeline_actions(plan, r);
  std::set<std::pair<int, int64_t>> fwd_done, bwd_done;
  std::vector<size_t> pc(plan.pp, 0);
  std::vector<int> live(plan.pp, 0), peak(plan.pp, 0);
  for (;;) {
    bool progressed = false, all_done = true;
    for (int r = 0; r < plan.pp; ++r) {
      if (pc[r] == acts[r].size()) continue;
      all_done = false;
      const td::PipelineAction& a = acts[r][pc[r]];
      const bool ready = a.kind == td::PipelineAction::forward
                             ? a.stage == 0 || fwd_done.count({a.stage - 1, a.microbatch})
                             : fwd_done.count({a.stage, a.microbatch}) &&
                                   (a.stage == V - 1 || bwd_done.count({a.stage + 1, a.microbatch}));
      if (!ready) continue;
      if (a.kind == td::PipelineAction::forward) {
        fwd_done.insert({a.stage, a.microbatch});
        peak[r] = std::max(peak[r], ++live[r]);
      } else {
        bwd_done.insert({a.stage, a.microbatch});
        --live[r];
      }
      ++pc[r];
      progressed = true;
    }
    if (all_done) break;
    if (!progressed) {
      ADD_FAILURE() << td::pipeline_schedule_name(plan.schedule) << " pp=" << plan.pp << " v=" << plan.stages_per_rank
                    << " n=" << plan.n_microbatches << " deadlocks";
      break;
    }
  }
  EXPECT_EQ(fwd_done.size(), static_cast<size_t>(V * plan.n_microbatches));
  EXPECT_EQ(bwd_done.size(), static_cast<size_t>(V * plan.n_microbatches));
  return peak;
}

// Each rank runs exactly its stages, each stage's forwards and backwards once per
// microbatch and in microbatch order (the 1-rank accumulation order).
void expect_microbatch_order(const td::PipelinePlan& plan) {
  for (int r = 0; r < plan.pp; ++r) {
    std::map<int, int64_t> next_f, next_b;
    for (const td::PipelineAction& a : td::pipeline_actions(plan, r)) {
      EXPECT_EQ(plan.rank_of_stage(a.stage), r);
      auto& next = a.kind == td::PipelineAction::forward ? next_f : next_b;
      EXPECT_EQ(a.microbatch, next[a.stage]++) << "rank " << r << " stage " << a.stage;
    }
    for (int s : plan.stages_of_rank(r)) {
      EXPECT_EQ(next_f[s], plan.n_microbatches);
      EXPECT_EQ(next_b[s], plan.n_microbatches);
    }
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PipelineSchedule, EverySchedulePlaysOutInMicrobatchOrder) {
  for (int pp : {2, 3, 4})
    for (int64_t n : {1, 2, 3, 4, 8}) {
      for (auto k : {td::PipelineScheduleKind::gpipe, td::PipelineScheduleKind::one_f_one_b}) {
        const auto plan = make_plan(k, pp, 1, n, 8);
        expect_microbatch_order(plan);
        const std::vector<int> peak = simulate(plan);
        for (int r = 0; r < pp; ++r) {
          if (k == td::PipelineScheduleKind::gpipe)
            EXPECT_EQ(peak[r], n);  // GPipe holds every microbatch's activations
          else
            EXPECT_EQ(peak[r], std::min<int64_t>(n, pp - r));  // 1F1B: at most pp - r in flight
        }
      }
      if (n % pp == 0)
        for (int v : {2, 3}) {
          const auto plan = make_plan(td::PipelineScheduleKind::interleaved_1f1b, pp, v, n, 12);
          expect_microbatch_order(plan);
          simulate(plan);
        }
    }
}

TEST(PipelineSchedule, OneFOneBAlternatesAfterWarmup) {
  // Rank 0 of 2 with 4 microbatches: F0 | F1 B0 F2 B1 F3 B2 | B3 (Megatron's order).
  const auto plan = make_plan(td::PipelineScheduleKind::one_f_one_b, 2, 1, 4, 2);
  std::string s;
  for (const auto& a : td::pipeline_actions(plan, 0))
    s += (a.kind == td::PipelineAction::forward ? "F" : "B") + std::to_string(a.microbatch) + " ";
  EXPECT_EQ(s, "F0 F1 B0 F2 B1 F3 B2 B3 ");
}

TEST(PipelineSchedule, StagesFollowTorchTitansSplit) {
  // generate_llm_fqn_per_model_part with the embedding and head weighing one layer each.
  auto st = td::split_stages(2, 2);
  EXPECT_TRUE(st[0].embeddings && !st[0].head && st[0].first_layer == 0 && st[0].end_layer == 1);
  EXPECT_TRUE(!st[1].embeddings && st[1].head && st[1].first_layer == 1 && st[1].end_layer == 2);
  // 4 layers + 2 over 4 stages: 2, 2, 1, 1 effective layers -> [0,1) [1,3) [3,4) [4,4).
  st = td::split_stages(4, 4);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 1}, {1, 3}, {3, 4}, {4, 4}};
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(st[s].first_layer, want[s].first) << s;
    EXPECT_EQ(st[s].end_layer, want[s].second) << s;
  }
  EXPECT_TRUE(st[3].head && st[0].embeddings);
  // Every layer in exactly one stage, in order.
  for (int64_t L : {2, 5, 8, 13})
    for (int V = 2; V <= L; ++V) {
      st = td::split_stages(L, V);
      int64_t next = 0;
      for (const auto& x : st) {
        EXPECT_EQ(x.first_layer, next);
        next = x.end_layer;
      }
      EXPECT_EQ(next, L);
    }
}

TEST(PipelineSchedule, PlanRefusesBadLayouts) {
  titan::config::JobConfig job;
  job.model.tie_embeddings = false;
  job.training.local_batch_size = 4;
  job.parallelism.pipeline_parallel_microbatch_size = 2;
  job.parallelism.pipeline_parallel_schedule = "Interleaved1F1B";
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 3, false); }),
            "parallelism: 4 pipeline stages (pipeline_parallel_degree=2 × 2 per rank for Interleaved1F1B) are more "
            "stages than the model's 3 layers");
  EXPECT_EQ(td::plan_pipeline(job, 2, 4, false).n_microbatches, 2);
  job.parallelism.pipeline_parallel_microbatch_size = 4;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 4, false); }),
            "parallelism.pipeline_parallel_schedule=Interleaved1F1B needs the microbatches per run "
            "(training.local_batch_size 4 / pipeline_parallel_microbatch_size 4 = 1) to be a multiple of "
            "pipeline_parallel_degree=2");
  job.parallelism.pipeline_parallel_schedule = "1F1B";
  job.parallelism.pipeline_parallel_microbatch_size = 3;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 4, false); }),
            "parallelism.pipeline_parallel_microbatch_size=3 does not divide training.local_batch_size=4");
  job.parallelism.pipeline_parallel_microbatch_size = 1;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 4, true); }),
            "model.tie_embeddings=true with parallelism.pipeline_parallel_degree=2 is not supported: the embedding "
            "(first stage) and the LM head (last stage) would be one matrix on two ranks");
  job.parallelism.pipeline_parallel_schedule = "Zero Bubble";
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 4, false); }),
            "parallelism.pipeline_parallel_schedule='Zero Bubble' is not one of: GPipe, 1F1B, Interleaved1F1B");
  job.parallelism.pipeline_parallel_schedule = "GPipe";
  const auto plan = td::plan_pipeline(job, 2, 4, false);
  EXPECT_EQ(plan.num_stages(), 2);
  EXPECT_EQ(plan.n_microbatches, 4);
  // One rank: the whole model is one stage; a pipeline key off its default is refused.
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 1, 4, true); }),
            "parallelism.pipeline_parallel_schedule=GPipe needs pipeline_parallel_degree > 1");
  job.parallelism.pipeline_parallel_schedule = "1F1B";
  EXPECT_EQ(td::plan_pipeline(job, 1, 4, true).num_stages(), 1);
  job.parallelism.pipeline_parallel_microbatch_size = 2;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 1, 4, true); }),
            "parallelism.pipeline_parallel_microbatch_size=2 needs pipeline_parallel_degree > 1 (on one stage "
            "training.local_batch_size is the microbatch)");
}

TEST(PipelineSchedule, LayersPerStageIsTorchTitans) {
  titan::config::JobConfig job;
  job.training.local_batch_size = 4;
  job.parallelism.pipeline_parallel_microbatch_size = 1;
  job.parallelism.pipeline_parallel_schedule = "Interleaved1F1B";
  // ceil((10 + 2) / 2) = 6 stages: 3 per rank on 2 ranks, 2 layers each but the ends.
  job.parallelism.pipeline_parallel_layers_per_stage = 2;
  auto plan = td::plan_pipeline(job, 2, 10, false);
  EXPECT_EQ(plan.num_stages(), 6);
  EXPECT_EQ(plan.stages_per_rank, 3);
  EXPECT_EQ(plan.stages_of_rank(1), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(plan.stages[0].end_layer, 1);
  EXPECT_EQ(plan.stages[1].end_layer, 3);
  EXPECT_EQ(plan.stages[5].first_layer, 9);
  job.parallelism.pipeline_parallel_layers_per_stage = 4;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 6, false); }),
            "parallelism.pipeline_parallel_schedule=Interleaved1F1B needs at least 2 stages per rank, but "
            "pipeline_parallel_layers_per_stage=4 gives 1 (use 1F1B, or fewer layers per stage)");
  job.parallelism.pipeline_parallel_layers_per_stage = 3;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 6, false); }),
            "parallelism.pipeline_parallel_layers_per_stage=3 cuts the model's 6 layers (+ embedding and head) into "
            "3 stages, which pipeline_parallel_degree=2 does not divide");
  job.parallelism.pipeline_parallel_layers_per_stage = 1;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 6, false); }),
            "parallelism: 8 pipeline stages (pipeline_parallel_degree=2 × 4 per rank for Interleaved1F1B) are more "
            "stages than the model's 6 layers");
  job.parallelism.pipeline_parallel_schedule = "1F1B";
  job.parallelism.pipeline_parallel_layers_per_stage = 2;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 6, false); }),
            "parallelism.pipeline_parallel_schedule=1F1B runs one stage per rank, but "
            "pipeline_parallel_layers_per_stage=2 gives 2 per rank (Interleaved1F1B runs several)");
  job.parallelism.pipeline_parallel_layers_per_stage = 4;
  EXPECT_EQ(td::plan_pipeline(job, 2, 6, false).num_stages(), 2);
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 1, 6, false); }),
            "parallelism.pipeline_parallel_layers_per_stage=4 needs pipeline_parallel_degree > 1");
  job.parallelism.pipeline_parallel_layers_per_stage = -1;
  EXPECT_EQ(error_of([&] { td::plan_pipeline(job, 2, 6, false); }),
            "parallelism.pipeline_parallel_layers_per_stage=-1 must be >= 0 (0 = TorchTitan's default)");
}
