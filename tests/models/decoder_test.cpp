// The shared decoder against a PyTorch reference (tests/reference/decoder_ref.py) that
// loads the same safetensors: logits, loss and every parameter gradient, for a
// llama3-style (untied, GQA, llama3 RoPE scaling) and a qwen3-style (tied,
// QK-norm, head_dim != D/H) model on a packed batch of three documents.
// Tolerances: the reference runs in float64, so they bound titan's fp32 error:
// logits |Δ| <= 2e-4 + 1e-3|ref|, loss rel 1e-5, gradients |Δ| <= 1e-5·max|ref| + 1e-3|ref|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/ops/loss.h"

using namespace titan;
using namespace titan::models;

namespace {

std::vector<double> read_f64(const std::string& path, size_t n) {
  std::vector<double> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), n * 8);
  EXPECT_TRUE(f.good()) << path;
  return v;
}

TransformerConfig tiny(const std::string& fam) {
  TransformerConfig c;
  c.family = fam;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  if (fam == "qwen3") {
    c.head_dim = 16;  // != 48 / 4
    c.qk_norm = true;
    c.tie_word_embeddings = true;
    c.rope_theta = 1e6;
    c.rms_norm_eps = 1e-6;
  } else {
    c.head_dim = 12 + 4;  // 16, with D/H = 12 it is also independent
    c.rope_theta = 5e5;
    c.rope_scaling = {8.0, 1.0, 4.0, 32};
  }
  return c;
}

void run_case(const std::string& fam) {
  TransformerConfig cfg = tiny(fam);
  Decoder model(cfg);
  model.init_weights(7);
  {  // make norm weights non-trivial so their gradients and effect are tested
    autograd::NoGradGuard ng;
    uint64_t s = 100;
    for (auto& [n, p] : model.named_parameters())
      if (n.find("norm") != std::string::npos) {
        Tensor r = Tensor::randn(p.shape(), s++);
        float* pp = p.data<float>();
        const float* pr = r.data<float>();
        for (int64_t i = 0; i < p.numel(); ++i) pp[i] = 1.0f + 0.2f * pr[i];
      }
  }
  char tmpl[] = "/tmp/titan_decoder_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  save_safetensors(dir + "/model.safetensors", hf_state_dict(model), {});
  save_hf_config(dir + "/config.json", config_to_hf(cfg));

  std::vector<std::vector<int32_t>> docs = {{5, 17, 3, 90, 44}, {}, {8, 1, 2, 3, 4, 5, 6, 7, 8}};
  docs[1].resize(17);
  for (int i = 0; i < 17; ++i) docs[1][i] = (i * 37 + 11) % 97;
  ForwardBatch batch = make_packed_batch(docs);
  const int64_t T = batch.num_tokens();
  std::vector<int32_t> targets(T);
  auto tok = batch.tokens.to_vector<int32_t>();
  for (int64_t i = 0; i < T; ++i) targets[i] = (tok[i] * 3 + 1) % 97;
  targets[4] = -100;  // ignored
  nlohmann::json bj;
  bj["tokens"] = tok;
  bj["positions"] = batch.positions.to_vector<int32_t>();
  bj["cu_seqlens"] = batch.cu_seqlens.to_vector<int32_t>();
  bj["targets"] = targets;
  std::ofstream(dir + "/batch.json") << bj.dump();
  std::string cmd = "OMP_NUM_THREADS=1 /usr/bin/python3 " TITAN_SOURCE_DIR
                    "/tests/reference/decoder_ref.py " + dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  Tensor hidden = model.forward(batch);
  Tensor logits = model.logits(hidden);
  Tensor tgt = Tensor::from_vector(targets, {T});
  Tensor loss = cross_entropy(logits, tgt, -100);
  loss.backward();

  const int64_t V = cfg.vocab_size;
  auto ref_logits = read_f64(dir + "/ref_logits.f64", T * V);
  auto got = logits.to_vector<float>();
  double max_err = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    double err = std::fabs(got[i] - ref_logits[i]);
    max_err = std::max(max_err, err);
    ASSERT_LE(err, 2e-4 + 1e-3 * std::fabs(ref_logits[i])) << fam << " logit " << i;
  }
  double ref_loss = read_f64(dir + "/ref_loss.f64", 1)[0];
  EXPECT_NEAR(loss.item<float>(), ref_loss, 1e-5 * std::fabs(ref_loss)) << fam;
  int checked = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const std::string hn = to_hf_name(name);
    auto ref = read_f64(dir + "/grad." + hn + ".f64", p.numel());
    ASSERT_TRUE(p.grad().defined()) << name;
    auto g = p.grad().to_vector<float>();
    double gmax = 0;
    for (double r : ref) gmax = std::max(gmax, std::fabs(r));
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_LE(std::fabs(g[i] - ref[i]), 1e-5 * gmax + 1e-3 * std::fabs(ref[i]))
          << fam << " grad " << name << "[" << i << "] " << g[i] << " vs " << ref[i];
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(model.named_parameters().size()));
  std::printf("%s: max |logit err| %.3g, loss %.7f vs %.7f, %d gradients checked\n", fam.c_str(),
              max_err, loss.item<float>(), ref_loss, checked);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace

TEST(Decoder, Llama3MatchesPyTorch) { run_case("llama3"); }
TEST(Decoder, Qwen3MatchesPyTorch) { run_case("qwen3"); }

TEST(Decoder, ForwardIsDeterministicAndBatchInvariant) {
  // A document's hidden states do not depend on what it is packed with.
  TransformerConfig cfg = tiny("qwen3");
  Decoder model(cfg);
  model.init_weights(3);
  autograd::NoGradGuard ng;
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  std::vector<int32_t> b = {40, 41, 42};
  Tensor alone = model.forward(make_packed_batch({a}));
  Tensor packed = model.forward(make_packed_batch({b, a, b}));
  Tensor tail = packed.narrow(0, 3, 19).contiguous();
  EXPECT_EQ(0, std::memcmp(alone.data_ptr(), tail.data_ptr(), alone.nbytes()));
}

TEST(Decoder, BadInput) {
  TransformerConfig cfg = tiny("llama3");
  Decoder model(cfg);
  autograd::NoGradGuard ng;
  ForwardBatch b = make_packed_batch({{1, 2, 3}});
  b.tokens = Tensor::from_vector<int32_t>({1, 2, 500}, {3});
  EXPECT_THROW(model.forward(b), Error);
  std::vector<int32_t> longdoc(65, 1);
  try {
    model.forward(make_packed_batch({longdoc}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's context"), std::string::npos) << e.what();
  }
  cfg.num_key_value_heads = 3;
  EXPECT_THROW(Decoder bad(cfg), Error);
}
