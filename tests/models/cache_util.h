// Helpers of the latent-cache model tests (MLA, DSA; tests/models/deepseek_v3*_test.cpp):
// the reference scripts' runner, the oracle's error measure, and the trainer and generator
// paths of one Decoder side by side for bitwise prefill == decode checks.
#pragma once
#include <gtest/gtest.h>
#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/models/common/decoder.h"

namespace titan::test {

// Runs `script args` with the venv's python (one thread); its stdout. A non-zero exit
// fails the test.
inline std::string run_reference(const std::string& script, const std::string& args) {
  const std::string cmd = "OMP_NUM_THREADS=1 '" + venv_python() + "' '" + script + "' " + args;
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd;
  return out;
}

// max |a - b| / max |b| (absolute when b is all zeros: an expert no token chose).
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0 ? d / m : d;
}

inline bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Runs `chunks` (sizes summing to the sequence's length) of one sequence through the
// generator path with a fresh cache of block size 32 (every slot NaN before it is written;
// block table reversed, so logical and physical blocks differ) and returns the final
// hidden states of all tokens.
inline std::vector<float> generate_hidden(const models::Decoder& m, const std::vector<int32_t>& toks,
                                          const std::vector<int>& chunks) {
  const int B = 32;
  const int64_t nb = (static_cast<int64_t>(toks.size()) + B - 1) / B + 1;
  models::ModelCache kv = models::allocate_cache(m.cache_spec(B), nb, B);
  for (auto& l : kv.layers)
    for (auto& t : l.paged) std::fill_n(t.data<float>(), t.numel(), std::nanf(""));
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nb; ++b) table.push_back(static_cast<int32_t>(nb - 1 - b));
  std::vector<float> out;
  size_t at = 0;
  for (int n : chunks) {
    models::ForwardBatch fb;
    std::vector<int32_t> tk(toks.begin() + static_cast<long>(at), toks.begin() + static_cast<long>(at + n)), ps, sq;
    std::vector<int64_t> sl;
    for (int i = 0; i < n; ++i) {
      const int p = static_cast<int>(at) + i;
      ps.push_back(p);
      sq.push_back(0);
      sl.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / B)]) * B + p % B);
    }
    fb.tokens = Tensor::from_vector(tk, {n});
    fb.positions = Tensor::from_vector(ps, {n});
    fb.seq_ids = Tensor::from_vector(sq, {n});
    fb.slot_mapping = Tensor::from_vector(sl, {n});
    fb.block_tables = Tensor::from_vector(table, {1, nb});
    fb.kv = &kv;
    const auto h = m.forward(fb).to_vector<float>();
    out.insert(out.end(), h.begin(), h.end());
    at += static_cast<size_t>(n);
  }
  return out;
}

// The trainer path's final hidden states of the packed documents.
inline std::vector<float> train_hidden(const models::Decoder& m, const std::vector<std::vector<int32_t>>& docs) {
  return m.forward(models::make_packed_batch(docs)).to_vector<float>();
}

// Token ids 0..95 of a length-n sequence; salt varies the sequence.
inline std::vector<int32_t> tokens_of(int n, int salt) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 29 + salt * 13 + 1) % 96);
  return v;
}

// The generator's final hidden states equal the trainer's bitwise for a 75-token
// sequence: one prefill chunk, token by token, chunked prefill + decode, and (after
// repack_for_decode, which changes m's decode weights) prefill + decode on repacked weights.
inline void expect_prefill_equals_decode(models::Decoder& m) {
  autograd::NoGradGuard ng;
  const auto toks = tokens_of(75, 1);
  const auto want = train_hidden(m, {toks});
  EXPECT_TRUE(same_float_bits(generate_hidden(m, toks, {75}), want)) << "one prefill chunk";
  EXPECT_TRUE(same_float_bits(generate_hidden(m, toks, std::vector<int>(75, 1)), want)) << "token by token";
  EXPECT_TRUE(same_float_bits(generate_hidden(m, toks, {33, 1, 1, 40}), want)) << "chunked prefill + decode";
  m.repack_for_decode();
  EXPECT_TRUE(same_float_bits(generate_hidden(m, toks, {10, 1, 64}), want)) << "repacked weights";
}

// Batch invariance: each of 3 documents of 1, 7 and 257 tokens has the same final hidden
// states alone on 1 thread, packed with the others on 1 and 2 threads, and through the
// generator's cache.
inline void expect_batch_invariant_1_7_257(const models::Decoder& m) {
  autograd::NoGradGuard ng;
  const int saved = num_threads();
  const std::vector<int> lens = {1, 7, 257};
  std::vector<std::vector<int32_t>> docs;
  for (int i = 0; i < 3; ++i) docs.push_back(tokens_of(lens[static_cast<size_t>(i)], i + 2));
  std::vector<std::vector<float>> alone;
  set_num_threads(1);
  for (auto& d : docs) alone.push_back(train_hidden(m, {d}));
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const auto packed = train_hidden(m, docs);
    size_t off = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      std::vector<float> part(packed.begin() + static_cast<long>(off),
                              packed.begin() + static_cast<long>(off + alone[i].size()));
      EXPECT_TRUE(same_float_bits(part, alone[i])) << lens[i] << " tokens in a packed batch, " << threads << " threads";
      off += alone[i].size();
      EXPECT_TRUE(same_float_bits(generate_hidden(m, docs[i], {lens[i]}), alone[i]))
          << lens[i] << " tokens through the cache, " << threads << " threads";
    }
  }
  set_num_threads(saved);
}

}  // namespace titan::test
