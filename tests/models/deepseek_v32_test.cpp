// deepseek_v32 family (MLA + DeepSeek sparse attention + DeepSeek-MoE) vs Hugging Face
// transformers (the PyPI venv): a tiny random DeepseekV32ForCausalLM whose indexer keeps 8
// keys per query of a 70-token sequence, saved with save_pretrained and loaded into titan
// through its config.json and safetensors; logits within 1e-4 · max |logit|, the routed
// experts identical, the gradient of every trained parameter within 1e-4 · max |HF
// gradient| (the indexer gets none, as in transformers); titan's export reloaded by
// transformers. The indexer's selection (ties to the earlier key) against a brute force.
// The generator's latent + indexer-key cache: prefill == token-by-token decode bitwise,
// batch invariance (1, 7, 257 tokens; 1 and 2 threads). Sizing of the published config
// against transformers' own count. Bad configs are one-line errors. The recipe trains.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/models/cache_util.h"
#include "tests/util/expect_error.h"
#include "tests/models/oracle_util.h"
#include "tests/util/titan_exe.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/thread_pool.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/models/mixers/dsa.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduce.h"

namespace titan::models {
namespace {

namespace fs = std::filesystem;
using test::generate_hidden;
using test::read_floats;
using test::rel_err;
using test::same_float_bits;
using test::train_hidden;

std::string ref_script() { return std::string(TITAN_SOURCE_DIR) + "/tests/reference/deepseek_v32_ref.py"; }
std::string run_py(const std::string& args) { return test::run_reference(ref_script(), args); }

nlohmann::json routing_json(const std::vector<Tensor>& routed) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t l = 0; l < routed.size(); ++l) {
    if (!routed[l].defined()) continue;
    const int64_t T = routed[l].size(0), K = routed[l].size(1);
    const std::vector<int32_t> v = routed[l].to_vector<int32_t>();
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t t = 0; t < T; ++t) rows.push_back(std::vector<int32_t>(v.begin() + t * K, v.begin() + (t + 1) * K));
    j[std::to_string(l)] = rows;
  }
  return j;
}

