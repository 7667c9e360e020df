// `titan plan`: the per-rank memory and communication of a training layout, from the
// model's parameter shapes and the shard rules of the real shards (no run;
// titan/distributed/parallel_plan.h). Without options it prints the two 512-rank
// layouts of docs/distributed.md: DeepSeek-V3-671B on pp 8 × dp_shard 64 with ep 64,
// and Llama-3-405B on FSDP 8 × TP 8 × PP 8.
#include <fmt/core.h>

#include "titan/cli/command.h"
#include "titan/core/error.h"
#include "titan/distributed/parallel_plan.h"

namespace {

struct PlanArgs {
  std::string model;
  titan::distributed::PlanLayout layout;
};

titan::distributed::PlanLayout default_layout(const std::string& model) {
  titan::distributed::PlanLayout l;
  if (model == "deepseek_v3_671b") {
    l.pp = 8;
    l.dp_shard = 64;
    l.ep = 64;
    l.seq = 4096;
    l.global_batch = 1024;
  } else {
    l.pp = 8;
    l.dp_shard = 8;
    l.tp = 8;
    l.seq = 8192;
    l.global_batch = 128;
  }
  return l;
}

void setup_plan(CLI::App& app, std::function<int()>& run) {
  auto a = std::make_shared<PlanArgs>();
  auto* layout = &a->layout;
  app.add_option("--model", a->model, "deepseek_v3_671b | llama3_405b (default: both, on their 512-rank layouts)")
      ->check(CLI::IsMember({"deepseek_v3_671b", "llama3_405b"}));
  for (auto [flag, field] : {std::pair<const char*, int*>{"--pp", &layout->pp}, {"--dp-replicate", &layout->dp_replicate},
                             {"--dp-shard", &layout->dp_shard}, {"--cp", &layout->cp}, {"--tp", &layout->tp},
                             {"--ep", &layout->ep}})
    app.add_option(flag, *field, "degree (with --model; the others keep the model's default layout)");
  app.add_option("--seq", layout->seq, "sequence length (tokens)");
  app.add_option("--global-batch", layout->global_batch, "sequences per step");
  app.add_option("--microbatch", layout->microbatch, "sequences per microbatch");
  run = [a, &app] {
    using namespace titan::distributed;
    std::vector<std::string> models = {"deepseek_v3_671b", "llama3_405b"};
    bool overridden = false;
    for (const char* f : {"--pp", "--dp-replicate", "--dp-shard", "--cp", "--tp", "--ep", "--seq", "--global-batch",
                          "--microbatch"})
      overridden = overridden || app.count(f) > 0;
    TITAN_CHECK(!overridden || !a->model.empty(), "titan plan: layout options need --model (which model's layout)");
    if (!a->model.empty()) models = {a->model};
    for (const std::string& name : models) {
      PlanLayout l = default_layout(name);
      if (!a->model.empty()) {
        const PlanLayout& o = a->layout;
        auto pick = [&](const char* flag, auto ov, auto dv) { return app.count(flag) ? ov : dv; };
        l.pp = pick("--pp", o.pp, l.pp);
        l.dp_replicate = pick("--dp-replicate", o.dp_replicate, l.dp_replicate);
        l.dp_shard = pick("--dp-shard", o.dp_shard, l.dp_shard);
        l.cp = pick("--cp", o.cp, l.cp);
        l.tp = pick("--tp", o.tp, l.tp);
        l.ep = pick("--ep", o.ep, l.ep);
        l.seq = pick("--seq", o.seq, l.seq);
        l.global_batch = pick("--global-batch", o.global_batch, l.global_batch);
        l.microbatch = pick("--microbatch", o.microbatch, l.microbatch);
      }
      const PlanModel m = name == "deepseek_v3_671b" ? deepseek_v3_671b() : llama3_405b();
      fmt::print("{}\n", plan_report(plan_layout(m, l)));
    }
    return 0;
  };
}

}  // namespace

TITAN_REGISTER_COMMAND(plan, "Per-rank memory and communication of a training layout (a model, no run)", setup_plan);
