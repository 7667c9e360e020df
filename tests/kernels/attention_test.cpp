// Attention kernels: forward against a float64 full-softmax reference, backward
// against the analytic float64 backward (itself checked by finite differences) and
// PyTorch, bitwise invariance between the packed (trainer) and paged (generator)
// paths, and the error messages for bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/kernels/attention_test_util.h"
#include "titan/core/error.h"
#include "titan/core/thread_pool.h"

namespace titan::kernels::cpu::testing {
namespace {

constexpr int B = kKvBlockSize;

// ---------------------------------------------------------------- correctness

struct Case {
  const char* name;
  std::vector<int> lens;
  int H, Hkv, Dh;
  int window;
  float softcap;
  bool sinks;
};

std::vector<Case> cases() {
  return {
      {"mha_one_seq", {70}, 2, 2, 64, 0, 0.0f, false},
      {"gqa_packed", {37, 1, 100, 16}, 4, 2, 64, 0, 0.0f, false},
      {"mqa_packed", {50, 33}, 4, 1, 32, 0, 0.0f, false},
      {"gqa_window", {90, 17, 48}, 6, 2, 64, 20, 0.0f, false},
      {"softcap", {65, 40}, 4, 2, 64, 0, 5.0f, false},
      {"sinks", {60, 25}, 4, 2, 64, 0, 0.0f, true},
      {"all_features_dh72", {81, 9}, 8, 2, 72, 33, 8.0f, true},
      {"dh24_window1", {40}, 2, 1, 24, 1, 0.0f, false},
      {"mqa_72_heads", {21, 40}, 72, 1, 16, 0, 0.0f, true},  // more heads than a tile has rows
  };
}

Problem problem_of(const Case& c, uint32_t seed = 3) {
  AttentionParams p;
  p.window = c.window;
  p.softcap = c.softcap;
  // Peaky scores with soft-cap so the cap matters (raw scores well beyond it).
  return make_problem(c.lens, c.H, c.Hkv, c.Dh, p, c.sinks, seed, c.softcap > 0 ? 3.0f : 1.2f);
}

TEST(Attention, ForwardMatchesFloat64Reference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Problem pb = problem_of(c);
    const FwdResult f = run_fwd(pb);
    const RefResult r = reference(pb);
    std::printf("%-18s fwd vs float64: out %.2e lse %.2e\n", c.name, rel_err(f.out, r.out),
                rel_err(f.lse, r.lse));
    EXPECT_LT(rel_err(f.out, r.out), 1e-5);
    EXPECT_LT(rel_err(f.lse, r.lse), 1e-5);
  }
}

TEST(Attention, BackwardMatchesAnalyticFloat64Reference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Problem pb = problem_of(c);
    const FwdResult f = run_fwd(pb);
    const BwdResult g = run_bwd(pb, f);
    const RefResult r = reference(pb);
    std::printf("%-18s bwd vs float64: dq %.2e dk %.2e dv %.2e dsinks %.2e\n", c.name,
                rel_err(g.dq, r.dq), rel_err(g.dk, r.dk), rel_err(g.dv, r.dv),
                c.sinks ? rel_err(g.dsinks, r.dsinks) : 0.0);
    EXPECT_LT(rel_err(g.dq, r.dq), 2e-5);
    EXPECT_LT(rel_err(g.dk, r.dk), 2e-5);
    EXPECT_LT(rel_err(g.dv, r.dv), 2e-5);
    if (c.sinks) EXPECT_LT(rel_err(g.dsinks, r.dsinks), 2e-5);
  }
}