TEST(DeepseekV32, LogitsRoutingAndGradientsMatchTransformers) {
  char tmpl[] = "/tmp/titan_dsv32_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const auto seqs = test::oracle_sequences();
  std::ofstream(dir / "tokens.json") << nlohmann::json(seqs).dump();
  const int64_t T = 79, V = 128;
  const Tensor G = Tensor::randn({T, V}, 78);
  {
    std::ofstream g(dir / "g.bin", std::ios::binary);
    g.write(reinterpret_cast<const char*>(G.data<float>()), T * V * 4);
  }
  run_py("make '" + dir.string() + "' 8");
  const TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  EXPECT_EQ(cfg.family, "deepseek_v32");
  EXPECT_EQ(cfg.index_topk, 8);
  EXPECT_EQ(cfg.index_n_heads, 16);
  EXPECT_EQ(cfg.index_head_dim, 32);
  EXPECT_EQ(describe_layers(layer_specs(cfg)), "L0 dsa+dense, L1 dsa+moe");
  Decoder model(cfg);
  load_hf_state_dict(model, load_safetensors((dir / "model.safetensors").string()), dir.string());
  ForwardBatch b = make_packed_batch(seqs);
  std::vector<Tensor> routed;
  b.routed_experts = &routed;
  Tensor logits = model.logits(model.forward(b));
  sum(mul(logits, G)).backward();
  const std::vector<float> got = logits.detach().to_vector<float>();
  const double err = rel_err(got, read_floats(dir / "logits.bin"));
  EXPECT_LE(err, 1e-4) << "max |titan - HF| / max |HF logit|";
  std::printf("deepseek_v32 tiny (index_topk 8): logits max |titan - HF| / max |logit| = %.3g\n", err);
  std::ifstream rj(dir / "routing.json");
  EXPECT_EQ(routing_json(routed), nlohmann::json::parse(rj)) << "routed experts per token";

  const auto hf_grads = load_safetensors((dir / "grads.safetensors").string());
  Decoder hf_grad(cfg);
  load_hf_state_dict(hf_grad, hf_grads, "grads.safetensors");
  const auto want = hf_grad.named_parameters();
  const auto got_params = model.named_parameters();
  ASSERT_EQ(want.size(), got_params.size());
  double worst = 0;
  std::string worst_name;
  int indexer_params = 0;
  for (size_t i = 0; i < got_params.size(); ++i) {
    const auto& [name, p] = got_params[i];
    ASSERT_EQ(want[i].first, name);
    const std::vector<float> w = want[i].second.to_vector<float>();
    if (name.find(".indexer.") != std::string::npos) {
      // The reference trains the indexer only by its own loss: no gradient here or in HF.
      ++indexer_params;
      EXPECT_FALSE(p.grad().defined()) << name;
      EXPECT_EQ(*std::max_element(w.begin(), w.end(), [](float a, float c) { return std::fabs(a) < std::fabs(c); }),
                0.0f)
          << name;
      continue;
    }
    ASSERT_TRUE(p.grad().defined()) << name;
    const double e = rel_err(p.grad().to_vector<float>(), w);
    EXPECT_LE(e, 1e-4) << name;
    if (e > worst) worst = e, worst_name = name;
  }
  EXPECT_EQ(indexer_params, 2 * 5);  // wq_b, wk, k_norm weight + bias, weights_proj per layer
  std::printf("  gradients: worst max |titan - HF| / max |HF grad| = %.3g (%s)\n", worst, worst_name.c_str());

  const fs::path ex = dir / "export";
  fs::create_directories(ex);
  save_hf_config((ex / "config.json").string(), config_to_hf(cfg));
  save_safetensors((ex / "model.safetensors").string(), hf_state_dict(model));
  fs::copy_file(dir / "tokens.json", ex / "tokens.json");
  run_py("logits '" + ex.string() + "'");
  EXPECT_LE(rel_err(got, read_floats(ex / "logits.bin")), 1e-4) << "transformers on titan's export";
  std::ifstream rj2(ex / "routing.json");
  EXPECT_EQ(routing_json(routed), nlohmann::json::parse(rj2)) << "routed experts, transformers on the export";
  EXPECT_EQ(config_from_hf(load_hf_config(ex.string())).index_topk, 8);
  fs::remove_all(dir);
}

// ---- the indexer loss (DeepSeek-V3.2-Exp §2.1) against the float64 oracle.

