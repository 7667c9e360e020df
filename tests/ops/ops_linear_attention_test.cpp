// Linear-attention ops (chunked Gated DeltaNet, Kimi Delta Attention, causal conv1d,
// gated RMSNorm, L2 normalisation) vs two oracles run in the PyPI venv
// (tests/reference/linear_attention_ref.py): a naive recurrent float64 reference with
// torch autograd, and flash-linear-attention's plain-PyTorch naive chunk / recurrent
// references. Forward and the gradients to every input.
#include <gtest/gtest.h>

#include "tests/util/torch_ref.h"
#include "tests/util/venv_python.h"
#include "titan/autograd/node.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/linear_attention.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randn;
using test::Tol;

Tensor cu_tensor(const std::vector<int64_t>& cu) {
  return Tensor::from_vector(cu, {static_cast<int64_t>(cu.size())}, DType::i64);
}

// Unit-norm rows over the last dim (the models L2-normalise q and k).
Tensor unit_rows(const Shape& s, uint64_t seed) {
  autograd::NoGradGuard ng;
  return l2_normalize(randn(s, seed), 0.0).contiguous();
}

// Log decays in about [-1.2, -0.02] (−exp(A_log)·softplus(a + dt_bias) in the models).
Tensor log_decay(const Shape& s, uint64_t seed) {
  autograd::NoGradGuard ng;
  return scale(add(abs(randn(s, seed, 0.4)), 0.02), -1.0).contiguous();
}

Tensor betas(const Shape& s, uint64_t seed) {
  autograd::NoGradGuard ng;
  return sigmoid(randn(s, seed)).contiguous();
}

struct Case {
  std::vector<int64_t> cu;
  int64_t Hk, H, K, V;
};

OpCheck delta_case(const std::string& op, const Case& c, bool kda, uint64_t seed, Tol tol) {
  const int64_t T = c.cu.back();
  OpCheck ck;
  ck.ref.op = op;
  ck.ref.label = fmt::format("{} {} T={} N={} Hk={} H={} K={} V={}", op, kda ? "kda" : "gdn", T,
                             c.cu.size() - 1, c.Hk, c.H, c.K, c.V);
  ck.ref.inputs = {{"q", unit_rows({T, c.Hk, c.K}, seed)},
                   {"k", unit_rows({T, c.Hk, c.K}, seed + 1)},
                   {"v", randn({T, c.H, c.V}, seed + 2)},
                   {"g", kda ? log_decay({T, c.H, c.K}, seed + 3) : log_decay({T, c.H}, seed + 3)},
                   {"beta", betas({T, c.H}, seed + 4)},
                   {"cu_seqlens", cu_tensor(c.cu)}};
  ck.ref.grad_of = {"q", "k", "v", "g", "beta"};
  ck.fn = [kda](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kda ? chunk_kda(in[0], in[1], in[2], in[3], in[4], in[5])
                                   : chunk_gated_delta_rule(in[0], in[1], in[2], in[3], in[4], in[5])};
  };
  ck.tol = ck.grad_tol = tol;
  return ck;
}

const std::vector<Case> kCases = {
    {{0, 1}, 1, 1, 8, 8},                // one token
    {{0, 64}, 2, 2, 16, 16},             // exactly one chunk
    {{0, 65}, 1, 2, 16, 24},             // chunk + 1, grouped heads
    {{0, 70, 75, 203}, 2, 4, 32, 16},    // packed: boundary crossings, partial chunks
    {{0, 0, 130, 131}, 1, 1, 20, 12},    // empty sequence, K and V not multiples of the lanes
};

TEST(GatedDeltaRule, MatchesRecurrentFloat64) {
  std::vector<OpCheck> cs;
  uint64_t seed = 9000;
  for (const Case& c : kCases) {
    cs.push_back(delta_case("gdn_recurrent_f64", c, false, seed, {2e-4, 2e-5}));
    cs.push_back(delta_case("gdn_recurrent_f64", c, true, seed + 50, {2e-4, 2e-5}));
    seed += 100;
  }
  check_ops(cs, "linear_attention_ref", test::venv_python());
}

