// The decoder in bf16 compute (model.compute_dtype = bf16, titan/ops/bf16_compute.h)
// against PyTorch 2.13's bf16 autocast of the same model (tests/reference/
// decoder_bf16_ref.py, which also runs it in float64), plus the bitwise contracts in
// bf16: a document's hidden states do not depend on what it is packed with, and a
// forward is deterministic.
// Tolerances (bf16 has 8 significant bits, so the error of a bf16 model is set by
// how often values are rounded, not by a fixed bound): with e_torch = the error of
// PyTorch's bf16 run against float64 (max |Δ| over the logits / each gradient
// tensor, |Δ| for the loss),
//   - titan bf16 vs float64 <= 1.5 e_torch (titan's bf16 is as accurate as PyTorch's);
//   - titan bf16 vs PyTorch bf16 <= 2.5 e_torch;
//   - titan bf16 vs titan fp32 >= 0.1 e_torch (bf16 is really in effect).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/util/compare.h"
#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/kernels/cpu/bf16.h"
#include "titan/models/common/decoder.h"
#include "titan/models/family.h"
#include "titan/ops/loss.h"
#include "tests/util/venv_python.h"

using namespace titan;
using namespace titan::models;

namespace {

using test::read_f64;

TransformerConfig tiny(const std::string& fam) {
  TransformerConfig c;
  c.family = fam;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  if (fam == "qwen3") {
    c.qk_norm = true;
    c.tie_word_embeddings = true;
    c.rope_theta = 1e6;
    c.rms_norm_eps = 1e-6;
  } else {
    c.rope_theta = 5e5;
  }
  return c;
}

using test::max_abs_diff;

struct Run {
  std::vector<float> logits;
  double loss;
  std::vector<std::vector<float>> grads;  // named_parameters() order
};

Run run_titan(Decoder& model, const ForwardBatch& batch, const Tensor& targets, bool bf16) {
  model.set_compute_bf16(bf16);
  for (auto& [n, p] : model.named_parameters()) p.zero_grad();
  Tensor hidden = model.forward(batch);
  Tensor logits = model.logits(hidden);
  Tensor loss = cross_entropy(logits, targets, -100);
  loss.backward();
  Run r{logits.to_vector<float>(), loss.item<double>(), {}};
  for (auto& [n, p] : model.named_parameters()) r.grads.push_back(p.grad().to_vector<float>());
  return r;
}

void run_case(const std::string& fam) {
  const TransformerConfig cfg = tiny(fam);
  Decoder model(cfg);
  model.init_weights(7);
  char tmpl[] = "/tmp/titan_decoder_bf16_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  save_safetensors(dir + "/model.safetensors", hf_state_dict(model), {});
  save_hf_config(dir + "/config.json", config_to_hf(cfg));
  std::vector<std::vector<int32_t>> docs = {{5, 17, 3, 90, 44}, {}, {8, 1, 2, 3, 4, 5, 6, 7, 8}};
  for (int i = 0; i < 30; ++i) docs[1].push_back((i * 37 + 11) % 97);
  const ForwardBatch batch = make_packed_batch(docs);
  const int64_t T = batch.num_tokens();
  std::vector<int32_t> targets(static_cast<size_t>(T));
  const auto tok = batch.tokens.to_vector<int32_t>();
  for (int64_t i = 0; i < T; ++i) targets[i] = (tok[i] * 3 + 1) % 97;
  nlohmann::json bj;
  bj["tokens"] = tok;
  bj["positions"] = batch.positions.to_vector<int32_t>();
  bj["cu_seqlens"] = batch.cu_seqlens.to_vector<int32_t>();
  bj["targets"] = targets;
  std::ofstream(dir + "/batch.json") << bj.dump();
  // The oracle's own bf16 arithmetic depends on the CPU: on an AVX512_BF16 machine oneDNN
  // and ATen take native bf16 dot products (another accumulation than on AVX2), which moved
  // torch's gradient errors enough to change the titan/torch ratio by ~15 %. Pinning both to
  // their AVX2 paths makes the reference the same on every x86 machine, as titan's bits are.
  const std::string cmd = "OMP_NUM_THREADS=1 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 " +
                          test::venv_python() + " " TITAN_SOURCE_DIR
                          "/tests/reference/decoder_bf16_ref.py " + dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const Tensor tgt = Tensor::from_vector(targets, {T});
  const Run f32 = run_titan(model, batch, tgt, false);
  const Run bf = run_titan(model, batch, tgt, true);
  const Run bf_again = run_titan(model, batch, tgt, true);
  EXPECT_EQ(std::memcmp(bf.logits.data(), bf_again.logits.data(), bf.logits.size() * 4), 0);

  const size_t TV = static_cast<size_t>(T * cfg.vocab_size);
  const auto l64 = read_f64(dir + "/f64.logits.f64", TV), lbf = read_f64(dir + "/bf16.logits.f64", TV);
  const double e_torch = max_abs_diff(lbf, l64);
  const double e_titan = max_abs_diff(bf.logits, l64), d_torch = max_abs_diff(bf.logits, lbf);
  const double d_f32 = max_abs_diff(bf.logits, f32.logits);
  std::printf("%s logits: torch-bf16 err %.3g, titan-bf16 err %.3g, titan vs torch %.3g, bf16 vs f32 %.3g\n",
              fam.c_str(), e_torch, e_titan, d_torch, d_f32);
  EXPECT_LE(e_titan, 1.5 * e_torch);
  EXPECT_LE(d_torch, 2.5 * e_torch);
  EXPECT_GE(d_f32, 0.1 * e_torch);

  const double loss64 = read_f64(dir + "/f64.loss.f64", 1)[0], lossbf = read_f64(dir + "/bf16.loss.f64", 1)[0];
  const double el = std::max(std::fabs(lossbf - loss64), 1e-4 * std::fabs(loss64));
  std::printf("%s loss: f64 %.6f torch-bf16 %.6f titan-bf16 %.6f titan-f32 %.6f\n", fam.c_str(), loss64,
              lossbf, bf.loss, f32.loss);
  EXPECT_LE(std::fabs(bf.loss - loss64), 1.5 * el + 1e-4 * std::fabs(loss64));
  EXPECT_LE(std::fabs(bf.loss - lossbf), 2.5 * el);

  size_t i = 0;
  double worst = 0;
  for (auto& [name, p] : model.named_parameters()) {
    const std::string hn = to_hf_name(name);
    const auto g64 = read_f64(dir + "/f64.grad." + hn + ".f64", static_cast<size_t>(p.numel()));
    const auto gbf = read_f64(dir + "/bf16.grad." + hn + ".f64", static_cast<size_t>(p.numel()));
    const double eg = max_abs_diff(gbf, g64);
    const double et = max_abs_diff(bf.grads[i], g64), dt = max_abs_diff(bf.grads[i], gbf);
    worst = std::max(worst, et / eg);
    EXPECT_LE(et, 1.5 * eg) << fam << " grad " << name;
    EXPECT_LE(dt, 2.5 * eg) << fam << " grad " << name;
    ++i;
  }
  std::printf("%s: %zu gradients, worst titan/torch bf16 error ratio %.2f\n", fam.c_str(), i, worst);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace

TEST(DecoderBf16, Llama3MatchesPyTorchAutocast) { run_case("llama3"); }
TEST(DecoderBf16, Qwen3MatchesPyTorchAutocast) { run_case("qwen3"); }

TEST(DecoderBf16, BatchInvariantAndDeterministic) {
  Decoder model(tiny("qwen3"));
  model.init_weights(3);
  model.set_compute_bf16(true);
  autograd::NoGradGuard ng;
  std::vector<int32_t> a;
  for (int i = 0; i < 40; ++i) a.push_back((i * 13 + 5) % 97);
  const std::vector<int32_t> b = {40, 41, 42};
  Tensor alone = model.forward(make_packed_batch({a}));
  Tensor packed = model.forward(make_packed_batch({b, a, b}));
  Tensor tail = packed.narrow(0, 3, 40).contiguous();
  EXPECT_EQ(0, std::memcmp(alone.data_ptr(), tail.data_ptr(), alone.nbytes()));
  model.set_compute_bf16(false);
  Tensor f32 = model.forward(make_packed_batch({a}));
  EXPECT_NE(0, std::memcmp(alone.data_ptr(), f32.data_ptr(), alone.nbytes()));
}

TEST(DecoderBf16, Bf16PanelsForDecodeGiveTheSameLogits) {
  // repack_for_decode of a bf16-compute model stores the projections and the LM head
  // as bf16 panels (half the bytes; a tied head's panels beside the fp32 embedding);
  // the logits and logprobs keep their bits.
  for (const char* fam : {"llama3", "qwen3"}) {
    Decoder model(tiny(fam));
    model.init_weights(5);
    model.set_compute_bf16(true);
    autograd::NoGradGuard ng;
    const ForwardBatch b = make_packed_batch({{3, 1, 4, 1, 5, 9, 2, 6}, {5, 3, 5}});
    const Tensor hidden = model.forward(b);
    const Tensor before = model.logits(hidden);
    const Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {11});
    const Tensor lp_before = model.logprobs(hidden, targets, 0.9);
    EXPECT_TRUE(model.lm_head_bf16()) << fam;
    const int64_t head_f32 = model.lm_head_bytes();
    int64_t f32_bytes = 0, after_bytes = 0;
    for (auto& [n, p] : model.named_parameters()) f32_bytes += static_cast<int64_t>(p.nbytes());
    model.repack_for_decode();
    int64_t bf16_tensors = 0;
    for (auto& [n, p] : model.named_parameters()) {
      after_bytes += static_cast<int64_t>(p.nbytes());
      bf16_tensors += p.dtype() == DType::bf16;
    }
    const bool tied = model.config().tie_word_embeddings;
    // wq wk wv wo w1 w2 w3 per layer, and an untied output projection.
    EXPECT_EQ(bf16_tensors, 2 * 7 + (tied ? 0 : 1)) << fam;
    EXPECT_LT(after_bytes, f32_bytes) << fam;
    EXPECT_TRUE(model.lm_head_repacked() && model.lm_head_bf16()) << fam;
    const int64_t pw = kernels::cpu::gemm_bf16_panel_width();  // V = 97 rows of D = 64 in bf16 panels
    EXPECT_EQ(head_f32, 4 * 97 * 64) << fam;
    EXPECT_EQ(model.lm_head_bytes(), 2 * ((97 + pw - 1) / pw * pw) * 64) << fam;
    const Tensor hidden_after = model.forward(b);
    EXPECT_EQ(0, std::memcmp(hidden.data_ptr(), hidden_after.data_ptr(), hidden.nbytes())) << fam;
    const Tensor after = model.logits(hidden_after);
    EXPECT_EQ(0, std::memcmp(before.data_ptr(), after.data_ptr(), before.nbytes())) << fam;
    const Tensor lp_after = model.logprobs(hidden_after, targets, 0.9);
    EXPECT_EQ(0, std::memcmp(lp_before.data_ptr(), lp_after.data_ptr(), lp_before.nbytes())) << fam;
  }
}

TEST(DecoderBf16, HfSafetensorsInF16AndBf16Load) {
  // An HF checkpoint stored in bf16 or f16 loads as it is: every weight is the exact
  // widening of the stored value (the f32 weights rounded RNE when written).
  Decoder src(tiny("qwen3"));
  src.init_weights(4);
  TensorMap hf = hf_state_dict(src);
  for (DType dt : {DType::bf16, DType::f16}) {
    char tmpl[] = "/tmp/titan_hf_half_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string path = std::string(tmpl) + "/model.safetensors";
    TensorMap half;
    for (auto& [n, t] : hf) half[n] = t.to(dt);
    save_safetensors(path, half, {});
    const TensorMap back = load_safetensors(path);
    EXPECT_EQ(back.begin()->second.dtype(), dt);
    Decoder dst(tiny("qwen3"));
    {
      autograd::NoGradGuard ng;
      load_hf_state_dict(dst, back, tmpl);
    }
    for (auto& [name, p] : dst.named_parameters()) {
      const auto want = half.at(to_hf_name(name)).to(DType::f32).to_vector<float>();
      const auto got = p.to_vector<float>();
      ASSERT_EQ(std::memcmp(want.data(), got.data(), got.size() * 4), 0) << dtype_name(dt) << " " << name;
    }
    std::system(("rm -rf " + std::string(tmpl)).c_str());
  }
}

TEST(DecoderBf16, RefusesLayersItDoesNotCover) {
  const TransformerConfig c = flavor("qwen3_next", "debugmodel");
  try {
    Decoder m(c);
    m.set_compute_bf16(true);
    FAIL() << "bf16 compute accepted a gdn layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not supported for layer 0 (gdn+dense)"), std::string::npos) << e.what();
  }
}
