// The MoE feed-forward (models/ffn/moe.h) at module level:
//  - the sigmoid / group-limited router with a nonzero e_score_correction_bias, shared
//    experts and routed_scaling_factor against transformers' DeepseekV3MoE
//    (tests/reference/deepseek_moe_ref.py): output, routed ids, and the gradients of the
//    router, the experts, the shared expert and the input;
//  - batch invariance: a token's output has the same bits in batches of 1, 7 and 257
//    tokens and with 1 and 2 threads (memcmp), for both routers;
//  - the sequence aux loss's gradient against central finite differences of its value;
//  - the aux-loss-free bias update against TorchTitan's rule on the counted loads.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/oracle_util.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/models/ffn/moe.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;

using test::read_floats;
void write_floats(const fs::path& p, const std::vector<float>& v) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return d / m;
}
void set(Tensor t, const std::vector<float>& v) {
  autograd::NoGradGuard ng;
  t.copy_(Tensor::from_vector(v, t.shape()));
}

struct ThreadScope {
  int saved = num_threads();
  explicit ThreadScope(int n) { set_num_threads(n); }
  ~ThreadScope() { set_num_threads(saved); }
};

TransformerConfig deepseek_like() {
  TransformerConfig c;
  c.family = "qwen3_moe";  // any registered family: MoE behaviour comes from the fields
  c.hidden_size = 32;
  c.moe_intermediate_size = 16;
  c.num_experts = 8;
  c.num_experts_per_tok = 3;
  c.scoring_func = "sigmoid";
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  c.n_shared_experts = 1;
  return c;
}

TransformerConfig qwen_like() {
  TransformerConfig c;
  c.family = "qwen3_moe";
  c.hidden_size = 64;
  c.moe_intermediate_size = 48;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.norm_topk_prob = true;
  return c;
}

ForwardBatch batch_of(int64_t T) { return make_packed_batch({std::vector<int32_t>(static_cast<size_t>(T), 0)}); }

TEST(MoE, SigmoidGroupRouterMatchesTransformersDeepseekV3MoE) {
  char tmpl[] = "/tmp/titan_dsmoe_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const int64_t T = 33, D = 32, F = 16, E = 8;
  Tensor x = Tensor::randn({T, D}, 5), gy = Tensor::randn({T, D}, 6);
  write_floats(dir / "x.f32", x.to_vector<float>());
  write_floats(dir / "gy.f32", gy.to_vector<float>());
  const std::string cmd = "OMP_NUM_THREADS=1 '" + test::venv_python() + "' '" + std::string(TITAN_SOURCE_DIR) +
                          "/tests/reference/deepseek_moe_ref.py' make '" + dir.string() + "' > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  MoE moe(deepseek_like(), 0);
  set(moe.router->gate->weight, read_floats(dir / "router.f32"));
  set(moe.expert_bias, read_floats(dir / "bias.f32"));
  // transformers' fused gate_up_proj (E, 2F, D) = [w1; w3] per expert.
  const std::vector<float> gu = read_floats(dir / "gate_up.f32");
  std::vector<float> w1, w3;
  for (int64_t e = 0; e < E; ++e) {
    w1.insert(w1.end(), gu.begin() + e * 2 * F * D, gu.begin() + (e * 2 + 1) * F * D);
    w3.insert(w3.end(), gu.begin() + (e * 2 + 1) * F * D, gu.begin() + (e + 1) * 2 * F * D);
  }
  set(moe.experts->w1, w1);
  set(moe.experts->w3, w3);
  set(moe.experts->w2, read_floats(dir / "down.f32"));
  set(moe.shared_experts->w1->weight, read_floats(dir / "shared_gate.f32"));
  set(moe.shared_experts->w3->weight, read_floats(dir / "shared_up.f32"));
  set(moe.shared_experts->w2->weight, read_floats(dir / "shared_down.f32"));

  std::vector<Tensor> routed(1);
  ForwardBatch b = batch_of(T);
  b.routed_experts = &routed;
  Tensor xin = x.clone();
  xin.requires_grad_();
  Tensor y = moe.forward(xin, b, nullptr);
  const double ey = rel_err(y.detach().to_vector<float>(), read_floats(dir / "y.f32"));
  EXPECT_LE(ey, 1e-5);
  nlohmann::json ids = nlohmann::json::array();
  std::vector<int32_t> r = routed[0].to_vector<int32_t>();
  for (int64_t t = 0; t < T; ++t) ids.push_back(std::vector<int32_t>(r.begin() + t * 3, r.begin() + t * 3 + 3));
  EXPECT_EQ(ids, nlohmann::json::parse(std::ifstream(dir / "routing.json")));

  sum(mul(y, gy)).backward();
  const double er = rel_err(moe.router->gate->weight.grad().to_vector<float>(), read_floats(dir / "g_router.f32"));
  EXPECT_LE(er, 1e-4);
  std::printf("DeepseekV3MoE: output rel err %.3g, router grad rel err %.3g\n", ey, er);
  const std::vector<float> ggu = read_floats(dir / "g_gate_up.f32");
  std::vector<float> g1, g3;
  for (int64_t e = 0; e < E; ++e) {
    g1.insert(g1.end(), ggu.begin() + e * 2 * F * D, ggu.begin() + (e * 2 + 1) * F * D);
    g3.insert(g3.end(), ggu.begin() + (e * 2 + 1) * F * D, ggu.begin() + (e + 1) * 2 * F * D);
  }
  EXPECT_LE(rel_err(moe.experts->w1.grad().to_vector<float>(), g1), 1e-4);
  EXPECT_LE(rel_err(moe.experts->w3.grad().to_vector<float>(), g3), 1e-4);
  EXPECT_LE(rel_err(moe.experts->w2.grad().to_vector<float>(), read_floats(dir / "g_down.f32")), 1e-4);
  EXPECT_LE(rel_err(moe.shared_experts->w1->weight.grad().to_vector<float>(), read_floats(dir / "g_shared_gate.f32")),
            1e-4);
  EXPECT_LE(rel_err(moe.shared_experts->w2->weight.grad().to_vector<float>(), read_floats(dir / "g_shared_down.f32")),
            1e-4);
  EXPECT_LE(rel_err(xin.grad().to_vector<float>(), read_floats(dir / "g_x.f32")), 1e-4);
  fs::remove_all(dir);
}