// The tiny model of LogitsRoutingAndGradientsMatchTransformers with indexer_loss_coeff 0.5:
// per stage, the indexer_loss metric within 1e-4 of the oracle's L and the indexers'
// gradients within 1e-4 · max |0.5 · dL/dθ|; the logits and every other gradient keep
// the bits of coeff 0 (the loss adds gradient to the indexer only).
TEST(DeepseekV32, IndexerLossAndItsGradientMatchTheFloat64Oracle) {
  char tmpl[] = "/tmp/titan_dsv32_il_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  const auto seqs = test::oracle_sequences();
  std::ofstream(dir / "tokens.json") << nlohmann::json(seqs).dump();
  const int64_t T = 79, V = 128;
  const Tensor G = Tensor::randn({T, V}, 78);
  {
    std::ofstream g(dir / "g.bin", std::ios::binary);
    g.write(reinterpret_cast<const char*>(G.data<float>()), T * V * 4);
  }
  run_py("make '" + dir.string() + "' 8");
  const auto weights = load_safetensors((dir / "model.safetensors").string());
  TransformerConfig cfg = config_from_hf(load_hf_config(dir.string()));
  struct Run {
    std::vector<float> logits;
    std::vector<std::pair<std::string, Tensor>> params;
    std::map<std::string, double> metrics;
  };
  auto run = [&](double coeff, const std::string& stage) {
    TransformerConfig c = cfg;
    c.indexer_loss_coeff = coeff;
    c.indexer_loss_stage = stage;
    c.validate();
    auto model = std::make_shared<Decoder>(c);
    load_hf_state_dict(*model, weights, dir.string());
    Tensor logits = model->logits(model->forward(make_packed_batch(seqs)));
    sum(mul(logits, G)).backward();
    Run r{logits.detach().to_vector<float>(), model->named_parameters(), model->take_moe_metrics()};
    return std::pair{r, model};
  };
  const auto [base, base_model] = run(0.0, "dense");
  EXPECT_FALSE(base.metrics.count("indexer_loss"));
  for (const std::string stage : {"dense", "sparse"}) {
    run_py("indexer '" + dir.string() + "' " + stage);
    std::ifstream lj(dir / "indexer_loss.json");
    const double want = nlohmann::json::parse(lj).at("loss").get<double>();
    const auto [got, model] = run(0.5, stage);
    ASSERT_TRUE(got.metrics.count("indexer_loss")) << stage;
    const double loss = got.metrics.at("indexer_loss");
    EXPECT_LE(std::fabs(loss - want), 1e-4 * std::fabs(want)) << stage << ": titan " << loss << " oracle " << want;
    EXPECT_TRUE(same_float_bits(got.logits, base.logits)) << stage << ": the forward's value is unchanged";
    const auto want_grad = load_safetensors((dir / "indexer_grads.safetensors").string());
    double worst = 0;
    int indexer_params = 0;
    for (size_t i = 0; i < got.params.size(); ++i) {
      const auto& [name, p] = got.params[i];
      if (name.find(".indexer.") == std::string::npos) {
        ASSERT_TRUE(p.grad().defined()) << name;
        EXPECT_TRUE(same_float_bits(p.grad().to_vector<float>(), base.params[i].second.grad().to_vector<float>()))
            << stage << ": " << name;
        continue;
      }
      ++indexer_params;
      ASSERT_TRUE(p.grad().defined()) << stage << ": " << name;
      ASSERT_TRUE(want_grad.count(to_hf_name(name))) << to_hf_name(name);
      std::vector<float> w = want_grad.at(to_hf_name(name)).to_vector<float>();
      for (float& v : w) v *= 0.5f;
      const double e = rel_err(p.grad().to_vector<float>(), w);
      EXPECT_LE(e, 1e-4) << stage << ": " << name;
      worst = std::max(worst, e);
    }
    EXPECT_EQ(indexer_params, 2 * 5);
    std::printf("indexer loss (%s stage): titan %.8g, float64 oracle %.8g (rel %.3g); indexer gradients worst "
                "rel err %.3g\n", stage.c_str(), loss, want, std::fabs(loss - want) / std::fabs(want), worst);
  }
  fs::remove_all(dir);
}

// ---- the indexer's selection.

