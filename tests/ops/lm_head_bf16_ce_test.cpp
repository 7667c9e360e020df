// The fused bf16 cross-entropy (linear_cross_entropy_bf16, titan/ops/lm_head_bf16.h):
//  - loss (per row) == the fp32 loss kernel (cross_entropy_logits_fwd) of the scalar
//    chain's logits, and == cross_entropy(logits_bf16(..)): bitwise (the loss scores the
//    logits the generator samples from);
//  - dhidden, dweight == the scalar bf16 backward rule (tests/ops/lm_head_bf16_ref.h) on
//    the fp32 kernel's logit gradient: bitwise, with and without the expected_grad hint,
//    over one and several row tiles;
//  - batch invariance (a row's loss and dhidden alone == in a batch), the same bits with
//    1 and 2 threads and in child processes under TITAN_BF16_DOT=emulation (on a CPU
//    with AVX512_BF16) and TITAN_ISA=avx2 (on an AVX-512 CPU);
//  - against PyTorch 2.13 bf16 autocast (tests/ops/lm_head_bf16_ce_ref.py) on the same
//    inputs, with a float64 yardstick: titan's error vs float64 <= 1.5x torch's + 2^-9 of
//    the largest value, titan vs torch <= 2.5x torch's error + 2^-9 of the largest value
//    (torch rounds the logits to bf16, titan keeps them fp32; both round the gradients).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/util/compare.h"
#include "tests/ops/lm_head_bf16_ref.h"
#include "tests/util/torch_ref.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/bf16.h"
#include "titan/kernels/cpu/loss.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/lm_head_bf16.h"
#include "titan/ops/loss.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

namespace ref = test::lm_head_bf16;
namespace kc = kernels::cpu;

