// scaled_dot_product_attention_varlen vs PyTorch (float64 per-sequence reference) and
// its composed twin: GQA, several packed sequences (incl. empty and longer than a KV
// block), sliding window, chunked attention (Llama 4: chunks of 5, 12 and 32 positions,
// alone and with a window, soft-cap and sinks; forward and q/k/v gradients against
// torch autograd in float64), soft-cap, sinks; errors.
#include <gtest/gtest.h>

#include "tests/util/torch_ref.h"
#include "titan/ops/attention.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randn;

TEST(Attention, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 1300;
  struct Cfg {
    std::vector<int64_t> cu;
    int64_t H, Hkv, Dh;
    int window;
    double softcap, scale;
    bool sinks;
    int chunk = 0;
  };
  const std::vector<Cfg> cfgs = {
      {{0, 1}, 1, 1, 8, 0, 0, 0, false},
      {{0, 5, 5, 22}, 4, 2, 16, 0, 0, 0, false},
      {{0, 33, 40}, 3, 1, 24, 0, 0, 0.3, false},
      {{0, 19, 37}, 2, 2, 8, 5, 0, 0, false},
      {{0, 17, 20}, 4, 4, 16, 0, 20.0, 0, true},
      {{0, 40}, 2, 1, 32, 16, 10.0, 0, true},
      {{0, 70, 79}, 4, 2, 16, 0, 0, 0, false, 12},
      {{0, 5, 44}, 2, 1, 8, 0, 0, 0, false, 5},
      {{0, 90}, 2, 2, 16, 0, 0, 0, false, 32},
      {{0, 50, 57}, 4, 1, 16, 9, 5.0, 0, true, 12},
  };
  for (const Cfg& g : cfgs) {
    const int64_t T = g.cu.back();
    for (bool fused : {true, false}) {
      OpCheck c;
      c.ref.op = "attention";
      c.ref.label = fmt::format("attention cu {} H{} Hkv{} Dh{} window {} chunk {} softcap {} sinks {} fused={}",
                                shape_str(g.cu), g.H, g.Hkv, g.Dh, g.window, g.chunk, g.softcap, g.sinks, fused);
      c.ref.attrs = {{"scale", g.scale}, {"window", g.window}, {"chunk", g.chunk}, {"softcap", g.softcap}};
      c.ref.inputs = {{"q", randn({T, g.H, g.Dh}, seed++)},
                      {"k", randn({T, g.Hkv, g.Dh}, seed++)},
                      {"v", randn({T, g.Hkv, g.Dh}, seed++)},
                      {"cu", Tensor::from_vector(g.cu, {static_cast<int64_t>(g.cu.size())},
                                                 fused ? DType::i32 : DType::i64)}};
      c.ref.grad_of = {"q", "k", "v"};
      if (g.sinks) {
        c.ref.inputs.push_back({"sinks", randn({g.H}, seed++)});
        c.ref.grad_of.push_back("sinks");
      }
      c.fn = [g, fused](auto& in) {
        AttentionOptions o;
        o.scale = g.scale;
        o.window = g.window;
        o.chunk = g.chunk;
        o.softcap = g.softcap;
        if (in.size() > 4) o.sinks = in[4];
        return std::vector<Tensor>{
            fused ? scaled_dot_product_attention_varlen(in[0], in[1], in[2], in[3], o)
                  : composed::scaled_dot_product_attention_varlen(in[0], in[1], in[2], in[3], o)};
      };
      c.tol = {1e-5, 2e-6};
      c.grad_tol = {1e-5, 1e-5};
      cs.push_back(c);
    }
  }
  check_ops(cs);
}

TEST(Attention, Errors) {
  Tensor q = Tensor::zeros({4, 2, 8}), kv = Tensor::zeros({4, 1, 8});
  Tensor cu = Tensor::from_vector<int32_t>({0, 4}, {2});
  try {
    scaled_dot_product_attention_varlen(Tensor::zeros({4, 8, 2}).transpose(1, 2), kv, kv, cu);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "scaled_dot_product_attention_varlen: argument 'q' must be contiguous"),
              std::string::npos)
        << e.what();
  }
  try {
    scaled_dot_product_attention_varlen(Tensor::zeros({4, 3, 8}), Tensor::zeros({4, 2, 8}),
                                        Tensor::zeros({4, 2, 8}), cu);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("H = 3 must be a multiple of KV heads Hkv = 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(scaled_dot_product_attention_varlen(q, kv, Tensor::zeros({4, 2, 8}), cu), Error);
  EXPECT_THROW(scaled_dot_product_attention_varlen(q, kv, kv, Tensor::from_vector<int32_t>({0, 3}, {2})),
               Error);  // does not end at T
  EXPECT_THROW(scaled_dot_product_attention_varlen(Tensor::zeros({4, 2, 6}), Tensor::zeros({4, 1, 6}),
                                                   Tensor::zeros({4, 1, 6}), cu),
               Error);  // Dh % 8
  AttentionOptions o;
  o.sinks = Tensor::zeros({3});
  EXPECT_THROW(scaled_dot_product_attention_varlen(q, kv, kv, cu, o), Error);
}

}  // namespace
}  // namespace titan