// The selection rule against a brute-force rank (the scores recomputed with the kernel's
// float loop): the k largest, ties to the earlier key, in ascending key order.
TEST(DeepseekV32, SelectionKeepsTheTopKTiesToTheEarlierKey) {
  const int64_t Hi = 3, Di = 8, n = 40;
  const Tensor q = Tensor::randn({Hi, Di}, 5), w = Tensor::randn({Hi}, 6), k = Tensor::randn({n, Di}, 7);
  std::vector<float> score(n);
  for (int64_t s = 0; s < n; ++s) {
    float acc = 0;
    for (int64_t h = 0; h < Hi; ++h) {
      float d = 0;
      for (int64_t e = 0; e < Di; ++e) d += q.data<float>()[h * Di + e] * k.data<float>()[s * Di + e];
      d *= 0.5f;
      if (d > 0) acc += w.data<float>()[h] * d;
    }
    score[static_cast<size_t>(s)] = acc;
  }
  for (int64_t topk : {1, 5, 17, 40, 64}) {
    std::vector<int32_t> got(static_cast<size_t>(topk));
    const int64_t c = dsa_select_topk(q.data<float>(), w.data<float>(), k.data<float>(), n, Hi, Di, 0.5f, topk,
                                      got.data());
    ASSERT_EQ(c, std::min(topk, n));
    std::vector<int32_t> want;
    for (int64_t s = 0; s < n; ++s) {
      int64_t better = 0;  // keys ranked above s
      for (int64_t r = 0; r < n; ++r)
        better += score[static_cast<size_t>(r)] > score[static_cast<size_t>(s)] ||
                  (score[static_cast<size_t>(r)] == score[static_cast<size_t>(s)] && r < s);
      if (better < topk) want.push_back(static_cast<int32_t>(s));
    }
    got.resize(static_cast<size_t>(c));
    EXPECT_EQ(got, want) << "topk " << topk;
  }
  // All keys equal: every score ties, the earliest keys win.
  const Tensor same = Tensor::ones({n, Di});
  std::vector<int32_t> got(6);
  ASSERT_EQ(dsa_select_topk(q.data<float>(), w.data<float>(), same.data<float>(), n, Hi, Di, 0.5f, 6, got.data()), 6);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

// ---- generator: the latent + indexer-key cache.

TransformerConfig small_dsa() {
  TransformerConfig c = flavor("deepseek_v32", "debugmodel");
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.first_k_dense_replace = 2;
  c.max_position_embeddings = 512;
  c.index_topk = 12;  // well below the 75- and 257-token sequences
  c.rope_scaling.rope_type = "yarn";
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 0.7;
  return c;
}

using test::tokens_of;

TEST(DeepseekV32, IndexerCachePrefillEqualsDecodeBitwise) {
  Decoder m(small_dsa());
  m.init_weights(3);
  autograd::NoGradGuard ng;
  const auto spec = m.cache_spec(32);
  ASSERT_EQ(spec[0].paged.size(), 3u);
  EXPECT_EQ(spec[0].paged[0].name, "latent");
  EXPECT_EQ(spec[0].paged[2].name, "indexer_k");
  EXPECT_EQ(spec[0].paged[2].shape, (std::vector<int64_t>{32, 32}));  // (B, index_head_dim)
  // (kv_lora_rank + rope + index_head_dim) floats per token and layer: 112 · 4 · 2 layers.
  EXPECT_EQ(cache_bytes_per_block(spec) / 32, 112 * 4 * 2);
  test::expect_prefill_equals_decode(m);
}

TEST(DeepseekV32, BatchInvariance1_7_257TokensAnd1_2Threads) {
  TransformerConfig c = small_dsa();
  c.first_k_dense_replace = 1;  // layer 1 MoE
  Decoder m(c);
  m.init_weights(4);
  test::expect_batch_invariant_1_7_257(m);
}

// With index_topk >= the sequence, DSA keeps every causal key: its output is MLA's (the
// same weights through MultiHeadLatentAttention's flash kernels), up to rounding.
TEST(DeepseekV32, KeepingEveryKeyIsMla) {
  TransformerConfig c = small_dsa();
  c.index_topk = 4096;
  Decoder dsa(c);
  dsa.init_weights(5);
  TransformerConfig mc = c;
  mc.family = "deepseek_v3";
  mc.index_topk = mc.index_n_heads = mc.index_head_dim = 0;
  Decoder mla(mc);
  autograd::NoGradGuard ng;
  std::map<std::string, Tensor> from;
  for (auto& [n, t] : dsa.named_parameters()) from[n] = t;
  for (auto& [n, t] : mla.named_parameters()) t.copy_(from.at(n));
  const std::vector<std::vector<int32_t>> docs = {tokens_of(70, 1), tokens_of(9, 2)};
  const double e = rel_err(train_hidden(dsa, docs), train_hidden(mla, docs));
  EXPECT_LE(e, 1e-5);
  std::printf("DSA keeping every key vs MLA: max |diff| / max |MLA| = %.3g\n", e);
}

// The sparse attention's gradient against central finite differences in double of its
// own forward (q, k, v each), with repeated and scattered selections.
TEST(DeepseekV32, SparseAttentionGradientMatchesFiniteDifferences) {
  const int64_t T = 5, N = 7, H = 2, Dk = 6, Dv = 4, S = 3;
  Tensor q = Tensor::randn({T, H, Dk}, 11), k = Tensor::randn({N, H, Dk}, 12), v = Tensor::randn({N, H, Dv}, 13);
  const std::vector<int32_t> sel = {0, 0, 0, 1, 3, 0, 2, 5, 6, 0, 4, 1, 6, 5, 3};
  const std::vector<int32_t> cnt = {1, 2, 3, 3, 3};
  const Tensor st = Tensor::from_vector(sel, {T, S}), ct = Tensor::from_vector(cnt, {T});
  const Tensor gy = Tensor::randn({T, H, Dv}, 14);
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
  sum(mul(dsa_sparse_attention(q, k, v, st, ct, 0.7), gy)).backward();
  auto loss = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
    autograd::NoGradGuard ng;
    const auto y = dsa_sparse_attention(qq, kk, vv, st, ct, 0.7).to_vector<float>();
    const auto g = gy.to_vector<float>();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * g[i];
    return s;
  };
  for (int which = 0; which < 3; ++which) {
    Tensor* x = which == 0 ? &q : which == 1 ? &k : &v;
    const auto grad = x->grad().to_vector<float>();
    std::vector<float> fd(grad.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      Tensor p = x->detach().clone(), m = x->detach().clone();
      const float h = 1e-2f;
      p.data<float>()[i] += h;
      m.data<float>()[i] -= h;
      const double lp = which == 0 ? loss(p, k, v) : which == 1 ? loss(q, p, v) : loss(q, k, p);
      const double lm = which == 0 ? loss(m, k, v) : which == 1 ? loss(q, m, v) : loss(q, k, m);
      fd[i] = static_cast<float>((lp - lm) / (2 * h));
    }
    EXPECT_LE(rel_err(grad, fd), 2e-3) << "input " << which;
  }
}