// The analytic reference backward agrees with central differences of the float64
// reference forward (loss = sum(dout * out)), softcap + window + sinks + GQA.
TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  AttentionParams p;
  p.window = 5;
  p.softcap = 2.0f;
  const Problem pb = make_problem({9, 6}, 4, 2, 8, p, true, 11, 1.5f);
  std::vector<double> q = to_double(pb.q), k = to_double(pb.k), v = to_double(pb.v),
                      s = to_double(pb.sinks);
  const RefResult r = reference(pb, q, k, v, s);
  auto loss = [&]() {
    const RefResult x = reference(pb, q, k, v, s);
    double L = 0;
    for (size_t i = 0; i < x.out.size(); ++i) L += x.out[i] * pb.dout[i];
    return L;
  };
  auto check = [&](std::vector<double>& x, const std::vector<double>& g, const char* name) {
    for (size_t i = 0; i < x.size(); i += 7) {
      const double h = 1e-6, x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss();
      x[i] = x0 - h;
      const double lm = loss();
      x[i] = x0;
      EXPECT_NEAR((lp - lm) / (2 * h), g[i], 1e-6 * (1 + std::abs(g[i]))) << name << "[" << i << "]";
    }
  };
  check(q, r.dq, "dq");
  check(k, r.dk, "dk");
  check(v, r.dv, "dv");
  check(s, r.dsinks, "dsinks");
}

// PyTorch (float64 autograd, tests/reference/attention_ref.py) on GQA + sliding
// window (+ soft-cap and sinks in a second case), inputs as raw float32 files; one
// Python process for all cases (importing torch takes seconds).
struct TorchCase {
  Case c;
  Problem pb;
  std::filesystem::path dir;
};

void write_inputs(TorchCase& tc) {
  namespace fs = std::filesystem;
  const Problem& pb = tc.pb;
  char tmpl[] = "/tmp/titan_attn_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  tc.dir = fs::path(tmpl);
  auto write = [&](const char* name, const std::vector<float>& x) {
    std::ofstream f(tc.dir / (std::string(name) + ".bin"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
  };
  write("q", pb.q);
  write("k", pb.k);
  write("v", pb.v);
  write("dout", pb.dout);
  if (!pb.sinks.empty()) write("sinks", pb.sinks);
  std::ofstream m(tc.dir / "meta.json");
  m << "{\"T\": " << pb.T() << ", \"H\": " << pb.H << ", \"Hkv\": " << pb.Hkv
    << ", \"Dh\": " << pb.Dh << ", \"cu_seqlens\": [";
  for (size_t i = 0; i < pb.cu.size(); ++i) m << (i ? ", " : "") << pb.cu[i];
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(pb.scale()));
  m << "], \"scale\": " << buf << ", \"window\": " << pb.p.window
    << ", \"softcap\": " << pb.p.softcap
    << ", \"sinks\": " << (pb.sinks.empty() ? "false" : "true") << "}";
}

void compare_outputs(const TorchCase& tc) {
  SCOPED_TRACE(tc.c.name);
  const Problem& pb = tc.pb;
  auto read = [&](const char* name, size_t n) {
    std::vector<float> x(n);
    std::ifstream f(tc.dir / (std::string(name) + ".bin"), std::ios::binary);
    f.read(reinterpret_cast<char*>(x.data()), n * sizeof(float));
    EXPECT_EQ(static_cast<size_t>(f.gcount()), n * sizeof(float)) << name;
    return x;
  };
  const FwdResult f = run_fwd(pb);
  const BwdResult g = run_bwd(pb, f);
  const double e_out = rel_err(f.out, read("out", f.out.size()));
  const double e_dq = rel_err(g.dq, read("dq", g.dq.size()));
  const double e_dk = rel_err(g.dk, read("dk", g.dk.size()));
  const double e_dv = rel_err(g.dv, read("dv", g.dv.size()));
  std::printf("%-26s vs torch: out %.2e dq %.2e dk %.2e dv %.2e\n", tc.c.name, e_out, e_dq, e_dk,
              e_dv);
  EXPECT_LT(e_out, 1e-5);
  EXPECT_LT(rel_err(f.lse, read("lse", f.lse.size())), 1e-5);
  EXPECT_LT(e_dq, 2e-5);
  EXPECT_LT(e_dk, 2e-5);
  EXPECT_LT(e_dv, 2e-5);
  if (!pb.sinks.empty()) EXPECT_LT(rel_err(g.dsinks, read("dsinks", pb.H)), 2e-5);
}

TEST(Attention, MatchesPyTorch) {
  std::vector<TorchCase> tcs;
  for (const Case& c : {Case{"gqa_window", {90, 17, 48}, 6, 2, 64, 20, 0.0f, false},
                        Case{"gqa_window_softcap_sinks", {70, 30}, 4, 2, 32, 24, 6.0f, true}})
    tcs.push_back({c, problem_of(c, 21), {}});
  std::string cmd = "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) +
                    "/tests/reference/attention_ref.py";
  for (TorchCase& tc : tcs) {
    write_inputs(tc);
    cmd += " " + tc.dir.string();
  }
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const TorchCase& tc : tcs) {
    compare_outputs(tc);
    std::filesystem::remove_all(tc.dir);
  }
}

