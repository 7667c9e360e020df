// One bit pattern per machine: every dispatched CPU kernel gives the same bits in the
// AVX2 build (TITAN_ISA=avx2) as in the AVX-512 build. Lane-combining reductions run
// on simd::vf, 16 lanes on both ISAs (titan/kernels/cpu/isa/simd.h); lane-wise kernels
// run on the native register, whose width changes no element's chain.
//
// The parent runs DISABLED_DigestChild twice, under TITAN_ISA=avx2 and =avx512, and
// compares one FNV-1a digest per kernel and shape. Row lengths straddle the 8- and
// 16-lane boundaries (1, 7, 8, 9, 15, 16, 17, 33, 100, 257) so every masked tail and
// lane-accumulator count is covered. Skipped where the CPU has no AVX-512 (nothing to
// compare with); the whole-run counterpart is in tests/train/trainer_isa_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "rows_test_util.h"
#include "titan/core/dtype.h"
#include "titan/kernels/cpu/activation.h"
#include "titan/kernels/cpu/attention.h"
#include "titan/kernels/cpu/bf16.h"
#include "titan/kernels/cpu/dispatch.h"
#include "titan/kernels/cpu/gated_delta.h"
#include "titan/kernels/cpu/gemm.h"
#include "titan/kernels/cpu/loss.h"
#include "titan/kernels/cpu/norm.h"
#include "titan/kernels/cpu/rope.h"
#include "titan/kernels/cpu/softmax.h"
#include "titan/kernels/cpu/vmath.h"

