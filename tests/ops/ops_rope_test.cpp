// RoPE op vs PyTorch (float64 rotation on the fp32 cache), composed twin bitwise,
// q/k fused path, errors.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/ops/rope.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randint;
using test::randn;

TEST(Rope, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 900;
  {
    OpCheck c;
    c.ref.op = "rope_cache";
    c.ref.attrs = {{"P", 37}, {"R", 24}, {"theta", 10000.0}};
    c.fn = [](auto&) {
      RopeCache rc = rope_cache(37, 24, 10000.0);
      return std::vector<Tensor>{rc.cos, rc.sin};
    };
    c.tol = {1e-6, 1e-7};  // fp32 rounding of double cos/sin
    cs.push_back(c);
  }
  struct Geo { int64_t T, H, Hkv, Dh, R; };
  for (Geo g : {Geo{1, 1, 1, 8, 8}, Geo{5, 3, 1, 16, 16}, Geo{17, 4, 2, 32, 16}, Geo{9, 2, 2, 24, 6}}) {
    for (bool inter : {false, true}) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: fused x, 1: composed x, 2: fused q+k
        const int64_t P = 40;
        RopeCache rc = rope_cache(P, g.R, 500000.0);
        OpCheck c;
        c.ref.op = "rope";
        c.ref.label = fmt::format("rope T{} H{} Dh{} R{} interleaved={} variant={}", g.T, g.H, g.Dh,
                                  g.R, inter, variant);
        c.ref.attrs = {{"interleaved", inter}};
        Tensor pos = randint({g.T}, P, seed++, variant == 1 ? DType::i64 : DType::i32);
        c.ref.inputs = {{"x", randn({g.T, g.H, g.Dh}, seed++)}, {"pos", pos}, {"cos", rc.cos}, {"sin", rc.sin}};
        c.ref.grad_of = {"x"};
        if (variant == 2) {
          c.ref.inputs.push_back({"k", randn({g.T, g.Hkv, g.Dh}, seed++)});
          c.ref.grad_of.push_back("k");
        }
        const RopeStyle st = inter ? RopeStyle::interleaved : RopeStyle::rotate_half;
        c.fn = [rc, st, variant](auto& in) {
          if (variant == 2) {
            auto [q, k] = apply_rotary(in[0], in[4], in[1], rc, st);
            return std::vector<Tensor>{q, k};
          }
          return std::vector<Tensor>{variant == 0 ? apply_rotary(in[0], in[1], rc, st)
                                                  : composed::apply_rotary(in[0], in[1], rc, st)};
        };
        c.tol = c.grad_tol = {1e-5, 1e-6};
        cs.push_back(c);
      }
    }
  }
  check_ops(cs);
}

TEST(Rope, FusedEqualsComposedBitwiseAndInverts) {
  RopeCache rc = rope_cache(64, 32, 10000.0);
  Tensor x = randn({13, 3, 40}, 1, 3.0);
  Tensor pos = randint({13}, 64, 2);
  for (RopeStyle st : {RopeStyle::rotate_half, RopeStyle::interleaved}) {
    auto a = apply_rotary(x, pos, rc, st).to_vector<float>();
    auto b = composed::apply_rotary(x, pos, rc, st).to_vector<float>();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
    auto [q, k] = apply_rotary(x, x.narrow(1, 0, 1).contiguous(), pos, rc, st);
    EXPECT_EQ(std::memcmp(q.to_vector<float>().data(), a.data(), a.size() * 4), 0);
  }
}

TEST(Rope, Errors) {
  RopeCache rc = rope_cache(8, 16, 10000.0);
  try {
    apply_rotary(Tensor::zeros({2, 1, 16}), Tensor::from_vector<int64_t>({0, 8}, {2}), rc);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8"), std::string::npos) << e.what();
  }
  try {
    apply_rotary(Tensor::zeros({2, 1, 8}), Tensor::zeros({2}, DType::i64), rc);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("apply_rotary: rotary dim 16 exceeds head dim 8"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(apply_rotary(Tensor::zeros({2, 16}), Tensor::zeros({2}, DType::i64), rc), Error);
  EXPECT_THROW(apply_rotary(Tensor::zeros({2, 1, 16}), Tensor::zeros({3}, DType::i64), rc), Error);
  EXPECT_THROW(apply_rotary(Tensor::zeros({2, 1, 16}), Tensor::zeros({2}), rc), Error);
  EXPECT_THROW(rope_cache(8, 7, 10000.0), Error);
}

}  // namespace
}  // namespace titan