// ------------------------------------------------------------------ bitwise

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows [t0, t0 + n) x (H * Dh) of x.
std::vector<float> rows(const std::vector<float>& x, int64_t t0, int64_t n, int64_t width) {
  return {x.begin() + t0 * width, x.begin() + (t0 + n) * width};
}

struct Variant {
  const char* name;
  int H, Hkv, Dh, window;
  float softcap;
  bool sinks;
};
const Variant kVariants[] = {
    {"gqa", 4, 2, 64, 0, 0.0f, false},
    {"gqa_window", 8, 2, 32, 21, 0.0f, false},
    {"mqa_softcap_sinks", 3, 1, 40, 0, 7.0f, true},
};

Problem variant_problem(const Variant& vr, const std::vector<int>& lens, uint32_t seed) {
  AttentionParams p;
  p.window = vr.window;
  p.softcap = vr.softcap;
  return make_problem(lens, vr.H, vr.Hkv, vr.Dh, p, vr.sinks, seed, 1.5f);
}

// (a) packed prefill == token-by-token decode against a NaN-initialised paged cache
// filled token by token through a shuffled block table.
TEST(AttentionBitwise, PrefillEqualsTokenByTokenDecode) {
  for (const Variant& vr : kVariants)
    for (int L : {B - 1, B, B + 1, 3 * B + 5, 100}) {
      SCOPED_TRACE(std::string(vr.name) + " L=" + std::to_string(L));
      const Problem pb = variant_problem(vr, {L}, 5 + L);
      const FwdResult pre = run_fwd(pb);
      PagedCache cache(1, L, pb.Hkv, pb.Dh, B, 77 + L);
      const int64_t w = int64_t{pb.H} * pb.Dh;
      for (int t = 0; t < L; ++t) {
        cache.write(pb, {0}, {t}, {t});
        const FwdResult dec = cache.attend(pb, {0}, {t}, {t}, 1);
        ASSERT_TRUE(same_bits(dec.out, rows(pre.out, t, 1, w))) << "token " << t;
        ASSERT_TRUE(same_bits(dec.lse, rows(pre.lse, t, 1, pb.H))) << "token " << t;
      }
    }
}

// (b) chunked prefill (chunks of various sizes, two sequences interleaved in each
// call) == full packed prefill.
TEST(AttentionBitwise, ChunkedPrefillEqualsFullPrefill) {
  for (const Variant& vr : kVariants) {
    SCOPED_TRACE(vr.name);
    const std::vector<int> lens = {100, 53};
    const Problem pb = variant_problem(vr, lens, 9);
    const FwdResult full = run_fwd(pb);
    PagedCache cache(2, 100, pb.Hkv, pb.Dh, B, 4);
    const std::vector<std::vector<int>> chunks = {{1, 7, 16, 3, 40, 33}, {20, 1, 1, 31}};
    std::vector<size_t> ci(2, 0);
    std::vector<int> done(2, 0);
    const int64_t w = int64_t{pb.H} * pb.Dh;
    while (done[0] < lens[0] || done[1] < lens[1]) {
      std::vector<int32_t> seq, pos;
      std::vector<int64_t> src;
      for (int s : {1, 0}) {  // sequence 1's chunk first: batch order is arbitrary
        if (done[s] >= lens[s]) continue;
        const int n = std::min(chunks[s][ci[s]++ % chunks[s].size()], lens[s] - done[s]);
        for (int i = 0; i < n; ++i) {
          seq.push_back(s);
          pos.push_back(done[s] + i);
          src.push_back(pb.cu[s] + done[s] + i);
        }
        done[s] += n;
      }
      cache.write(pb, seq, pos, src);
      const FwdResult r = cache.attend(pb, seq, pos, src, 2);
      for (size_t i = 0; i < src.size(); ++i) {
        ASSERT_EQ(std::memcmp(&r.out[i * w], &full.out[src[i] * w], w * sizeof(float)), 0)
            << "seq " << seq[i] << " pos " << pos[i];
        ASSERT_EQ(std::memcmp(&r.lse[i * pb.H], &full.lse[src[i] * pb.H], pb.H * sizeof(float)), 0);
      }
    }
  }
}

