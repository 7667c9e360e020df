// The per-layer model layout: LayerSpec derivation from the HF-named config fields
// (transformers' Qwen3-MoE rule, DeepSeek-V3's first_k_dense_replace), the
// model-declared cache, module buffers, and per-module init giving the same values as
// the name-based TorchTitan / GPT-2 rules it replaced (reimplemented here from the
// published schemes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "titan/core/philox.h"
#include "titan/models/common/decoder.h"

using namespace titan;
using namespace titan::models;

namespace {

TransformerConfig tiny(const std::string& fam) {
  TransformerConfig c;
  c.family = fam;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.qk_norm = fam == "qwen3";
  return c;
}

std::vector<FfnKind> ffns(const TransformerConfig& c) {
  std::vector<FfnKind> out;
  for (const LayerSpec& s : layer_specs(c)) out.push_back(s.ffn);
  return out;
}

// TorchTitan llama3 / GPT-2 init by parameter name, as the name-substring rules read.
void name_based_init(const nn::Module& m, const TransformerConfig& cfg, uint64_t seed, bool gpt2,
                     std::vector<std::vector<float>>& out) {
  uint64_t stream = 0;
  const double L = static_cast<double>(cfg.num_hidden_layers);
  for (auto& [name, t] : m.named_parameters()) {
    ++stream;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    auto normal = [&](double std, double trunc) {
      for (size_t i = 0; i < v.size(); ++i)
        for (uint64_t attempt = 0;; ++attempt) {
          auto r = philox_draw(seed ^ (stream * 0x9E3779B97F4A7C15ull), static_cast<uint64_t>(i) | (attempt << 40),
                               stream);
          float z = box_muller(r[0], r[1]);
          if (trunc <= 0 || std::fabs(z) <= trunc) {
            v[i] = static_cast<float>(z * std);
            break;
          }
        }
    };
    const bool residual = name.find(".wo.") != std::string::npos || name.find(".w2.") != std::string::npos;
    if (name.find("norm") != std::string::npos) {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") {
      std::fill(v.begin(), v.end(), 0.0f);
    } else if (gpt2) {
      normal(residual ? 0.02 / std::sqrt(2.0 * L) : 0.02, 0.0);
    } else if (name == "tok_embeddings.weight") {
      normal(cfg.tie_word_embeddings ? std::pow(cfg.hidden_size, -0.5) : 1.0, cfg.tie_word_embeddings ? 3.0 : 0.0);
    } else if (name == "output.weight") {
      normal(std::pow(cfg.hidden_size, -0.5), 3.0);
    } else {
      const int layer = std::stoi(name.substr(7));
      const bool depth = residual || name.find(".w3.") != std::string::npos;
      normal(depth ? 0.02 / std::sqrt(2.0 * (layer + 1)) : 0.02, 0.0);
    }
    out.push_back(std::move(v));
  }
}

void expect_same_init(const std::string& fam, bool tied, InitScheme scheme) {
  TransformerConfig c = tiny(fam);
  c.tie_word_embeddings = tied;
  c.attention_bias = true;
  Decoder m(c);
  m.init_weights(17, scheme);
  std::vector<std::vector<float>> want;
  name_based_init(m, c, 17, fam == "qwen3" || scheme == InitScheme::gpt2, want);
  auto params = m.named_parameters();
  ASSERT_EQ(params.size(), want.size());
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> got = params[i].second.to_vector<float>();
    ASSERT_EQ(got.size(), want[i].size());
    EXPECT_EQ(0, std::memcmp(got.data(), want[i].data(), got.size() * 4)) << fam << " " << params[i].first;
  }
}

}  // namespace

TEST(LayerSpec, DenseModelIsAllGqaDense) {
  TransformerConfig c = tiny("llama3");
  c.sliding_window = 16;
  auto s = layer_specs(c);
  ASSERT_EQ(s.size(), 3u);
  for (const auto& l : s) {
    EXPECT_EQ(l.mixer, MixerKind::gqa);
    EXPECT_EQ(l.ffn, FfnKind::dense);
    EXPECT_EQ(l.window, 16);
    EXPECT_TRUE(l.use_rope);
  }
  EXPECT_EQ(describe_layers(s), "L0-2 gqa+dense window 16");
}

