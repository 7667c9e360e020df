// Bitwise (memcmp) contracts of the chunked gated delta rule and the causal conv1d
// (kernels/cpu/gated_delta.h): prefill == token-by-token decode from a state slot,
// chunked prefill == whole prefill, batch invariance (a sequence alone vs packed with
// others of 1, 7 and 257 tokens, at other offsets, on 1 and 2 threads), and run-to-run
// identical backward on 1 and 2 threads. Accuracy against the oracles is in
// tests/ops/ops_linear_attention_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "titan/core/philox.h"
#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/gated_delta.h"

namespace titan::kernels::cpu {
namespace {

struct Seq {
  int64_t T, H, K, V;
  bool pc;
  std::vector<float> q, k, v, g, beta;
};

// Deterministic inputs from a simple LCG: unit-norm q/k rows, log decays in [-1, -0.01].
Seq make_seq(int64_t T, int64_t H, int64_t K, int64_t V, bool pc, uint32_t seed) {
  Seq s{T, H, K, V, pc, {}, {}, {}, {}, {}};
  uint64_t st = seed * 2654435761u + 1;
  auto u = [&]() {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((st >> 40) & 0xffffff) / 16777216.0f;
  };
  auto unit = [&](std::vector<float>& x) {
    x.resize(T * H * K);
    for (int64_t r = 0; r < T * H; ++r) {
      double n2 = 0;
      for (int64_t d = 0; d < K; ++d) {
        x[r * K + d] = u() - 0.5f;
        n2 += x[r * K + d] * x[r * K + d];
      }
      for (int64_t d = 0; d < K; ++d) x[r * K + d] = static_cast<float>(x[r * K + d] / std::sqrt(n2));
    }
  };
  unit(s.q);
  unit(s.k);
  s.v.resize(T * H * V);
  for (auto& x : s.v) x = 2.0f * u() - 1.0f;
  s.g.resize(T * H * (pc ? K : 1));
  for (auto& x : s.g) x = -0.01f - u();
  s.beta.resize(T * H);
  for (auto& x : s.beta) x = u();
  return s;
}

// Packs sequences back to back (all with the same H, K, V, gate kind).
Seq pack(const std::vector<const Seq*>& seqs, std::vector<int64_t>& cu) {
  Seq p = *seqs[0];
  p.q.clear(), p.k.clear(), p.v.clear(), p.g.clear(), p.beta.clear();
  cu = {0};
  for (const Seq* s : seqs) {
    for (auto [dst, src] : {std::pair{&p.q, &s->q}, {&p.k, &s->k}, {&p.v, &s->v}, {&p.g, &s->g},
                            {&p.beta, &s->beta}})
      dst->insert(dst->end(), src->begin(), src->end());
    cu.push_back(cu.back() + s->T);
  }
  p.T = cu.back();
  return p;
}

std::vector<float> train_fwd(const Seq& s, const std::vector<int64_t>& cu,
                             std::vector<float>* chunk_states = nullptr) {
  std::vector<float> o(s.T * s.H * s.V);
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  if (chunk_states) chunk_states->assign(gated_delta_num_chunks(cu.data(), N) * s.H * s.K * s.V, 0);
  gated_delta_fwd(o.data(), chunk_states ? chunk_states->data() : nullptr, nullptr, s.q.data(),
                  s.k.data(), s.v.data(), s.g.data(), s.beta.data(), cu.data(), nullptr, N, s.H,
                  s.K, s.V, s.pc, 1.0f / std::sqrt(static_cast<float>(s.K)));
  return o;
}

// Runs tokens [t0, t1) of s from the slot (which holds the state after t0 tokens).
std::vector<float> step(const Seq& s, std::vector<float>& slot, int64_t t0, int64_t t1) {
  const int64_t n = t1 - t0, Gd = s.pc ? s.K : 1;
  std::vector<float> o(n * s.H * s.V);
  const int64_t cu[2] = {0, n};
  const int64_t pos[1] = {t0};
  gated_delta_fwd(o.data(), nullptr, slot.data(), s.q.data() + t0 * s.H * s.K,
                  s.k.data() + t0 * s.H * s.K, s.v.data() + t0 * s.H * s.V,
                  s.g.data() + t0 * s.H * Gd, s.beta.data() + t0 * s.H, cu, pos, 1, s.H, s.K, s.V,
                  s.pc, 1.0f / std::sqrt(static_cast<float>(s.K)));
  return o;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * 4) == 0; }

class GatedDeltaParity : public ::testing::TestWithParam<bool> {};

TEST_P(GatedDeltaParity, PrefillEqualsTokenByTokenDecode) {
  const bool pc = GetParam();
  for (int64_t T : {1, 7, 63, 64, 65, 130, 257}) {
    const Seq s = make_seq(T, 2, 16, 24, pc, 11 + static_cast<uint32_t>(T));
    const std::vector<float> whole = train_fwd(s, {0, T});
    std::vector<float> slot(gated_delta_state_floats(s.H, s.K, s.V, pc), 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> o = step(s, slot, t, t + 1);
      ASSERT_TRUE(same_bits(o.data(), whole.data() + t * s.H * s.V, s.H * s.V))
          << (pc ? "kda" : "gdn") << " T=" << T << ": decode of position " << t
          << " differs from the trainer's row";
    }
  }
}

TEST_P(GatedDeltaParity, ChunkedPrefillEqualsWholePrefill) {
  const bool pc = GetParam();
  const int64_t T = 300;
  const Seq s = make_seq(T, 3, 20, 12, pc, 5);
  const std::vector<float> whole = train_fwd(s, {0, T});
  for (std::vector<int64_t> cuts : {std::vector<int64_t>{5, 64, 100, 299},
                                    std::vector<int64_t>{63, 64, 65, 128, 200},
                                    std::vector<int64_t>{1, 2, 3, 150}}) {
    std::vector<float> slot(gated_delta_state_floats(s.H, s.K, s.V, pc), 0.0f);
    cuts.push_back(T);
    int64_t t0 = 0;
    for (int64_t t1 : cuts) {
      const std::vector<float> o = step(s, slot, t0, t1);
      ASSERT_TRUE(same_bits(o.data(), whole.data() + t0 * s.H * s.V, (t1 - t0) * s.H * s.V))
          << "prefill piece [" << t0 << ", " << t1 << ") differs from the whole prefill";
      t0 = t1;
    }
  }
}

TEST_P(GatedDeltaParity, BatchInvariantAcrossBatchesAndThreads) {
  const bool pc = GetParam();
  const int saved = num_threads();
  const Seq a = make_seq(100, 2, 16, 16, pc, 21);
  const Seq b1 = make_seq(1, 2, 16, 16, pc, 22), b7 = make_seq(7, 2, 16, 16, pc, 23),
            b257 = make_seq(257, 2, 16, 16, pc, 24);
  set_num_threads(1);
  const std::vector<float> alone = train_fwd(a, {0, a.T});
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Seq* other : {&b1, &b7, &b257}) {
      for (bool a_first : {true, false}) {
        std::vector<int64_t> cu;
        const Seq p = a_first ? pack({&a, other}, cu) : pack({other, &a, other}, cu);
        const std::vector<float> o = train_fwd(p, cu);
        const int64_t off = a_first ? 0 : other->T;
        EXPECT_TRUE(same_bits(o.data() + off * a.H * a.V, alone.data(), a.T * a.H * a.V))
            << "threads " << threads << ", packed with " << other->T << " tokens";
        const std::vector<float> other_alone = train_fwd(*other, {0, other->T});
        EXPECT_TRUE(same_bits(o.data() + (a_first ? a.T : 0) * a.H * a.V, other_alone.data(),
                              other->T * a.H * a.V));
      }
    }
  }
  set_num_threads(saved);
}