// (c) a sequence's forward and backward are the same alone and packed among other
// sequences in different orders.
TEST(AttentionBitwise, SequenceAloneEqualsPacked) {
  for (const Variant& vr : kVariants) {
    SCOPED_TRACE(vr.name);
    const int LA = 3 * B + 5;
    const Problem alone = variant_problem(vr, {LA}, 31);
    const FwdResult fa = run_fwd(alone);
    const BwdResult ga = run_bwd(alone, fa);
    const int64_t wq = int64_t{alone.H} * alone.Dh, wk = int64_t{alone.Hkv} * alone.Dh;
    // Packings: A's position among others of lengths 7, 40, 1.
    for (const std::vector<int>& lens : {std::vector<int>{7, LA, 40}, std::vector<int>{40, 1, 7, LA},
                                         std::vector<int>{LA, 1}}) {
      Problem pk = variant_problem(vr, lens, 99);
      pk.sinks = alone.sinks;
      const int a = static_cast<int>(std::find(lens.begin(), lens.end(), LA) - lens.begin());
      const int64_t t0 = pk.cu[a];
      std::copy(alone.q.begin(), alone.q.end(), pk.q.begin() + t0 * wq);
      std::copy(alone.dout.begin(), alone.dout.end(), pk.dout.begin() + t0 * wq);
      std::copy(alone.k.begin(), alone.k.end(), pk.k.begin() + t0 * wk);
      std::copy(alone.v.begin(), alone.v.end(), pk.v.begin() + t0 * wk);
      const FwdResult fp = run_fwd(pk);
      const BwdResult gp = run_bwd(pk, fp);
      EXPECT_TRUE(same_bits(rows(fp.out, t0, LA, wq), fa.out));
      EXPECT_TRUE(same_bits(rows(fp.lse, t0, LA, alone.H), fa.lse));
      EXPECT_TRUE(same_bits(rows(gp.dq, t0, LA, wq), ga.dq));
      EXPECT_TRUE(same_bits(rows(gp.dk, t0, LA, wk), ga.dk));
      EXPECT_TRUE(same_bits(rows(gp.dv, t0, LA, wk), ga.dv));
    }
  }
}

// A query row's dQ depends only on the keys it sees, so it has the same bits when the
// rows after it are cut off, although the rows are then grouped differently inside
// the kernel (1, 2 or 4 rows sharing a key range at once).
TEST(AttentionBitwise, BackwardQueryRowsEqualInATruncatedSequence) {
  for (const Variant& vr : kVariants) {
    const int L = 3 * B + 5;
    const Problem full = variant_problem(vr, {L}, 57);
    const BwdResult gf = run_bwd(full, run_fwd(full));
    const int64_t wq = int64_t{full.H} * full.Dh, wk = int64_t{full.Hkv} * full.Dh;
    for (int Lp : {L - 1, L - 2, L - 3, 2 * B + 2, B + 1}) {
      SCOPED_TRACE(std::string(vr.name) + " Lp=" + std::to_string(Lp));
      Problem cut = variant_problem(vr, {Lp}, 57);
      cut.q = rows(full.q, 0, Lp, wq);
      cut.dout = rows(full.dout, 0, Lp, wq);
      cut.k = rows(full.k, 0, Lp, wk);
      cut.v = rows(full.v, 0, Lp, wk);
      cut.sinks = full.sinks;
      const BwdResult gc = run_bwd(cut, run_fwd(cut));
      EXPECT_TRUE(same_bits(gc.dq, rows(gf.dq, 0, Lp, wq)));
    }
  }
}