namespace titan::kernels::cpu {
namespace {
using test::randn;

const int64_t kLens[] = {1, 7, 8, 9, 15, 16, 17, 33, 100, 257};

uint64_t fnv(const void* p, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
uint64_t fnv(const std::vector<float>& v, uint64_t h = 1469598103934665603ull) {
  return fnv(v.data(), v.size() * sizeof(float), h);
}

// Every kernel family on shapes with awkward lengths; key "<kernel> <shape>".
std::map<std::string, uint64_t> digests() {
  std::map<std::string, uint64_t> d;
  auto key = [](const char* k, int64_t a, int64_t b = 0) {
    return std::string(k) + " " + std::to_string(a) + "x" + std::to_string(b);
  };
  const int64_t T = 5;
  for (int64_t D : kLens) {
    const auto x = randn(T * D, 11 + D), w = randn(D, 12 + D), b = randn(D, 13 + D);
    const auto g = randn(T * D, 14 + D, 0.5f);
    std::vector<float> y(T * D), r(T), m(T), dx(T * D), dw(D), db(D);
    rms_norm_fwd(y.data(), r.data(), x.data(), w.data(), T, D, 1e-6f);
    d[key("rms_norm_fwd", D)] = fnv(r, fnv(y));
    rms_norm_bwd(dx.data(), dw.data(), g.data(), x.data(), w.data(), r.data(), T, D, false);
    d[key("rms_norm_bwd", D)] = fnv(dw, fnv(dx));
    layer_norm_fwd(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), T, D, 1e-5f);
    d[key("layer_norm_fwd", D)] = fnv(m, fnv(r, fnv(y)));
    layer_norm_bwd(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), m.data(), r.data(), T, D,
                   false);
    d[key("layer_norm_bwd", D)] = fnv(db, fnv(dw, fnv(dx)));
    std::vector<float> s(T * D), lse(T), lp(T);
    softmax_fwd(s.data(), x.data(), T, D);
    d[key("softmax_fwd", D)] = fnv(s);
    softmax_bwd(dx.data(), g.data(), s.data(), T, D);
    d[key("softmax_bwd", D)] = fnv(dx);
    log_softmax_fwd(s.data(), lse.data(), x.data(), T, D);
    d[key("log_softmax_fwd", D)] = fnv(lse, fnv(s));
    log_softmax_bwd(dx.data(), g.data(), s.data(), T, D);
    d[key("log_softmax_bwd", D)] = fnv(dx);
    logsumexp_fwd(lse.data(), x.data(), T, D);
    d[key("logsumexp_fwd", D)] = fnv(lse);
    std::vector<int64_t> tgt(T);
    for (int64_t t = 0; t < T; ++t) tgt[t] = (t * 7 + 3) % D;
    logprobs_from_logits(lp.data(), lse.data(), x.data(), tgt.data(), T, D, 1.0f / 0.7f);
    d[key("logprobs_from_logits", D)] = fnv(lse, fnv(lp));
    const int64_t n = T * D;
    std::vector<float> o(n), o2(n);
    silu_fwd(o.data(), x.data(), n);
    silu_bwd(o2.data(), g.data(), x.data(), n);
    d[key("silu", D)] = fnv(o2, fnv(o));
    gelu_tanh_fwd(o.data(), x.data(), n);
    gelu_tanh_bwd(o2.data(), g.data(), x.data(), n);
    d[key("gelu_tanh", D)] = fnv(o2, fnv(o));
    swiglu_fwd(o.data(), x.data(), g.data(), n);
    d[key("swiglu_fwd", D)] = fnv(o);
    exp_f32(o.data(), x.data(), n);
    d[key("exp_f32", D)] = fnv(o);
    std::vector<uint16_t> h(n);
    cast_f32_to_bf16(x.data(), h.data(), n);
    cast_bf16_to_f32(h.data(), o.data(), n);
    d[key("bf16_casts", D)] = fnv(o, fnv(h.data(), h.size() * 2));
  }
  // Fused LM-head cross-entropy: hidden (T, Dm) · weight (V, Dm), vocabularies with tails.
  for (int64_t V : {17, 100, 257, 1000}) {
    const int64_t Tc = 9, Dm = 24;
    const auto hid = randn(Tc * Dm, 21 + V), wt = randn(V * Dm, 22 + V, 0.2f);
    std::vector<int64_t> tgt(Tc);
    for (int64_t t = 0; t < Tc; ++t) tgt[t] = (t * 31 + 5) % V;
    std::vector<float> loss(Tc), lse(Tc), dh(Tc * Dm), dwt(V * Dm), dl(Tc, 1.0f / Tc);
    cross_entropy_fwd(loss.data(), lse.data(), hid.data(), wt.data(), tgt.data(), Tc, Dm, V, -100, 1e-4f, 1.0f);
    cross_entropy_bwd(dh.data(), dwt.data(), dl.data(), hid.data(), wt.data(), tgt.data(), lse.data(), Tc, Dm, V,
                      -100, 1e-4f, 1.0f, false);
    d[key("cross_entropy", V)] = fnv(dwt, fnv(dh, fnv(lse, fnv(loss))));
  }
  // GEMMs (fp32 NT/NN/TN, bf16): M from decode (1, 9) to blocked (70), tails in N and K.
  for (int64_t M : {1, 9, 70}) {
    const int64_t N = 45, K = 37;
    const auto A = randn(M * K, 31 + M), B = randn(N * K, 32 + M), At = randn(K * M, 33 + M);
    std::vector<float> C(M * N), Bnn(K * N);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) Bnn[k * N + j] = B[j * K + k];
    gemm_f32(M, N, K, A.data(), K, B.data(), K, true, C.data(), N, false);
    uint64_t hh = fnv(C);
    gemm_f32(M, N, K, A.data(), K, Bnn.data(), N, false, C.data(), N, true);
    hh = fnv(C, hh);
    gemm_f32_tn(M, N, K, At.data(), M, Bnn.data(), N, C.data(), N, false);
    d[key("gemm_f32", M)] = fnv(C, hh);
    std::vector<uint16_t> Ah(M * K), Bh(N * K);
    cast_f32_to_bf16(A.data(), Ah.data(), M * K);
    cast_f32_to_bf16(B.data(), Bh.data(), N * K);
    gemm_bf16(M, N, K, Ah.data(), K, false, Bh.data(), K, true, C.data(), N, false);
    d[key("gemm_bf16", M)] = fnv(C);
  }
  // Attention, packed varlen forward + backward and the paged forward, with the options
  // that take their own code (softcap, sinks, window); Dh 8..80 (8-lane tails).
  for (int Dh : {8, 24, 64, 80}) {
    const int H = 4, Hkv = 2;
    const std::vector<int32_t> cu = {0, 37, 37 + 70};
    const int64_t Tq = cu.back();
    const auto q = randn(Tq * H * Dh, 41 + Dh), k = randn(Tq * Hkv * Dh, 42 + Dh), v = randn(Tq * Hkv * Dh, 43 + Dh);
    const auto dout = randn(Tq * H * Dh, 44 + Dh), sinks = randn(H, 45 + Dh);
    for (int variant = 0; variant < 3; ++variant) {
      AttentionParams p;
      if (variant == 1) p.softcap = 5.0f;
      if (variant == 2) p.sinks = sinks.data(), p.window = 19;
      std::vector<float> out(Tq * H * Dh), lse(Tq * H), dq(q.size()), dk(k.size()), dv(v.size()), ds(H);
      attention_varlen_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), 2, Tq, H, Hkv, Dh, p);
      attention_varlen_bwd(dq.data(), dk.data(), dv.data(), ds.data(), dout.data(), out.data(), lse.data(), q.data(),
                           k.data(), v.data(), cu.data(), 2, Tq, H, Hkv, Dh, p);
      d[key("attention_varlen", Dh, variant)] = fnv(ds, fnv(dv, fnv(dk, fnv(dq, fnv(lse, fnv(out))))));
      // The second sequence through a paged cache, its blocks in reverse physical order.
      const int B = p.block_size, L = 70, nb = (L + B - 1) / B;
      std::vector<float> kc(static_cast<size_t>(nb) * Hkv * Dh * B), vc(kc.size());
      std::vector<int32_t> slots(L), table(nb), seq(L, 0), pos(L);
      for (int b2 = 0; b2 < nb; ++b2) table[b2] = nb - 1 - b2;
      for (int t = 0; t < L; ++t) slots[t] = table[t / B] * B + t % B, pos[t] = t;
      kv_cache_write(kc.data(), vc.data(), k.data() + 37 * Hkv * Dh, v.data() + 37 * Hkv * Dh, slots.data(), L, Hkv,
                     Dh, nb, B);
      std::vector<float> po(static_cast<size_t>(L) * H * Dh), pl(static_cast<size_t>(L) * H);
      attention_paged_fwd(po.data(), pl.data(), q.data() + 37 * H * Dh, kc.data(), vc.data(), table.data(), seq.data(),
                          pos.data(), L, H, Hkv, Dh, 1, nb, nb, p);
      d[key("attention_paged", Dh, variant)] = fnv(pl, fnv(po));
    }
  }
  // Gated delta rule (scalar and per-channel gates), chunked over 64-token chunks, and
  // the short causal conv1d.
  for (int64_t Kd : {16, 24}) {
    const int64_t H = 2, Vd = 40, N = 2;
    const std::vector<int64_t> cu = {0, 70, 70 + 33};
    const int64_t Tg = cu.back();
    for (bool pc : {false, true}) {
      const int64_t Gd = pc ? Kd : 1;
      auto q = randn(Tg * H * Kd, 51 + Kd), k = randn(Tg * H * Kd, 52 + Kd);
      // L2-normalised keys and queries, gates in (-1, 0) and beta in (0, 1), as the models feed them.
      for (int64_t row = 0; row < Tg * H; ++row) {
        double qs = 0, ks = 0;
        for (int64_t i = 0; i < Kd; ++i) qs += q[row * Kd + i] * q[row * Kd + i], ks += k[row * Kd + i] * k[row * Kd + i];
        for (int64_t i = 0; i < Kd; ++i) q[row * Kd + i] /= std::sqrt(qs), k[row * Kd + i] /= std::sqrt(ks);
      }
      const auto v = randn(Tg * H * Vd, 53 + Kd), dout = randn(Tg * H * Vd, 54 + Kd);
      auto gg = randn(Tg * H * Gd, 55 + Kd), beta = randn(Tg * H, 56 + Kd);
      for (float& x : gg) x = -0.05f - 0.2f * std::fabs(x);
      for (float& x : beta) x = 1.0f / (1.0f + std::exp(-x));
      std::vector<float> o(Tg * H * Vd), cs(gated_delta_num_chunks(cu.data(), N) * H * Kd * Vd);
      gated_delta_fwd(o.data(), cs.data(), nullptr, q.data(), k.data(), v.data(), gg.data(), beta.data(), cu.data(),
                      nullptr, N, H, Kd, Vd, pc, 1.0f / std::sqrt(float(Kd)));
      std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dg(gg.size()), dbeta(beta.size());
      gated_delta_bwd(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dout.data(), cs.data(), q.data(),
                      k.data(), v.data(), gg.data(), beta.data(), cu.data(), N, H, Kd, Vd, pc,
                      1.0f / std::sqrt(float(Kd)));
      d[key("gated_delta", Kd, pc)] = fnv(dbeta, fnv(dg, fnv(dv, fnv(dk, fnv(dq, fnv(o))))));
    }
    const int64_t C = Kd * 3 + 1, Wc = 4;
    const auto x = randn(Tg * C, 57 + Kd), w = randn(C * Wc, 58 + Kd), g = randn(Tg * C, 59 + Kd);
    std::vector<float> y(Tg * C), dx(Tg * C), dw(C * Wc);
    causal_conv1d_fwd(y.data(), nullptr, x.data(), w.data(), cu.data(), N, C, Wc);
    causal_conv1d_bwd(dx.data(), dw.data(), g.data(), x.data(), w.data(), cu.data(), N, C, Wc);
    d[key("causal_conv1d", C)] = fnv(dw, fnv(dx, fnv(y)));
  }
  // RoPE on q and k (rotate-half, partial rotary).
  for (int64_t Dh : {8, 24, 64}) {
    const int64_t Tr = 13, H = 3, Hkv = 1, R = Dh - 4 > 0 ? Dh - 4 : Dh, P = 64;
    std::vector<float> cs(P * R / 2), sn(P * R / 2);
    rope_cache(cs.data(), sn.data(), P, R, 10000.0);
    const auto q = randn(Tr * H * Dh, 61 + Dh), k = randn(Tr * Hkv * Dh, 62 + Dh);
    std::vector<int64_t> pos(Tr);
    for (int64_t t = 0; t < Tr; ++t) pos[t] = (t * 5) % P;
    std::vector<float> qo(q.size()), ko(k.size());
    rope_apply_qk(qo.data(), ko.data(), q.data(), k.data(), pos.data(), cs.data(), sn.data(), Tr, H, Hkv, Dh, R, P,
                  RopeStyle::rotate_half, false);
    d[key("rope_apply_qk", Dh)] = fnv(ko, fnv(qo));
  }
  return d;
}