TEST_P(GatedDeltaParity, BackwardIsThreadCountInvariant) {
  const bool pc = GetParam();
  const int saved = num_threads();
  const Seq a = make_seq(100, 2, 16, 8, pc, 31), b = make_seq(257, 2, 16, 8, pc, 32);
  std::vector<int64_t> cu;
  const Seq p = pack({&a, &b}, cu);
  std::vector<float> states;
  train_fwd(p, cu, &states);
  std::vector<float> dout(p.T * p.H * p.V);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<std::vector<float>> res;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dg(p.g.size()),
        db(p.beta.size());
    gated_delta_bwd(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), dout.data(),
                    states.data(), p.q.data(), p.k.data(), p.v.data(), p.g.data(), p.beta.data(),
                    cu.data(), 2, p.H, p.K, p.V, pc, 0.25f);
    std::vector<float> all;
    for (auto* x : {&dq, &dk, &dv, &dg, &db}) all.insert(all.end(), x->begin(), x->end());
    res.push_back(all);
  }
  set_num_threads(saved);
  EXPECT_TRUE(same_bits(res[0].data(), res[1].data(), static_cast<int64_t>(res[0].size())));
}

INSTANTIATE_TEST_SUITE_P(GdnAndKda, GatedDeltaParity, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "kda" : "gdn"; });

TEST(CausalConv1dParity, DecodeFromTailEqualsPrefillAndBatchInvariant) {
  const int64_t C = 19, W = 4;
  for (int64_t T : {1, 2, 7, 50}) {
    std::vector<float> x(T * C), w(C * W);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.7f * static_cast<float>(i) + 0.1f * T);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(1.3f * static_cast<float>(i));
    std::vector<float> whole(T * C);
    const int64_t cu[2] = {0, T};
    causal_conv1d_fwd(whole.data(), nullptr, x.data(), w.data(), cu, 1, C, W);
    std::vector<float> tail((W - 1) * C, 0.0f), o(C);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t cu1[2] = {0, 1};
      causal_conv1d_fwd(o.data(), tail.data(), x.data() + t * C, w.data(), cu1, 1, C, W);
      ASSERT_TRUE(same_bits(o.data(), whole.data() + t * C, C)) << "T=" << T << " t=" << t;
    }
    // Packed after a 7-token sequence, 2 threads.
    const int saved = num_threads();
    set_num_threads(2);
    std::vector<float> xp(7 * C, 0.5f);
    xp.insert(xp.end(), x.begin(), x.end());
    std::vector<float> op(xp.size());
    const int64_t cu2[3] = {0, 7, 7 + T};
    causal_conv1d_fwd(op.data(), nullptr, xp.data(), w.data(), cu2, 2, C, W);
    set_num_threads(saved);
    EXPECT_TRUE(same_bits(op.data() + 7 * C, whole.data(), T * C));
  }
}

}  // namespace
}  // namespace titan::kernels::cpu
