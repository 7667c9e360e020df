#include "titan/checkpoint/llama2c.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/checkpoint/helpers.h"
#include "titan/config/resolve.h"
#include "titan/core/fs.h"

using namespace titan;
using namespace titan::test;

namespace {

std::string stories260k() { return config::shared_data_dir() + "/stories260k/stories260K.bin"; }

// A synthetic legacy file whose floats are 0, 1, 2, ... so slices are easy to check.
std::string synthetic(int32_t dim, int32_t hidden, int32_t layers, int32_t heads, int32_t kv, int32_t vocab,
                      int32_t seq, int64_t nfloats) {
  int32_t h[7] = {dim, hidden, layers, heads, kv, vocab, seq};
  std::string s(reinterpret_cast<const char*>(h), 28);
  for (int64_t i = 0; i < nfloats; ++i) {
    float f = static_cast<float>(i);
    s.append(reinterpret_cast<const char*>(&f), 4);
  }
  return s;
}

// y = W x in double; W (rows, cols) f32.
std::vector<double> matvec(const Tensor& w, const std::vector<double>& x) {
  const int64_t R = w.size(0), C = w.size(1);
  std::vector<double> y(R, 0.0);
  const float* p = w.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) y[r] += static_cast<double>(p[r * C + c]) * x[c];
  return y;
}

void rope_interleaved(std::vector<double>& v, int64_t pos, int64_t hs) {  // run.c
  for (size_t i = 0; i < v.size(); i += 2) {
    const double a = pos * std::pow(10000.0, -static_cast<double>(i % hs) / hs);
    const double x0 = v[i], x1 = v[i + 1];
    v[i] = x0 * std::cos(a) - x1 * std::sin(a);
    v[i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
  }
}

void rope_rotate_half(std::vector<double>& v, int64_t pos, int64_t hs) {  // HF Llama
  for (size_t h = 0; h < v.size(); h += hs)
    for (int64_t i = 0; i < hs / 2; ++i) {
      const double a = pos * std::pow(10000.0, -2.0 * i / hs);
      const double x0 = v[h + i], x1 = v[h + i + hs / 2];
      v[h + i] = x0 * std::cos(a) - x1 * std::sin(a);
      v[h + i + hs / 2] = x0 * std::sin(a) + x1 * std::cos(a);
    }
}

}  // namespace

TEST(Llama2c, Stories260KShapesConsumeTheFile) {
  const Llama2cModel m = load_llama2c(stories260k());
  const Llama2cConfig& c = m.config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_size(), 8);
  EXPECT_EQ(m.weights.size(), 2u + 9 * 5);  // embed + norm + 9 per layer, no lm_head
  EXPECT_FALSE(m.weights.count("lm_head.weight"));
  EXPECT_EQ(m.weights.at("model.layers.4.self_attn.k_proj.weight").shape(), (Shape{32, 64}));
  EXPECT_EQ(m.weights.at("model.layers.0.mlp.gate_proj.weight").shape(), (Shape{172, 64}));
  EXPECT_EQ(m.weights.at("model.layers.0.mlp.down_proj.weight").shape(), (Shape{64, 172}));
  int64_t floats = m.freq_cis_real.numel() + m.freq_cis_imag.numel();
  for (const auto& [name, t] : m.weights) floats += t.numel();
  EXPECT_EQ(floats, 264128);
  EXPECT_EQ(28 + 4 * floats, static_cast<int64_t>(read_file(stories260k()).size()));

  // The stored RoPE tables are cos/sin(pos * 10000^(-2i/head_size)) (float32 in the file).
  for (int64_t p : {0, 1, 7, 300, 511})
    for (int64_t i = 0; i < 4; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / 8);
      EXPECT_NEAR(m.freq_cis_real.data<float>()[p * 4 + i], std::cos(a), 1e-4) << p << "," << i;
      EXPECT_NEAR(m.freq_cis_imag.data<float>()[p * 4 + i], std::sin(a), 1e-4) << p << "," << i;
    }

  const HFConfig hf = llama2c_to_hf_config(c);
  EXPECT_TRUE(hf.is_llama());
  EXPECT_EQ(hf.num_key_value_heads, 4);
  EXPECT_EQ(hf.head_dim, 8);
  EXPECT_EQ(hf.rms_norm_eps, 1e-5);
  EXPECT_TRUE(hf.tie_word_embeddings);
  EXPECT_EQ(hf.max_position_embeddings, 512);
}