bool same_bits(const Tensor& a, const std::vector<float>& b) {
  return a.numel() == static_cast<int64_t>(b.size()) && std::memcmp(a.data_ptr(), b.data(), b.size() * 4) == 0;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

struct Case {
  int64_t T, D, V;
  double z_loss;
};

// Inputs of a case: hidden ~ N(0, 1), weight ~ N(0, 0.3) (logits of a few units),
// targets in [0, V) with every fifth row ignored (-100).
struct Inputs {
  Tensor h, w, y;
};
Inputs inputs(const Case& c, uint64_t seed) {
  Inputs in{test::randn({c.T, c.D}, seed), test::randn({c.V, c.D}, seed + 1, 0.3), test::randint({c.T}, c.V, seed + 2)};
  int64_t* p = in.y.data<int64_t>();
  for (int64_t t = 0; t < c.T; t += 5) p[t] = -100;
  return in;
}

// The reference: per-row loss and lse from the chain's logits (fp32 loss kernel), the fp32
// logit gradient for the upstream values up (T) and the scalar bf16 backward rule.
struct Ref {
  std::vector<float> z, loss, lse, dh, dw;
};
Ref reference(const Inputs& in, const Case& c, const std::vector<float>& up) {
  Ref r;
  r.z = ref::logits(in.h.to_vector<float>(), in.w.to_vector<float>(), c.T, c.D, c.V);
  r.loss.resize(static_cast<size_t>(c.T));
  r.lse.resize(static_cast<size_t>(c.T));
  const float zc = static_cast<float>(c.z_loss);
  kc::cross_entropy_logits_fwd(r.loss.data(), r.lse.data(), r.z.data(), in.y.data<int64_t>(), c.T, c.V, -100, zc,
                               1.0f);
  std::vector<float> g(r.z.size());
  kc::cross_entropy_logits_bwd(g.data(), up.data(), r.z.data(), in.y.data<int64_t>(), r.lse.data(), c.T, c.V, -100,
                               zc, 1.0f);
  ref::backward(g, in.h.to_vector<float>(), in.w.to_vector<float>(), c.T, c.D, c.V, r.dh, r.dw);
  return r;
}

// Titan's loss (reduction none), dhidden and dweight for upstream up (T); with hint > 0 the
// summed loss scaled by hint (Reduction::sum, expected_grad = hint), up then all == hint.
struct Out {
  Tensor loss, dh, dw;
};
Out run(const Inputs& in, const Case& c, const Tensor& up, double hint = 0.0) {
  Tensor h = in.h.detach().clone(), w = in.w.detach().clone();
  h.requires_grad_();
  w.requires_grad_();
  Out o;
  if (hint > 0) {
    Tensor rows = linear_cross_entropy_bf16(h, w, in.y, -100, c.z_loss, Reduction::none, hint);
    o.loss = rows.detach();
    sum(mul(rows, up)).backward();
  } else {
    Tensor rows = linear_cross_entropy_bf16(h, w, in.y, -100, c.z_loss, Reduction::none);
    o.loss = rows.detach();
    sum(mul(rows, up)).backward();
  }
  o.dh = h.grad();
  o.dw = w.grad();
  return o;
}

std::vector<float> fill(int64_t T, float v) { return std::vector<float>(static_cast<size_t>(T), v); }

TEST(LinearCrossEntropyBf16, LossIsTheFp32LossOfTheHeadLogitsBitwise) {
  // D odd (a padded pair), V not a multiple of the panel width, ignored rows, z-loss.
  for (Case c : {Case{1, 8, 5, 0.0}, Case{11, 37, 333, 1e-3}, Case{16, 64, 1000, 0.0}}) {
    const Inputs in = inputs(c, 100 + c.V);
    const Ref r = reference(in, c, fill(c.T, 1.0f));
    autograd::NoGradGuard ng;
    const Tensor rows = linear_cross_entropy_bf16(in.h, in.w, in.y, -100, c.z_loss, Reduction::none);
    EXPECT_TRUE(same_bits(rows, r.loss)) << c.T << "x" << c.D << "x" << c.V;
    const Tensor via_logits = cross_entropy(logits_bf16(in.h, in.w), in.y, -100, c.z_loss, Reduction::none);
    EXPECT_TRUE(same_bits(rows, via_logits)) << c.T << "x" << c.D << "x" << c.V;
    // The reductions of linear_cross_entropy: sum, and mean over the non-ignored rows.
    const Tensor s = linear_cross_entropy_bf16(in.h, in.w, in.y, -100, c.z_loss, Reduction::sum);
    EXPECT_EQ(f32_bits(s.item<float>()), f32_bits(sum(rows).item<float>()));
    const Tensor mean = linear_cross_entropy_bf16(in.h, in.w, in.y, -100, c.z_loss, Reduction::mean);
    int64_t n = 0;
    for (int64_t t = 0; t < c.T; ++t) n += in.y.data<int64_t>()[t] != -100;
    if (n > 0) {
      EXPECT_EQ(f32_bits(mean.item<float>()), f32_bits(s.item<float>() / static_cast<float>(n)));
    } else {
      EXPECT_TRUE(std::isnan(mean.item<float>()));
    }
  }
}

TEST(LinearCrossEntropyBf16, GradientsAreTheBf16RuleBitwiseWithAndWithoutTheHint) {
  for (Case c : {Case{7, 37, 333, 1e-3}, Case{12, 24, 50, 0.0}}) {
    const Inputs in = inputs(c, 200 + c.V);
    // A random upstream gradient: the backward recomputes the logits.
    const Tensor up = test::randn({c.T}, 7);
    const Ref r = reference(in, c, up.to_vector<float>());
    const int64_t before = linear_cross_entropy_bf16_recomputes();
    const Out o = run(in, c, up);
    EXPECT_EQ(linear_cross_entropy_bf16_recomputes(), before + 1);
    EXPECT_TRUE(same_bits(o.loss, r.loss));
    EXPECT_TRUE(same_bits(o.dh, r.dh)) << "dhidden " << c.V;
    EXPECT_TRUE(same_bits(o.dw, r.dw)) << "dweight " << c.V;
    // The hint (the trainer's 1 / tokens): gradients computed in the forward, same bits as
    // the recompute for that upstream value; a different upstream value recomputes.
    const float k = 1.0f / static_cast<float>(c.T);
    const Tensor upk = Tensor::full({c.T}, k);
    const Ref rk = reference(in, c, fill(c.T, k));
    const int64_t before_hint = linear_cross_entropy_bf16_recomputes();
    const Out eager = run(in, c, upk, k);
    EXPECT_EQ(linear_cross_entropy_bf16_recomputes(), before_hint);
    const Out recomputed = run(in, c, upk);
    EXPECT_TRUE(same_bits(eager.dh, rk.dh) && same_bits(eager.dw, rk.dw)) << c.V;
    EXPECT_TRUE(same_bits(eager.dh, recomputed.dh) && same_bits(eager.dw, recomputed.dw)) << c.V;
    const Out missed = run(in, c, up, k);
    EXPECT_TRUE(same_bits(missed.dh, r.dh) && same_bits(missed.dw, r.dw)) << c.V;
    // Every gradient is a bf16 value in fp32 storage, and some dlogit was rounded (the
    // rule is not the fp32 one).
    for (const Tensor* t : {&o.dh, &o.dw})
      for (float v : t->to_vector<float>()) ASSERT_EQ(f32_bits(v) & 0xffffu, 0u);
  }
}

TEST(LinearCrossEntropyBf16, SeveralRowTilesKeepOneChainForDweight) {
  // V = 300000: 64 MiB of fp32 logits hold 55 rows, rounded to 54, so 111 rows take
  // tiles of 54, 54 and 3; dweight's chain over rows runs on across them.
  const Case c{111, 6, 300000, 1e-4};
  ASSERT_EQ(lm_head_bf16_tile_rows(c.T, c.V), 54);
  const Inputs in = inputs(c, 300);
  const float k = 1.0f / 111.0f;
  const Ref r = reference(in, c, fill(c.T, k));
  const Out eager = run(in, c, Tensor::full({c.T}, k), k);
  EXPECT_TRUE(same_bits(eager.loss, r.loss));
  EXPECT_TRUE(same_bits(eager.dh, r.dh));
  EXPECT_TRUE(same_bits(eager.dw, r.dw));
}

TEST(LinearCrossEntropyBf16, TileRows) {
  EXPECT_EQ(lm_head_bf16_tile_rows(4096, 32000), 512);  // 524 rows of budget
  EXPECT_EQ(lm_head_bf16_tile_rows(300, 32000), 300);   // one tile
  EXPECT_EQ(lm_head_bf16_tile_rows(4096, 151936), 110);  // 110.4: even
  EXPECT_EQ(lm_head_bf16_tile_rows(0, 32000), 1);
  EXPECT_EQ(lm_head_bf16_tile_rows(5, int64_t{1} << 26), 2);  // budget < 1 row: 2
}

TEST(LinearCrossEntropyBf16, RowsAreBatchInvariant) {
  const Case c{9, 40, 700, 1e-3};
  const Inputs in = inputs(c, 400);
  const float k = 0.125f;
  const Out all = run(in, c, Tensor::full({c.T}, k), k);
  for (int64_t t = 0; t < c.T; ++t) {
    const Inputs one{in.h.narrow(0, t, 1).contiguous(), in.w, in.y.narrow(0, t, 1).contiguous()};
    const Out o = run(one, Case{1, c.D, c.V, c.z_loss}, Tensor::full({1}, k), k);
    EXPECT_EQ(f32_bits(o.loss.item<float>()), f32_bits(all.loss.to_vector<float>()[t])) << "row " << t;
    EXPECT_TRUE(same_bits(o.dh, all.dh.narrow(0, t, 1).contiguous())) << "row " << t;
  }
}

// FNV-1a over the bits of loss, dhidden and dweight of a fixed case.
uint64_t digest() {
  const Case c{33, 72, 2000, 1e-3};
  const Inputs in = inputs(c, 500);
  const Out o = run(in, c, Tensor::full({c.T}, 0.25f), 0.25);
  uint64_t hsh = 1469598103934665603ull;
  for (const Tensor* t : {&o.loss, &o.dh, &o.dw}) {
    const auto* b = static_cast<const unsigned char*>(t->data_ptr());
    for (size_t i = 0; i < static_cast<size_t>(t->nbytes()); ++i) hsh = (hsh ^ b[i]) * 1099511628211ull;
  }
  return hsh;
}

// Run by SameBitsForOneAndTwoThreadsAndOnTheBf16Emulation in a child process only.
TEST(LinearCrossEntropyBf16, DISABLED_DigestChild) {
  const char* out = std::getenv("TITAN_CE_BF16_DIGEST");
  ASSERT_NE(out, nullptr);
  std::ofstream(out) << digest();
}

// 1 thread == 2 threads; on a CPU with AVX512_BF16 the instruction == the emulation (a
// child under TITAN_BF16_DOT=emulation, same kernel ISA), and on an AVX-512 CPU the
// AVX2 build (a child under TITAN_ISA=avx2) == the AVX-512 build: neither the bf16 GEMM
// path nor the kernel ISA changes the bits.
uint64_t child_digest(const std::string& env) {
  const std::string file = std::filesystem::temp_directory_path() / ("titan_ce_bf16_" + std::to_string(getpid()));
  const std::string cmd = env + " TITAN_NUM_THREADS=2 TITAN_CE_BF16_DIGEST=" + file + " " +
                          std::filesystem::read_symlink("/proc/self/exe").string() +
                          " --gtest_also_run_disabled_tests --gtest_filter=LinearCrossEntropyBf16.DISABLED_DigestChild"
                          " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  uint64_t child = 0;
  std::ifstream(file) >> child;
  std::remove(file.c_str());
  return child;
}

TEST(LinearCrossEntropyBf16, SameBitsForOneAndTwoThreadsTheBf16EmulationAndAvx2) {
  const int saved = num_threads();
  set_num_threads(1);
  const uint64_t one = digest();
  set_num_threads(2);
  const uint64_t two = digest();
  set_num_threads(saved);
  EXPECT_EQ(one, two);
  if (kernels::cpu::cpu_isa() == kernels::cpu::Isa::avx512) EXPECT_EQ(child_digest("TITAN_ISA=avx2"), one);
  if (!kernels::cpu::bf16_instruction_available()) GTEST_SKIP() << "this CPU has no AVX512_BF16: no instruction path";
  EXPECT_EQ(child_digest("TITAN_BF16_DOT=emulation"), one);
}

using test::read_f64;

using test::max_abs_diff;

TEST(LinearCrossEntropyBf16, MatchesPyTorchAutocast) {
  const Case c{64, 96, 1000, 1e-3};
  char tmpl[] = "/tmp/titan_ce_bf16_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::vector<std::string> names = {"a", "b"};
  std::vector<Inputs> ins;
  for (size_t i = 0; i < names.size(); ++i) {
    ins.push_back(inputs(c, 600 + 10 * i));
    std::ofstream(dir + "/" + names[i] + ".h.f32", std::ios::binary)
        .write(static_cast<const char*>(ins[i].h.data_ptr()), ins[i].h.nbytes());
    std::ofstream(dir + "/" + names[i] + ".w.f32", std::ios::binary)
        .write(static_cast<const char*>(ins[i].w.data_ptr()), ins[i].w.nbytes());
    std::ofstream(dir + "/" + names[i] + ".y.i64", std::ios::binary)
        .write(static_cast<const char*>(ins[i].y.data_ptr()), ins[i].y.nbytes());
  }
  nlohmann::json m;
  m["T"] = c.T;
  m["D"] = c.D;
  m["V"] = c.V;
  m["ignore_index"] = -100;
  m["z_loss"] = c.z_loss;
  m["cases"] = names;
  std::ofstream(dir + "/meta.json") << m.dump();
  // torch's bf16 GEMM pinned to its AVX2 path (the same oracle on every x86 machine).
  const std::string cmd = "OMP_NUM_THREADS=1 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 " +
                          test::venv_python() + " " TITAN_SOURCE_DIR "/tests/ops/lm_head_bf16_ce_ref.py " + dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string p = dir + "/" + names[i];
    Tensor h = ins[i].h.detach().clone(), w = ins[i].w.detach().clone();
    h.requires_grad_();
    w.requires_grad_();
    Tensor loss = linear_cross_entropy_bf16(h, w, ins[i].y, -100, c.z_loss, Reduction::sum, 1.0);
    loss.backward();
    struct Q {
      const char* name;
      std::vector<float> got;
      size_t n;
    };
    for (const Q& q : {Q{"loss", {loss.item<float>()}, 1}, Q{"dh", h.grad().to_vector<float>(), size_t(c.T * c.D)},
                       Q{"dw", w.grad().to_vector<float>(), size_t(c.V * c.D)}}) {
      const auto f64 = read_f64(p + ".f64." + q.name + ".f64", q.n);
      const auto tch = read_f64(p + ".torch." + q.name + ".f64", q.n);
      double scale = 0;
      for (double v : f64) scale = std::max(scale, std::fabs(v));
      const double e_torch = max_abs_diff(tch, f64), e_titan = max_abs_diff(q.got, f64);
      const double d_torch = max_abs_diff(q.got, tch), slack = scale * 0x1p-9;
      std::printf("%s %s: max |f64| %.4g, torch-bf16 err %.3g, titan-bf16 err %.3g, titan vs torch %.3g\n",
                  names[i].c_str(), q.name, scale, e_torch, e_titan, d_torch);
      EXPECT_GT(e_torch, 0.0) << q.name;
      EXPECT_LE(e_titan, 1.5 * e_torch + slack) << names[i] << " " << q.name;
      EXPECT_LE(d_torch, 2.5 * e_torch + slack) << names[i] << " " << q.name;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(LinearCrossEntropyBf16, BadInputsAreRefused) {
  const Tensor h = test::randn({2, 8}, 1), w = test::randn({5, 8}, 2), y = test::randint({2}, 5, 3);
  autograd::NoGradGuard ng;
  EXPECT_THROW(linear_cross_entropy_bf16(h, test::randn({5, 7}, 4), y), Error);
  EXPECT_THROW(linear_cross_entropy_bf16(h.to(DType::i32), w, y), Error);
  EXPECT_THROW(linear_cross_entropy_bf16(h, w, Tensor::from_vector(std::vector<int64_t>{0, 5}, {2})), Error);
  EXPECT_THROW(linear_cross_entropy_bf16(h, w, Tensor::from_vector(std::vector<int64_t>{0, 1, 2}, {3})), Error);
  EXPECT_THROW(linear_cross_entropy_bf16(h, w, y, -100, -1.0), Error);
  EXPECT_THROW(linear_cross_entropy_bf16(h, w, y, -100, 0.0, Reduction::sum, -1.0), Error);
  EXPECT_THROW(linear_cross_entropy_bf16(h, w, y, -100, 0.0, Reduction::sum, 1e300), Error);
}

}  // namespace
}  // namespace titan