void init_random(MoE& moe, uint64_t seed) {
  uint64_t s = seed;
  for (auto& [name, p] : moe.named_parameters()) set(p, Tensor::randn(p.shape(), ++s).to_vector<float>());
  // Spread the router so the choice is far from uniform.
  set(moe.router->gate->weight, Tensor::randn(moe.router->gate->weight.shape(), s + 100).to_vector<float>());
}

TEST(MoE, TokenOutputIsBatchInvariant) {
  for (const TransformerConfig& cfg : {qwen_like(), deepseek_like()}) {
    MoE moe(cfg, 0);
    init_random(moe, 40);
    if (moe.expert_bias.defined()) set(moe.expert_bias, Tensor::randn({cfg.num_experts}, 9, 0, DType::f32).to_vector<float>());
    const int64_t D = cfg.hidden_size;
    Tensor probe = Tensor::randn({1, D}, 77);
    std::vector<float> want;
    for (int threads : {1, 2})
      for (int64_t T : {1, 7, 257})
        for (bool grad : {false, true}) {
          ThreadScope ts(threads);
          Tensor x = Tensor::randn({T, D}, 100 + T);
          const int64_t at = T / 2;
          x.narrow(0, at, 1).copy_(probe);
          Tensor y;
          if (grad) {
            y = moe.forward(x, batch_of(T), nullptr);
          } else {
            autograd::NoGradGuard ng;
            y = moe.forward(x, batch_of(T), nullptr);
          }
          std::vector<float> row = y.detach().narrow(0, at, 1).contiguous().to_vector<float>();
          if (want.empty()) want = row;
          EXPECT_EQ(std::memcmp(want.data(), row.data(), D * sizeof(float)), 0)
              << cfg.scoring_func << " threads " << threads << " T " << T << " grad " << grad;
        }
  }
}