TEST(Llama2c, SyntheticOrderAndUnsharedClassifier) {
  // D=8, F=12, L=2, H=2, Hkv=1 (hs=4, Dkv=4), V=5 unshared, seq=3.
  const int64_t D = 8, F = 12, L = 2, V = 5, Dkv = 4, seq = 3;
  const int64_t per_layer = D + D * D + 2 * Dkv * D + D * D + D + 3 * F * D;
  const int64_t n = V * D + L * per_layer + D + 2 * seq * 2 + V * D;
  TempDir d;
  write_raw(d / "s.bin", synthetic(8, 12, 2, 2, 1, -5, 3, n));
  const Llama2cModel m = load_llama2c(d / "s.bin", Llama2cRope::interleaved);
  EXPECT_FALSE(m.config.shared_classifier);
  EXPECT_EQ(m.config.vocab_size, 5);
  auto first = [&](const std::string& name) { return m.weights.at(name).data<float>()[0]; };
  // Block starts in run.c order: each kind holds all L layers before the next kind.
  int64_t off = V * D;
  EXPECT_EQ(first("model.layers.0.input_layernorm.weight"), off);
  EXPECT_EQ(first("model.layers.1.input_layernorm.weight"), off + D);
  off += L * D;
  EXPECT_EQ(first("model.layers.1.self_attn.q_proj.weight"), off + D * D);
  off += L * D * D;
  EXPECT_EQ(first("model.layers.0.self_attn.k_proj.weight"), off);
  off += L * Dkv * D;
  EXPECT_EQ(first("model.layers.0.self_attn.v_proj.weight"), off);
  off += L * Dkv * D;
  EXPECT_EQ(first("model.layers.0.self_attn.o_proj.weight"), off);
  off += L * D * D;
  EXPECT_EQ(first("model.layers.1.post_attention_layernorm.weight"), off + D);
  off += L * D;
  EXPECT_EQ(first("model.layers.0.mlp.gate_proj.weight"), off);
  off += L * F * D;
  EXPECT_EQ(first("model.layers.1.mlp.down_proj.weight"), off + D * F);
  off += L * D * F;
  EXPECT_EQ(first("model.layers.0.mlp.up_proj.weight"), off);
  off += L * F * D;
  EXPECT_EQ(first("model.norm.weight"), off);
  off += D;
  EXPECT_EQ(m.freq_cis_real.data<float>()[0], off);
  EXPECT_EQ(m.freq_cis_imag.data<float>()[0], off + seq * 2);
  EXPECT_EQ(first("lm_head.weight"), off + 2 * seq * 2);
  EXPECT_EQ(m.weights.at("lm_head.weight").data<float>()[V * D - 1], n - 1);
  EXPECT_FALSE(llama2c_to_hf_config(m.config).tie_word_embeddings);
}