TEST(LayerSpec, Qwen3MoeSparseStepAndMlpOnlyLayers) {
  // transformers Qwen3MoeDecoderLayer: MoE iff l not in mlp_only_layers and
  // num_experts > 0 and (l + 1) % decoder_sparse_step == 0.
  TransformerConfig c = tiny("qwen3");
  c.num_hidden_layers = 6;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  EXPECT_EQ(ffns(c), std::vector<FfnKind>(6, FfnKind::moe));
  c.decoder_sparse_step = 2;
  EXPECT_EQ(ffns(c), (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe, FfnKind::dense, FfnKind::moe,
                                           FfnKind::dense, FfnKind::moe}));
  c.decoder_sparse_step = 1;
  c.mlp_only_layers = {0, 4};
  EXPECT_EQ(ffns(c), (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe, FfnKind::moe, FfnKind::moe,
                                           FfnKind::dense, FfnKind::moe}));
  EXPECT_EQ(describe_layers(layer_specs(c)), "L0 gqa+dense, L1-3 gqa+moe, L4 gqa+dense, L5 gqa+moe");
}

TEST(LayerSpec, DeepSeekFirstKDense) {
  TransformerConfig c = tiny("llama3");
  c.num_hidden_layers = 4;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  c.first_k_dense_replace = 1;
  EXPECT_EQ(ffns(c), (std::vector<FfnKind>{FfnKind::dense, FfnKind::moe, FfnKind::moe, FfnKind::moe}));
  c.num_experts = 0;  // no experts: dense everywhere
  EXPECT_EQ(ffns(c), std::vector<FfnKind>(4, FfnKind::dense));
}

TEST(CacheSpec, AttentionDeclaresPagedKV) {
  TransformerConfig c = tiny("llama3");
  Decoder m(c);
  auto spec = m.cache_spec(32);
  ASSERT_EQ(spec.size(), 3u);
  for (const auto& l : spec) {
    ASSERT_EQ(l.paged.size(), 2u);
    EXPECT_EQ(l.paged[0].name, "k");
    EXPECT_EQ(l.paged[0].shape, (std::vector<int64_t>{2, 8, 32}));  // (Hkv, Dh, B)
    EXPECT_EQ(l.paged[1].shape, (std::vector<int64_t>{2, 32, 8}));  // (Hkv, B, Dh)
    EXPECT_TRUE(l.state.empty());
  }
  // K and V of every layer: 2 * L * Hkv * Dh * B floats per block.
  EXPECT_EQ(cache_bytes_per_block(spec), 2 * 3 * 2 * 8 * 32 * 4);
  ModelCache kv = allocate_cache(spec, 5, 32);
  ASSERT_EQ(kv.layers.size(), 3u);
  EXPECT_EQ(kv.layers[1].paged[0].shape(), (Shape{5, 2, 8, 32}));
  EXPECT_EQ(kv.layers[1].paged[1].shape(), (Shape{5, 2, 32, 8}));
}

TEST(CacheSpec, StateSlotsNeedSlots) {
  LayerCacheSpec s;
  s.state.push_back({"S", {4, 4}});
  EXPECT_THROW(allocate_cache({s}, 2, 16, 0), Error);
  ModelCache c = allocate_cache({s}, 2, 16, 3);
  EXPECT_EQ(c.layers[0].state[0].shape(), (Shape{3, 4, 4}));
}

namespace {
struct WithBuffer : nn::Module {
  WithBuffer() {
    w = register_parameter("w", Tensor::zeros({3}));
    b = register_buffer("bias", Tensor::zeros({3}));
  }
  Tensor w, b;
};
struct Outer : nn::Module {
  Outer() { inner = register_module("inner", std::make_unique<WithBuffer>()); }
  WithBuffer* inner;
};
}  // namespace

TEST(Module, BuffersAreNotParameters) {
  Outer m;
  auto p = m.named_parameters();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].first, "inner.w");
  auto b = m.named_buffers();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].first, "inner.bias");
  EXPECT_FALSE(b[0].second.requires_grad());
  EXPECT_EQ(m.buffer("inner.bias").unsafe_impl(), m.inner->b.unsafe_impl());
  EXPECT_THROW(m.buffer("inner.w"), Error);
  auto mods = m.named_modules();
  ASSERT_EQ(mods.size(), 2u);
  EXPECT_EQ(mods[1].first, "inner");
}

TEST(Init, PerModuleInitMatchesTheNameRules) {
  expect_same_init("llama3", false, InitScheme::family);
  expect_same_init("llama3", true, InitScheme::family);
  expect_same_init("qwen3", true, InitScheme::family);
  expect_same_init("llama3", false, InitScheme::gpt2);
}