// ---- sizing.

TEST(DeepseekV32, PublishedShapesSizeThemselvesAsTransformersCounts) {
  const TransformerConfig c = flavor("deepseek_v32", "671B");
  c.validate();
  const double total = static_cast<double>(c.num_params()), active = static_cast<double>(c.num_active_params());
  // DeepSeek-V3.2-Exp: DeepSeek-V3's 671B / 37B plus 61 indexers of 14.0M (685B with the
  // 14B MTP module, which is not modelled).
  EXPECT_GE(total, 671.5e9);
  EXPECT_LE(total, 672.5e9);
  EXPECT_GE(active, 37.5e9);
  EXPECT_LE(active, 38.9e9);
  const auto hf = nlohmann::json::parse(run_py("count"));
  EXPECT_EQ(c.num_params(), hf.at("total").get<int64_t>()) << "transformers on the meta device";
  EXPECT_EQ(c.num_active_params(), hf.at("active").get<int64_t>());
  EXPECT_EQ(c.num_params() - flavor("deepseek_v3", "671B").num_params(),
            61 * (1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64));
  std::printf("deepseek_v32 671B: %.4g total, %.4g active parameters, %.4g train FLOPs/token at 4096\n", total,
              active, c.train_flops_per_token(4096));
}

TEST(DeepseekV32, FlavorsRoundTripThroughConfigJson) {
  for (const auto& [name, c] : family("deepseek_v32").flavors) {
    const HFConfig h = config_to_hf(c);
    EXPECT_EQ(h.architecture(), "DeepseekV32ForCausalLM");
    EXPECT_EQ(h.model_type, "deepseek_v32");
    EXPECT_FALSE(h.extra.contains("rope_interleave"));
    const TransformerConfig r = config_from_hf(parse_hf_config(hf_config_to_json(h), name));
    EXPECT_EQ(r.family, "deepseek_v32") << name;
    EXPECT_EQ(r.num_params(), c.num_params()) << name;
    EXPECT_EQ(r.num_active_params(), c.num_active_params()) << name;
    EXPECT_EQ(r.index_topk, c.index_topk);
    EXPECT_EQ(r.index_n_heads, c.index_n_heads);
    EXPECT_EQ(r.index_head_dim, c.index_head_dim);
    EXPECT_EQ(r.q_lora_rank, c.q_lora_rank);
    EXPECT_EQ(r.first_k_dense_replace, c.first_k_dense_replace);
    EXPECT_EQ(r.rope_scaling.factor, c.rope_scaling.factor);
    EXPECT_EQ(describe_layers(layer_specs(r)), describe_layers(layer_specs(c)));
  }
  EXPECT_EQ(describe_layers(layer_specs(flavor("deepseek_v32", "debugmodel"))), "L0 dsa+dense, L1-3 dsa+moe");
}

// ---- bad configs.

nlohmann::json good_config() {
  return {{"architectures", {"DeepseekV32ForCausalLM"}}, {"model_type", "deepseek_v32"}, {"vocab_size", 128},
          {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"q_lora_rank", 32}, {"kv_lora_rank", 32}, {"qk_rope_head_dim", 16}, {"qk_nope_head_dim", 16},
          {"v_head_dim", 24}, {"n_routed_experts", 4}, {"num_experts_per_tok", 2}, {"n_group", 2},
          {"topk_group", 1}, {"moe_intermediate_size", 32}, {"first_k_dense_replace", 1}, {"index_topk", 8},
          {"index_n_heads", 4}, {"index_head_dim", 32}};
}