TEST(Llama2c, RotateHalfPermutation) {
  const Llama2cModel raw = load_llama2c(stories260k(), Llama2cRope::interleaved);
  const Llama2cModel hf = load_llama2c(stories260k());
  const int64_t H = 8, Hkv = 4, hs = 8;
  for (int64_t l = 0; l < 5; ++l) {
    const std::string p = fmt::format("model.layers.{}.self_attn.", l);
    for (auto [name, heads] : {std::pair{"q_proj.weight", H}, {"k_proj.weight", Hkv}}) {
      const Tensor& a = raw.weights.at(p + name);
      const Tensor& b = hf.weights.at(p + name);
      // new row h*hs + t*hs/2 + i == old row h*hs + 2i + t
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < 2; ++t)
          for (int64_t i = 0; i < hs / 2; ++i)
            ASSERT_EQ(std::memcmp(b.data<float>() + (h * hs + t * hs / 2 + i) * 64,
                                  a.data<float>() + (h * hs + 2 * i + t) * 64, 64 * 4), 0);
      Tensor back = permute_rotate_half_inverse(b, heads);
      ASSERT_EQ(std::memcmp(back.data_ptr(), a.data_ptr(), a.nbytes()), 0);
    }
    // Other weights are not touched.
    EXPECT_EQ(std::memcmp(raw.weights.at(p + "v_proj.weight").data_ptr(),
                          hf.weights.at(p + "v_proj.weight").data_ptr(), 32 * 64 * 4), 0);
  }

  // Attention scores of layer 0 agree: interleaved RoPE on the file's weights vs
  // rotate-half RoPE on the permuted weights (double precision).
  const Tensor& emb = raw.weights.at("model.embed_tokens.weight");
  auto x_of = [&](int64_t tok) {
    std::vector<double> x(64);
    for (int j = 0; j < 64; ++j) x[j] = emb.data<float>()[tok * 64 + j];
    return x;
  };
  for (auto [tq, tk, pq, pk] : {std::array<int64_t, 4>{5, 9, 7, 3}, {100, 1, 300, 299}, {17, 17, 511, 12}}) {
    auto q0 = matvec(raw.weights.at("model.layers.0.self_attn.q_proj.weight"), x_of(tq));
    auto k0 = matvec(raw.weights.at("model.layers.0.self_attn.k_proj.weight"), x_of(tk));
    auto q1 = matvec(hf.weights.at("model.layers.0.self_attn.q_proj.weight"), x_of(tq));
    auto k1 = matvec(hf.weights.at("model.layers.0.self_attn.k_proj.weight"), x_of(tk));
    rope_interleaved(q0, pq, hs);
    rope_interleaved(k0, pk, hs);
    rope_rotate_half(q1, pq, hs);
    rope_rotate_half(k1, pk, hs);
    for (int64_t h = 0; h < H; ++h) {
      double s0 = 0, s1 = 0;
      for (int64_t j = 0; j < hs; ++j) {
        s0 += q0[h * hs + j] * k0[(h / 2) * hs + j];
        s1 += q1[h * hs + j] * k1[(h / 2) * hs + j];
      }
      EXPECT_NEAR(s0, s1, 1e-12 * std::max(1.0, std::fabs(s0))) << "head " << h;
    }
  }
}

TEST(Llama2c, PythonReferenceAgrees) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 not available";
  TempDir d;
  save_safetensors(d / "ours.safetensors", load_llama2c(stories260k()).weights);
  std::string out;
  EXPECT_EQ(run_python("llama2c_rope.py", stories260k() + " " + (d / "ours.safetensors"), out), 0) << out;
  EXPECT_NE(out.find("OK 47 tensors"), std::string::npos) << out;
}

TEST(Llama2c, BadFiles) {
  TempDir d;
  const std::string good = read_file(stories260k());
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "none.bin"); }, {"llama2.c", "none.bin", "file not found"}));
  write_raw(d / "cut.bin", good.substr(0, good.size() - 4));
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "cut.bin"); },
                          {"llama2.c", "cut.bin", "truncated file", "dim=64", "needs 1056540 bytes",
                           "264128 floats", "file has 1056536"}));
  write_raw(d / "long.bin", good + "xxxx");
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "long.bin"); }, {"long.bin", "oversized", "file has 1056544"}));
  write_raw(d / "hdr.bin", good.substr(0, 20));
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "hdr.bin"); }, {"hdr.bin", "20 bytes", "28-byte header"}));
  std::string v1 = good.substr(0, 100);
  const int32_t magic = 0x616b3432;
  std::memcpy(v1.data(), &magic, 4);
  write_raw(d / "v1.bin", v1);
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "v1.bin"); }, {"v1.bin", "version 1/2 export", "legacy"}));
  std::string zero = good;
  std::memset(zero.data() + 12, 0, 4);  // n_heads = 0
  write_raw(d / "zero.bin", zero);
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "zero.bin"); }, {"zero.bin", "non-positive", "n_heads=0"}));
  std::string odd = good;
  const int32_t three = 3;
  std::memcpy(odd.data() + 16, &three, 4);  // n_kv_heads = 3 does not divide 8
  write_raw(d / "odd.bin", odd);
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "odd.bin"); }, {"odd.bin", "inconsistent header", "n_kv_heads 3"}));
  std::string huge = good;
  const int32_t big = 0x7fffffff, big_dim = 1 << 30;  // sizes overflow 64 bits
  std::memcpy(huge.data(), &big_dim, 4);
  for (int f : {1, 2, 5}) std::memcpy(huge.data() + 4 * f, &big, 4);
  write_raw(d / "huge.bin", huge);
  EXPECT_TRUE(throws_with([&] { load_llama2c(d / "huge.bin"); }, {"huge.bin", "truncated file", "needs"}));
  EXPECT_TRUE(throws_with([&] { permute_rotate_half(Tensor::zeros({6, 4}), 2); }, {"permute_rotate_half", "[6, 4]"}));
}