TEST(IsaParity, DISABLED_DigestChild) {
  const char* out = std::getenv("TITAN_ISA_DIGEST");
  ASSERT_NE(out, nullptr);
  std::ofstream f(out);
  f << isa_name(cpu_isa()) << "\n";
  for (const auto& [k, h] : digests()) f << k << "\t" << h << "\n";
}

std::map<std::string, uint64_t> run_child(const std::string& isa, std::string& ran) {
  const std::string file = std::filesystem::temp_directory_path() / ("titan_isa_" + isa + "_" + std::to_string(getpid()));
  const std::string cmd = "TITAN_ISA=" + isa + " TITAN_ISA_DIGEST=" + file + " " +
                          std::filesystem::read_symlink("/proc/self/exe").string() +
                          " --gtest_also_run_disabled_tests --gtest_filter=IsaParity.DISABLED_DigestChild > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(file);
  std::getline(f, ran);
  std::map<std::string, uint64_t> d;
  std::string line;
  while (std::getline(f, line)) {
    const auto tab = line.find('\t');
    d[line.substr(0, tab)] = std::stoull(line.substr(tab + 1));
  }
  std::remove(file.c_str());
  return d;
}

TEST(IsaParity, EveryKernelGivesTheSameBitsOnAvx2AndAvx512) {
  if (cpu_isa() != Isa::avx512) GTEST_SKIP() << "this CPU has no AVX-512: one ISA, nothing to compare";
  std::string ran2, ran512;
  const auto a = run_child("avx2", ran2), b = run_child("avx512", ran512);
  EXPECT_EQ(ran2, "avx2");
  EXPECT_EQ(ran512, "avx512");
  ASSERT_GT(a.size(), 100u);
  ASSERT_EQ(a.size(), b.size());
  int differ = 0;
  for (const auto& [k, h] : a) {
    if (b.at(k) != h) ++differ;
    EXPECT_EQ(h, b.at(k)) << k;
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace titan::kernels::cpu