TEST(GatedDeltaRule, MatchesFlaNaiveReferences) {
  std::vector<OpCheck> cs;
  uint64_t seed = 9500;
  // fla's naive references compute in float32: the tolerance covers both sides' rounding.
  for (const Case& c : kCases) {
    cs.push_back(delta_case("gdn_fla_chunk", c, false, seed, {1e-3, 1e-4}));
    cs.push_back(delta_case("gdn_fla_recurrent", c, false, seed + 10, {1e-3, 1e-4}));
    cs.push_back(delta_case("kda_fla_chunk", c, true, seed + 20, {1e-3, 1e-4}));
    cs.push_back(delta_case("kda_fla_recurrent", c, true, seed + 30, {1e-3, 1e-4}));
    seed += 100;
  }
  check_ops(cs, "linear_attention_ref", test::venv_python());
}

TEST(CausalConv1d, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 9900;
  for (auto [cu, C, W] : {std::tuple{std::vector<int64_t>{0, 9}, int64_t{5}, int64_t{4}},
                          std::tuple{std::vector<int64_t>{0, 2, 2, 40}, int64_t{37}, int64_t{4}},
                          std::tuple{std::vector<int64_t>{0, 70, 200}, int64_t{16}, int64_t{1}},
                          std::tuple{std::vector<int64_t>{0, 3, 10}, int64_t{8}, int64_t{6}}}) {
    OpCheck ck;
    ck.ref.op = "causal_conv1d";
    ck.ref.label = fmt::format("conv1d T={} C={} W={}", cu.back(), C, W);
    ck.ref.inputs = {{"x", randn({cu.back(), C}, seed)}, {"w", randn({C, W}, seed + 1, 0.5)},
                     {"cu_seqlens", cu_tensor(cu)}};
    ck.ref.grad_of = {"x", "w"};
    ck.fn = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{causal_conv1d(in[0], in[1], in[2])};
    };
    ck.tol = ck.grad_tol = {1e-5, 1e-5};
    cs.push_back(ck);
    seed += 10;
  }
  check_ops(cs, "linear_attention_ref", test::venv_python());
}

TEST(RmsNormGated, MatchesHf) {
  std::vector<OpCheck> cs;
  for (auto [T, D] : {std::pair{int64_t{1}, int64_t{8}}, {int64_t{7}, int64_t{33}}}) {
    OpCheck ck;
    ck.ref.op = "rms_norm_gated";
    ck.ref.attrs = {{"eps", 1e-6}};
    ck.ref.inputs = {{"x", randn({T, D}, 10 + T)}, {"z", randn({T, D}, 20 + T)},
                     {"w", randn({D}, 30 + T)}};
    ck.ref.grad_of = {"x", "z", "w"};
    ck.fn = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{rms_norm_gated(in[0], in[1], in[2], 1e-6)};
    };
    ck.tol = ck.grad_tol = {1e-5, 1e-5};
    cs.push_back(ck);
    OpCheck l2;
    l2.ref.op = "l2_normalize";
    l2.ref.attrs = {{"eps", 1e-6}};
    l2.ref.inputs = {{"x", randn({T, 3, D}, 40 + T)}};
    l2.ref.grad_of = {"x"};
    l2.fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{l2_normalize(in[0], 1e-6)}; };
    l2.tol = l2.grad_tol = {1e-5, 1e-6};
    cs.push_back(l2);
  }
  check_ops(cs, "linear_attention_ref", test::venv_python());
}

TEST(GatedDeltaRule, BadInputsAreOneLineErrors) {
  const Tensor q = randn({4, 2, 8}, 1), v = randn({4, 2, 8}, 2), g = randn({4, 2}, 3);
  const Tensor b = randn({4, 2}, 4), cu = cu_tensor({0, 4});
  EXPECT_THROW(chunk_gated_delta_rule(q, q, v, randn({4, 3}, 5), b, cu), Error);
  EXPECT_THROW(chunk_gated_delta_rule(q, q, randn({4, 3, 8}, 6), g, b, cu), Error);
  EXPECT_THROW(chunk_gated_delta_rule(q, q, v, g, b, cu_tensor({0, 5})), Error);
  EXPECT_THROW(chunk_kda(q, q, v, g, b, cu), Error);  // KDA needs g (T, H, K)
  EXPECT_THROW(causal_conv1d(randn({4, 3}, 7), randn({3, 0}, 8), cu), Error);
  try {
    chunk_gated_delta_rule(q, q, v, g, b, cu_tensor({0, 3, 2, 4}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace titan