void expect_error(const nlohmann::json& j, const std::string& needle) {
  test::expect_one_line_error([&] { config_from_hf(parse_hf_config(j, "test")); }, needle);
}

TEST(DeepseekV32, BadHfConfigsAreOneLineErrorsNamingTheField) {
  EXPECT_NO_THROW(config_from_hf(parse_hf_config(good_config(), "test")));
  auto j = good_config();
  j["model_type"] = "deepseek_v3";
  expect_error(j, "model_type 'deepseek_v3' is not one titan knows for DeepseekV32ForCausalLM");
  j = good_config();
  j["q_lora_rank"] = nullptr;
  expect_error(j, "'q_lora_rank' must be an integer");
  j = good_config();
  j["index_topk"] = 0;
  expect_error(j, "index_topk must be > 0");
  j = good_config();
  j["index_head_dim"] = 8;
  expect_error(j, "index_head_dim (8) must be in [qk_rope_head_dim = 16");
  j = good_config();
  j["index_n_heads"] = 2.5;
  expect_error(j, "field 'index_n_heads' must be an integer");
  j = good_config();
  j["indexer_loss_coeff"] = 0.1;
  j["indexer_loss_stage"] = "sparse";
  EXPECT_NO_THROW(config_from_hf(parse_hf_config(j, "test")));
  j["indexer_loss_coeff"] = -0.1;
  expect_error(j, "indexer_loss_coeff must be a finite number >= 0 (0 = off), got -0.1");
  j["indexer_loss_coeff"] = "0.1";
  expect_error(j, "field 'indexer_loss_coeff' must be a number");
  j["indexer_loss_coeff"] = 0.1;
  j["indexer_loss_stage"] = "warmup";
  expect_error(j, "indexer_loss_stage 'warmup' is not supported (dense, sparse)");
  {
    TransformerConfig c = config_from_hf(parse_hf_config(good_config(), "test"));
    c.indexer_loss_coeff = std::numeric_limits<double>::infinity();
    test::expect_one_line_error([&] { c.validate(); }, "indexer_loss_coeff must be a finite number >= 0");
    c.indexer_loss_coeff = std::nan("");
    test::expect_one_line_error([&] { c.validate(); }, "indexer_loss_coeff must be a finite number >= 0");
  }
  j = good_config();
  j["mlp_layer_types"] = {"dense", "dense"};
  expect_error(j, "'mlp_layer_types'[1]");
  j = good_config();
  j["layer_types"] = {"indexed_attention", "full_attention"};
  expect_error(j, "'layer_types'[1]");
  j = good_config();
  j["rope_interleave"] = false;
  expect_error(j, "'rope_interleave' = false");
  j = good_config();
  j["topk_group"] = 3;
  expect_error(j, "topk_group (3) must be <= n_group (2)");
}

// deepseek_v32_debugmodel (MLA + DSA keeping 16 of 32 keys, one dense layer, then MoE) on
// the shipped text: the loss falls and titan generate decodes through the engine's cache.
TEST(DeepseekV32, RecipeLossFallsAndGenerates) {
  char tmpl[] = "/tmp/titan_dsv32_train_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir(tmpl);
  const std::string cmd = "'" + test::titan_exe() + "' train --recipe deepseek_v32_debugmodel --job.dump_folder='" +
                          dir + "' --checkpoint.enable=true --validation.enabled=false > '" + dir + "/log.txt' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string gen = "'" + test::titan_exe() + "' generate --checkpoint '" + dir +
                          "/checkpoint/step-30' --prompt ROMEO: --max-tokens 40 --temperature 0 > '" + dir +
                          "/gen.txt' 2>&1";
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  std::ifstream g(dir + "/gen.txt");
  const std::string gen_out((std::istreambuf_iterator<char>(g)), {});
  EXPECT_NE(gen_out.find("ROMEO:"), std::string::npos) << gen_out;
  EXPECT_NE(gen_out.find("40 generated tokens"), std::string::npos) << gen_out;
  std::vector<double> loss;
  std::ifstream f(dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) loss.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(loss.size(), 20u);
  std::printf("deepseek_v32_debugmodel: loss %.4f -> %.4f over %zu steps\n", loss.front(), loss.back(), loss.size());
  EXPECT_LT(loss.back(), loss.front() - 1.0);
  fs::remove_all(dir);
}

