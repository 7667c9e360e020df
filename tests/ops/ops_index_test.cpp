// Indexing and joining ops vs PyTorch (float64 reference), determinism, errors.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/util/torch_ref.h"
#include "titan/autograd/node.h"
#include "titan/core/thread_pool.h"
#include "titan/ops/index.h"
#include "titan/ops/join.h"
#include "titan/ops/matmul.h"
#include "titan/ops/reduce.h"

namespace titan {
namespace {

using test::check_ops;
using test::OpCheck;
using test::randint;
using test::randn;

TEST(Index, MatchesTorch) {
  std::vector<OpCheck> cs;
  uint64_t seed = 700;
  // embedding: f32/bf16 weights, i32/i64 ids with repeats (accumulated gradient rows).
  for (int variant = 0; variant < 4; ++variant) {
    const bool bf16 = variant & 1;
    const DType idt = variant & 2 ? DType::i32 : DType::i64;
    for (Shape ids : {Shape{1}, Shape{33}, Shape{3, 17}}) {
      OpCheck c;
      c.ref.op = "embedding";
      c.ref.label = fmt::format("embedding ids{} bf16={} {}", shape_str(ids), bf16, dtype_name(idt));
      Tensor w = randn({13, 9}, seed++);
      c.ref.inputs = {{"weight", bf16 ? w.to(DType::bf16) : w}, {"ids", randint(ids, 13, seed++, idt)}};
      c.ref.grad_of = {"weight"};
      c.fn = [](auto& in) { return std::vector<Tensor>{embedding(in[0], in[1])}; };
      c.grad_tol = {1e-5, 1e-5};
      cs.push_back(c);
    }
  }
  // index_select / gather / scatter_add along every dim of a 3-D tensor.
  const Shape xs{4, 5, 6};
  for (int64_t d = 0; d < 3; ++d) {
    OpCheck c;
    c.ref.op = "index_select";
    c.ref.label = fmt::format("index_select dim {}", d);
    c.ref.attrs = {{"dim", d}};
    c.ref.inputs = {{"x", randn(xs, seed++)}, {"index", randint({7}, xs[d], seed++)}};
    c.ref.grad_of = {"x"};
    c.fn = [d](auto& in) { return std::vector<Tensor>{index_select(in[0], d, in[1])}; };
    c.grad_tol = {1e-5, 1e-5};
    cs.push_back(c);

    Shape is = xs;
    is[d] = 3;
    is[(d + 1) % 3] -= 1;  // smaller than x in another dim too
    OpCheck g;
    g.ref.op = "gather";
    g.ref.label = fmt::format("gather dim {}", d);
    g.ref.attrs = {{"dim", d}};
    g.ref.inputs = {{"x", randn(xs, seed++)}, {"index", randint(is, xs[d], seed++)}};
    g.ref.grad_of = {"x"};
    g.fn = [d](auto& in) { return std::vector<Tensor>{gather(in[0], d, in[1])}; };
    g.grad_tol = {1e-5, 1e-5};
    cs.push_back(g);

    Shape ss = xs;
    ss[d] = 8;  // src longer than index along dim
    OpCheck s;
    s.ref.op = "scatter_add";
    s.ref.label = fmt::format("scatter_add dim {}", d);
    s.ref.attrs = {{"dim", d}};
    Shape si = is;
    s.ref.inputs = {{"self", randn(xs, seed++)}, {"index", randint(si, xs[d], seed++)},
                    {"src", randn(ss, seed++)}};
    s.ref.grad_of = {"self", "src"};
    s.fn = [d](auto& in) { return std::vector<Tensor>{scatter_add(in[0], d, in[1], in[2])}; };
    s.tol = {1e-5, 1e-5};
    cs.push_back(s);
  }
  // topk (random values: no ties), argmax.
  for (Shape s : {Shape{1}, Shape{17}, Shape{3, 33}}) {
    for (int64_t k : {int64_t{1}, s.back() / 2, s.back()}) {
      OpCheck c;
      c.ref.op = "topk";
      c.ref.label = fmt::format("topk{} k={}", shape_str(s), k);
      c.ref.attrs = {{"k", k}};
      c.ref.inputs = {{"x", randn(s, seed++)}};
      c.ref.grad_of = {"x"};
      c.fn = [k](auto& in) {
        auto r = topk(in[0], k);
        return std::vector<Tensor>{r.values, r.indices};
      };
      cs.push_back(c);
    }
  }
  // cat / stack / split / chunk.
  for (int64_t d = 0; d < 2; ++d) {
    OpCheck c;
    c.ref.op = "cat";
    c.ref.label = fmt::format("cat dim {}", d);
    c.ref.attrs = {{"dim", d}};
    Shape a{3, 5}, b{3, 5}, e{3, 5};
    a[d] = 1;
    b[d] = 4;
    e[d] = 0;
    c.ref.inputs = {{"t0", randn(a, seed++)}, {"t1", randn(b, seed++)}, {"t2", randn(e, seed++)}};
    c.ref.grad_of = {"t0", "t1", "t2"};
    c.fn = [d](auto& in) { return std::vector<Tensor>{cat(in, d)}; };
    cs.push_back(c);

    OpCheck st;
    st.ref.op = "stack";
    st.ref.label = fmt::format("stack dim {}", d);
    st.ref.attrs = {{"dim", d}};
    st.ref.inputs = {{"t0", randn({2, 3}, seed++)}, {"t1", randn({2, 3}, seed++)}};
    st.ref.grad_of = {"t0", "t1"};
    st.fn = [d](auto& in) { return std::vector<Tensor>{stack(in, d)}; };
    cs.push_back(st);

    OpCheck sp;
    sp.ref.op = "split";
    sp.ref.label = fmt::format("split dim {}", d);
    sp.ref.attrs = {{"dim", d}, {"sizes", {2, 0, 5}}};
    Shape xs2{7, 7};
    sp.ref.inputs = {{"x", randn(xs2, seed++)}};
    sp.ref.grad_of = {"x"};
    sp.fn = [d](auto& in) { return split(in[0], std::vector<int64_t>{2, 0, 5}, d); };
    cs.push_back(sp);

    OpCheck ch;
    ch.ref.op = "chunk";
    ch.ref.label = fmt::format("chunk dim {}", d);
    ch.ref.attrs = {{"dim", d}, {"chunks", 3}};
    ch.ref.inputs = {{"x", randn({7, 8}, seed++)}};
    ch.ref.grad_of = {"x"};
    ch.fn = [d](auto& in) { return chunk(in[0], 3, d); };
    cs.push_back(ch);
  }
  check_ops(cs);
}

TEST(Index, TopKTiesGoToLowerIndex) {
  Tensor x = Tensor::from_vector<float>({1, 3, 3, 2, 3, 0}, {6});
  auto r = topk(x, 4);
  EXPECT_EQ(r.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 4, 3}));
  EXPECT_EQ(r.values.to_vector<float>(), (std::vector<float>{3, 3, 3, 2}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
}

TEST(Index, EmbeddingBackwardIsDeterministicAcrossThreads) {
  Tensor w = randn({50, 96}, 1);
  Tensor ids = randint({500}, 50, 2);
  Tensor up = randn({500, 96}, 3);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor wl = w.clone().detach().requires_grad_();
    embedding(wl, ids).backward(up);
    return wl.grad().to_vector<float>();
  };
  const int prev = num_threads();
  auto a = run(1), b = run(2);
  set_num_threads(prev);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // The documented order: rows accumulated in token order starting from zero.
  auto iv = ids.to_vector<int64_t>();
  auto uv = up.to_vector<float>();
  std::vector<float> want(50 * 96, 0.0f);
  for (int t = 0; t < 500; ++t)
    for (int j = 0; j < 96; ++j) want[iv[t] * 96 + j] += uv[t * 96 + j];
  EXPECT_EQ(std::memcmp(a.data(), want.data(), a.size() * 4), 0);
}

TEST(Index, EmbeddingPanelsEqualsEmbedding) {
  // A tied embedding repacked as the LM head's GEMM panels (37 rows: a zero-padded last
  // panel) gathers the same rows, bit for bit.
  autograd::NoGradGuard ng;
  Tensor w = randn({37, 24}, 1), panels = repack_linear_weight(w);
  Tensor ids = Tensor::from_vector<int32_t>({0, 36, 15, 16, 31, 32, 5, 5}, {2, 4});
  auto want = embedding(w, ids), got = embedding_panels(panels, 37, ids);
  EXPECT_EQ(got.shape(), (Shape{2, 4, 24}));
  auto a = want.to_vector<float>(), b = got.to_vector<float>();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  try {
    embedding_panels(panels, 37, Tensor::from_vector<int32_t>({3, 37}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 37 at position 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(embedding_panels(w, 37, ids), Error);        // not repacked
  EXPECT_THROW(embedding_panels(panels, 100, ids), Error);  // panel count
}

TEST(Index, Errors) {
  Tensor w = Tensor::zeros({10, 4});
  try {
    embedding(w, Tensor::from_vector<int64_t>({1, 10}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding: token id 10 at position 1 is out of range for "
                                         "vocabulary size V = 10"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(embedding(w, Tensor::zeros({2})), Error);  // f32 ids
  try {
    index_select(w, 0, Tensor::from_vector<int64_t>({-1}, {1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index_select: index[0] = -1 is out of range"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(gather(w, 1, Tensor::zeros({11, 1}, DType::i64)), Error);
  EXPECT_THROW(topk(w, 5), Error);
  try {
    cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 4})}, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cat: tensors[1] has shape [2, 4] but tensors[0] has shape "
                                         "[2, 3] (must match except in dim 0)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cat({Tensor::zeros({2}), Tensor::zeros({2}, DType::i64)}, 0), Error);
  EXPECT_THROW(split(w, std::vector<int64_t>{3, 3}, 0), Error);
}

}  // namespace
}  // namespace titan