// (d) 1 and 2 threads give the same bits (forward, backward, paged).
TEST(AttentionBitwise, ThreadCountInvariant) {
  const int saved = num_threads();
  for (const Variant& vr : kVariants) {
    SCOPED_TRACE(vr.name);
    const Problem pb = variant_problem(vr, {100, 3 * B + 5, 9}, 17);
    set_num_threads(1);
    const FwdResult f1 = run_fwd(pb);
    const BwdResult g1 = run_bwd(pb, f1);
    set_num_threads(2);
    const FwdResult f2 = run_fwd(pb);
    const BwdResult g2 = run_bwd(pb, f2);
    EXPECT_TRUE(same_bits(f1.out, f2.out));
    EXPECT_TRUE(same_bits(f1.lse, f2.lse));
    EXPECT_TRUE(same_bits(g1.dq, g2.dq));
    EXPECT_TRUE(same_bits(g1.dk, g2.dk));
    EXPECT_TRUE(same_bits(g1.dv, g2.dv));
    EXPECT_TRUE(same_bits(g1.dsinks, g2.dsinks));
  }
  set_num_threads(saved);
}

// (e) the checks are live: a different block size on one side changes the bits.
TEST(AttentionBitwise, DifferentBlockSizeBreaksParity) {
  const Problem pb = variant_problem(kVariants[0], {100}, 41);
  const FwdResult pre = run_fwd(pb);  // block size B
  PagedCache cache(1, 100, pb.Hkv, pb.Dh, 2 * B, 8);
  std::vector<int32_t> seq(100, 0), pos(100);
  std::vector<int64_t> src(100);
  for (int t = 0; t < 100; ++t) pos[t] = t, src[t] = t;
  cache.write(pb, seq, pos, src);
  const FwdResult dec = cache.attend(pb, seq, pos, src, 1);
  const double d = max_abs_diff(dec.out.data(), pre.out.data(), pre.out.size());
  std::printf("max |out(B=%d) - out(B=%d)| = %.3g\n", B, 2 * B, d);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 1e-5);  // still the same attention, only rounded differently
  const FwdResult pre2 = run_fwd(pb, 2 * B);
  EXPECT_TRUE(same_bits(pre2.out, dec.out));  // and equal again with the same B
}

// ------------------------------------------------------------------ errors

template <typename F>
void expect_error(F&& f, const std::string& substr) {
  try {
    f();
    ADD_FAILURE() << "no titan::Error, expected: " << substr;
  } catch (const titan::Error& e) {
    EXPECT_NE(std::string(e.what()).find(substr), std::string::npos) << e.what();
  }
}