// The indexer loss in training: deepseek_v32_debugmodel with indexer_loss_coeff 1 (dense
// warm-up stage) ends 30 steps with a lower indexer_loss than an untrained indexer; an explicit coeff 0 gives
// the bits of the recipe's run (losses and gradient norms of 10 steps).
TEST(DeepseekV32, IndexerLossFallsInTrainingAndCoeff0IsTheOldRun) {
  char tmpl[] = "/tmp/titan_dsv32_ilt_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  std::ifstream rf(std::string(TITAN_SOURCE_DIR) + "/recipes/deepseek_v32_debugmodel.json");
  const nlohmann::json recipe = nlohmann::json::parse(rf);
  auto write_config = [&](const std::string& name, double coeff) {
    nlohmann::json j = recipe;
    j["indexer_loss_coeff"] = coeff;
    std::ofstream(dir / name) << j.dump(2);
    return (dir / name).string();
  };
  auto train = [&](const std::string& run, const std::string& extra) {
    const fs::path out = dir / run;
    const std::string cmd = "'" + test::titan_exe() + "' train --recipe deepseek_v32_debugmodel --job.dump_folder='" +
                            out.string() + "' --validation.enabled=false --checkpoint.enable=false " + extra + " > '" +
                            out.string() + ".log' 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::vector<nlohmann::json> rows;
    std::ifstream f(out / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("loss")) rows.push_back(j);
    }
    return rows;
  };
  const auto old_run = train("old", "--training.steps=10");
  const auto zero = train("zero", "--training.steps=10 --model.hf_config='" + write_config("c0.json", 0.0) + "'");
  ASSERT_EQ(old_run.size(), 10u);
  ASSERT_EQ(zero.size(), old_run.size());
  for (size_t i = 0; i < old_run.size(); ++i) {
    EXPECT_EQ(zero[i].at("loss").get<double>(), old_run[i].at("loss").get<double>()) << "step " << i + 1;
    EXPECT_EQ(zero[i].at("grad_norm").get<double>(), old_run[i].at("grad_norm").get<double>()) << "step " << i + 1;
    EXPECT_FALSE(zero[i].contains("indexer_loss"));
  }
  // The main model trains too, so its attention sharpens and the KL target moves: the
  // comparison is against the same run with coeff 1e-12 (gradients far below AdamW's eps:
  // the indexer stays as initialised, the rest trains as with coeff 1).
  auto indexer_losses = [&](const std::string& run, double coeff) {
    const auto rows = train(run, "--model.hf_config='" + write_config(run + ".json", coeff) + "'");
    std::vector<double> il;
    for (const auto& r : rows) {
      EXPECT_TRUE(r.contains("indexer_loss")) << r.dump();
      il.push_back(r.value("indexer_loss", 0.0));
    }
    return std::pair{il, rows};
  };
  const auto [on, on_rows] = indexer_losses("on", 1.0);
  const auto [off, off_rows] = indexer_losses("off", 1e-12);
  ASSERT_EQ(on.size(), 30u);
  ASSERT_EQ(off.size(), 30u);
  auto last3 = [](const std::vector<double>& v) { return (v[27] + v[28] + v[29]) / 3; };
  std::printf("deepseek_v32_debugmodel, indexer_loss (dense stage, mean of steps 28-30): coeff 1 %.5f, coeff 1e-12 "
              "%.5f (step 1: %.5f); LM loss %.4f -> %.4f\n", last3(on), last3(off), on[0],
              on_rows.front().at("loss").get<double>(), on_rows.back().at("loss").get<double>());
  EXPECT_LT(last3(on), 0.8 * last3(off));  // measured: 0.71x
  EXPECT_LT(on_rows.back().at("loss").get<double>(), on_rows.front().at("loss").get<double>() - 1.0)
      << "the LM still trains";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan::models