// The aux loss is reported in the stats; its gradient enters backward through the
// router logits. With a zero upstream gradient the gate's gradient is d aux / d W.
TEST(MoE, SequenceAuxLossGradientMatchesFiniteDifferences) {
  for (TransformerConfig cfg : {qwen_like(), deepseek_like()}) {
    cfg.router_aux_loss_coef = 0.1;
    MoE moe(cfg, 0);
    init_random(moe, 50);
    // Two sequences of 9 and 14 tokens.
    ForwardBatch b = make_packed_batch({std::vector<int32_t>(9, 0), std::vector<int32_t>(14, 0)});
    Tensor x = Tensor::randn({23, cfg.hidden_size}, 51, 0, DType::f32);
    auto aux_at = [&]() {
      moe.reset_stats();
      Tensor y = moe.forward(x, b, nullptr);
      return moe.stats().aux_loss_sum;
    };
    moe.reset_stats();
    Tensor y = moe.forward(x, b, nullptr);
    ASSERT_EQ(moe.stats().aux_batches, 1);
    EXPECT_GT(moe.stats().aux_loss_sum, 0.0);
    sum(mul(y, Tensor::zeros(y.shape()))).backward();
    std::vector<float> g = moe.router->gate->weight.grad().to_vector<float>();
    std::vector<float> w = moe.router->gate->weight.detach().to_vector<float>();
    double worst = 0, gmax = 0;
    const int64_t n = static_cast<int64_t>(w.size());  // num_experts × hidden_size
    for (int64_t i : {int64_t(0), int64_t(7), n / 3, 2 * n / 3, n - 1}) {
      const double h = 1e-2;
      std::vector<float> wp = w, wm = w;
      wp[i] += static_cast<float>(h);
      wm[i] -= static_cast<float>(h);
      set(moe.router->gate->weight, wp);
      const double ap = aux_at();
      set(moe.router->gate->weight, wm);
      const double am = aux_at();
      set(moe.router->gate->weight, w);
      const double fd = (ap - am) / (static_cast<double>(wp[i]) - wm[i]);
      worst = std::max(worst, std::fabs(fd - g[i]));
      gmax = std::max(gmax, std::fabs(fd));
    }
    EXPECT_GT(gmax, 1e-4) << cfg.scoring_func;
    std::printf("%s aux loss %.6g: max |fd - grad| %.3g of max |grad| %.3g\n", cfg.scoring_func.c_str(),
                moe.stats().aux_loss_sum, worst, gmax);
    EXPECT_LE(worst, 2e-3 * gmax + 1e-6) << cfg.scoring_func << " worst |fd - grad| " << worst << " of " << gmax;
  }
}

TEST(MoE, ExpertBiasUpdateFollowsTheLoads) {
  TransformerConfig cfg = deepseek_like();
  cfg.load_balance_coeff = 0.01;
  MoE moe(cfg, 0);
  init_random(moe, 60);
  std::vector<Tensor> routed(1);
  ForwardBatch b = batch_of(50);
  b.routed_experts = &routed;
  moe.forward(Tensor::randn({50, cfg.hidden_size}, 61), b, nullptr);
  std::vector<int64_t> load(8, 0);
  for (int32_t e : routed[0].to_vector<int32_t>()) ++load[static_cast<size_t>(e)];
  EXPECT_EQ(moe.stats().tokens_per_expert, load);
  EXPECT_EQ(moe.stats().tokens, 50);
  EXPECT_GT(moe.stats().entropy_sum, 0.0);
  const double mean = 50.0 * 3 / 8;
  std::vector<double> delta(8);
  double dm = 0;
  for (int e = 0; e < 8; ++e) {
    delta[e] = 0.01 * (mean > load[e] ? 1 : mean < load[e] ? -1 : 0);
    dm += delta[e] / 8;
  }
  moe.update_expert_bias();
  std::vector<float> bias = moe.expert_bias.to_vector<float>();
  for (int e = 0; e < 8; ++e) EXPECT_FLOAT_EQ(bias[e], static_cast<float>(delta[e] - dm)) << e;
  // No forward since: the next update is a no-op.
  moe.update_expert_bias();
  EXPECT_EQ(moe.expert_bias.to_vector<float>(), bias);
  // Inference forwards do not count.
  {
    autograd::NoGradGuard ng;
    moe.forward(Tensor::randn({50, cfg.hidden_size}, 62), b, nullptr);
  }
  moe.update_expert_bias();
  EXPECT_EQ(moe.expert_bias.to_vector<float>(), bias);
  // load_balance_coeff with the softmax router has no bias to update: refused.
  TransformerConfig bad = qwen_like();
  bad.load_balance_coeff = 0.01;
  EXPECT_THROW(MoE(bad, 0), Error);
}

}  // namespace
}  // namespace titan::models