TEST(Attention, BadInputErrors) {
  const Problem pb = make_problem({5, 3}, 4, 2, 16);
  std::vector<float> out(pb.q.size()), lse(pb.T() * pb.H);
  auto fwd = [&](const std::vector<int32_t>& cu, int H, int Hkv, int Dh, AttentionParams p) {
    attention_varlen_fwd(out.data(), lse.data(), pb.q.data(), pb.k.data(), pb.v.data(), cu.data(),
                         static_cast<int>(cu.size()) - 1, 8, H, Hkv, Dh, p);
  };
  expect_error([&] { fwd(pb.cu, 6, 4, 16, {}); },
               "attention_varlen_fwd: H (6) must be a multiple of Hkv (4)");
  expect_error([&] { fwd({0, 6, 5, 8}, 4, 2, 16, {}); },
               "attention_varlen_fwd: cu_seqlens must be non-decreasing, but cu_seqlens[2] = 5 < "
               "cu_seqlens[1] = 6");
  expect_error([&] { fwd({0, 5, 7}, 4, 2, 16, {}); },
               "attention_varlen_fwd: cu_seqlens[S=2] must equal T = 8, got 7");
  expect_error([&] { fwd({1, 5, 8}, 4, 2, 16, {}); }, "cu_seqlens[0] must be 0, got 1");
  expect_error([&] { fwd(pb.cu, 4, 2, 12, {}); }, "Dh must be a multiple of 8 in [8, 256], got 12");
  AttentionParams bad;
  bad.block_size = 24;
  expect_error([&] { fwd(pb.cu, 4, 2, 16, bad); },
               "block_size must be a multiple of 16 in [16, 256], got 24");
  bad = {};
  bad.window = -1;
  expect_error([&] { fwd(pb.cu, 4, 2, 16, bad); }, "params.window must be >= 0");
  bad = {};
  bad.softcap = -2.0f;
  expect_error([&] { fwd(pb.cu, 4, 2, 16, bad); }, "params.softcap must be finite and >= 0");
  expect_error(
      [&] {
        attention_varlen_bwd(nullptr, out.data(), out.data(), nullptr, out.data(), out.data(),
                             lse.data(), pb.q.data(), pb.k.data(), pb.v.data(), pb.cu.data(), 2, 8,
                             4, 2, 16);
      },
      "attention_varlen_bwd: dq is null with T = 8");

  // Paged: 1 sequence, table of 2 blocks over a cache of 4 blocks.
  PagedCache cache(1, 2 * B, 2, 16, B, 1);
  cache.num_blocks = 4;
  std::vector<int32_t> table = {3, 1};
  auto paged = [&](int32_t seq, int32_t pos, std::vector<int32_t> tbl) {
    float o[4 * 16], l[4];
    attention_paged_fwd(o, l, pb.q.data(), cache.kc.data(), cache.vc.data(), tbl.data(), &seq,
                        &pos, 1, 4, 2, 16, 1, 2, 4);
  };
  expect_error([&] { paged(0, 2 * B, table); },
               "attention_paged_fwd: pos_of_token[0] = " + std::to_string(2 * B) +
                   " is beyond the block table (expected [0, max_blocks_per_seq * block_size = " +
                   std::to_string(2 * B) + "))");
  expect_error([&] { paged(1, 3, table); },
               "attention_paged_fwd: seq_of_token[0] = 1 is out of range [0, num_seqs = 1)");
  expect_error([&] { paged(0, B + 2, {3, 4}); },
               "attention_paged_fwd: block_tables[0][1] = 4 is out of range [0, num_blocks = 4)");
  expect_error([&] { paged(0, B + 2, {-1, 2}); }, "block_tables[0][0] = -1 is out of range");
  // With a window only the blocks in the window are read: a freed (-1) first block is fine.
  AttentionParams wp;
  wp.window = 4;
  float o[4 * 16], l[4];
  int32_t seq = 0, pos = B + 5;
  std::vector<int32_t> freed = {-1, 2};
  std::fill(cache.kc.begin(), cache.kc.end(), 0.0f);
  std::fill(cache.vc.begin(), cache.vc.end(), 0.0f);
  EXPECT_NO_THROW(attention_paged_fwd(o, l, pb.q.data(), cache.kc.data(), cache.vc.data(),
                                      freed.data(), &seq, &pos, 1, 4, 2, 16, 1, 2, 4, wp));

  int64_t slot = 4 * B;
  expect_error(
      [&] {
        kv_cache_write(cache.kc.data(), cache.vc.data(), pb.k.data(), pb.v.data(), &slot, 1, 2, 16,
                       4);
      },
      "kv_cache_write: slot_mapping[0] = " + std::to_string(4 * B) +
          " is out of range [0, num_blocks * block_size = " + std::to_string(4 * B) + ")");
}

}  // namespace
}  // namespace titan::kernels::cpu::testing
