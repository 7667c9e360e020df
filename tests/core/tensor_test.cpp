// Tensor core: views/strides, creation, Philox known-answer vectors, printing, errors.
#include <gtest/gtest.h>

#include <cstring>

#include "titan/autograd/node.h"
#include "titan/core/philox.h"
#include "titan/core/tensor.h"
#include "titan/core/thread_pool.h"

using namespace titan;

#define EXPECT_TITAN_ERROR(stmt, substr)                                        \
  try {                                                                         \
    stmt;                                                                       \
    ADD_FAILURE() << "expected titan::Error containing: " << substr;            \
  } catch (const Error& e) {                                                    \
    EXPECT_NE(std::string(e.what()).find(substr), std::string::npos) << e.what(); \
  }

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors, philox4x32_10.
  auto a = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(a, (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  auto b = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(b, (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  auto c = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(c, (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Tensor, CreationAndVectors) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.numel(), 6);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.data_ptr()) % 64, 0u);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.f);
  Tensor a = Tensor::arange(0, 10, 3);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(Tensor::arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  Tensor f = Tensor::full({2}, 2.5, DType::bf16);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
  Tensor v = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.select(0, 1).select(0, 2).item<float>(), 6.f);
  EXPECT_TITAN_ERROR(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), "3 values for shape [2, 2]");
  EXPECT_TITAN_ERROR(v.item<float>(), "has 6 elements");
}

TEST(Tensor, RandomIsKeyedBySeedAndOffset) {
  Tensor r1 = Tensor::rand({1000}, 42), r2 = Tensor::rand({1000}, 42), r3 = Tensor::rand({1000}, 43);
  EXPECT_EQ(r1.to_vector<float>(), r2.to_vector<float>());
  EXPECT_NE(r1.to_vector<float>(), r3.to_vector<float>());
  // Element i depends only on (seed, offset + i/4): a tensor starting at offset 2 equals elements 8.. of r1.
  Tensor r4 = Tensor::rand({8}, 42, 2);
  auto v1 = r1.to_vector<float>(), v4 = r4.to_vector<float>();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v4[i], v1[8 + i]);
  double mean = 0, m2 = 0;
  Tensor n = Tensor::randn({20000}, 1);
  for (float x : n.to_vector<float>()) mean += x, m2 += double(x) * x;
  mean /= 20000, m2 /= 20000;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(m2, 1.0, 0.04);
  for (float x : r1.to_vector<float>()) EXPECT_TRUE(x >= 0.f && x < 1.f);
}

TEST(Tensor, ViewsShareStorageAndStride) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{4, 3}));
  EXPECT_EQ(tt.strides(), (Shape{1, 4}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.contiguous().to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Tensor s = t.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(t.narrow(0, 1, 2).to_vector<float>(), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  Tensor e = Tensor::from_vector<float>({1, 2, 3}, {3}).unsqueeze(0).expand({2, 3});
  EXPECT_EQ(e.strides(), (Shape{0, 1}));
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  Tensor r = t.reshape({2, -1});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_EQ(r.storage().get(), t.storage().get());  // a view
  Tensor rr = tt.reshape({12});                      // needs a copy
  EXPECT_NE(rr.storage().get(), t.storage().get());
  EXPECT_EQ(t.permute({1, 0}).unsqueeze(1).squeeze(1).shape(), (Shape{4, 3}));
  // Writing through a view changes the base.
  t.select(0, 0).fill_(-1);
  EXPECT_EQ(t.to_vector<float>()[3], -1.f);
  EXPECT_TITAN_ERROR(tt.view({12}), "use reshape");
  EXPECT_TITAN_ERROR(t.reshape({5, -1}), "cannot reshape");
  EXPECT_TITAN_ERROR(t.permute({0, 0}), "repeated");
  EXPECT_TITAN_ERROR(t.expand({3, 5}), "cannot expand");
  EXPECT_TITAN_ERROR(t.select(0, 3), "out of range");
  EXPECT_TITAN_ERROR(t.size(2), "out of range");
}

// copy_ between strided layouts (the coalesced, row-parallel path) against the
// definition: dst[i0, i1, ...] = src[i0, i1, ...] read through each tensor's strides,
// for narrowed, expanded (stride 0), permuted and sliced views, size-1 dims, rows long
// enough to split over threads, 4-, 2- and 8-byte elements, and a strided destination.
TEST(Tensor, StridedCopyMatchesIndexDefinition) {
  auto at = [](const Tensor& t, const std::vector<int64_t>& idx) {
    int64_t o = t.offset();
    for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * t.strides()[d];
    return o;
  };
  auto check = [&](const Tensor& src, const std::string& what) {
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor dst = Tensor::empty(src.shape(), src.dtype());
      dst.copy_(src);
      // A strided destination too: every other column of a wider buffer.
      Shape wide = src.shape();
      wide.back() *= 2;
      Tensor buf = Tensor::zeros(wide, src.dtype());
      Tensor sdst = buf.slice(src.dim() - 1, 0, wide.back(), 2);
      sdst.copy_(src);
      const int64_t n = src.numel(), es = static_cast<int64_t>(dtype_size(src.dtype()));
      std::vector<int64_t> idx(static_cast<size_t>(src.dim()), 0);
      const char* sb = static_cast<const char*>(src.storage()->data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(static_cast<const char*>(dst.data_ptr()) + i * es, sb + at(src, idx) * es, es), 0)
            << what << ", element " << i << ", " << threads << " threads";
        ASSERT_EQ(std::memcmp(static_cast<const char*>(sdst.storage()->data()) + at(sdst, idx) * es,
                              sb + at(src, idx) * es, es),
                  0)
            << what << " into a strided destination, element " << i;
        for (int64_t d = src.dim() - 1; d >= 0; --d) {
          if (++idx[static_cast<size_t>(d)] < src.shape()[static_cast<size_t>(d)]) break;
          idx[static_cast<size_t>(d)] = 0;
        }
      }
    }
    set_num_threads(2);
  };
  const Tensor a = Tensor::randn({64, 8, 48}, 7);
  check(a.narrow(2, 0, 32), "narrow of the last dim");
  check(a.narrow(2, 32, 16).narrow(0, 3, 50), "narrow of two dims");
  check(Tensor::randn({64, 1, 16}, 8).expand({64, 8, 16}), "expand (stride 0)");
  check(a.permute({1, 0, 2}), "permute of the outer dims");
  check(a.permute({2, 1, 0}), "permute with a strided innermost dim");
  check(a.slice(0, 1, 64, 3).unsqueeze(1), "slice with a size-1 dim");
  check(Tensor::randn({2048, 64}, 9).transpose(0, 1), "transpose of a long matrix");
  check(a.to(DType::bf16).narrow(2, 5, 20), "bf16 narrow");
  check(Tensor::arange(0, 4096, 1, DType::i64).view({64, 64}).transpose(0, 1), "i64 transpose");
  Tensor e = Tensor::empty({0, 4}, DType::f32);
  e.copy_(Tensor::zeros({4, 0}).transpose(0, 1));  // empty: nothing to do
}

TEST(Tensor, DtypeConversionRoundTrip) {
  Tensor x = Tensor::randn({257}, 3);
  Tensor b = x.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  auto xv = x.to_vector<float>(), bv = b.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_EQ(bv[i], bf16_to_f32(f32_to_bf16(xv[i])));
  }
  Tensor i = Tensor::from_vector<float>({1.9f, -2.5f}, {2}).to(DType::i32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -2}));
}

TEST(Tensor, Printing) {
  Tensor t = Tensor::from_vector<float>({1, 2.5, 3, 4}, {2, 2});
  std::string s = t.str();
  EXPECT_NE(s.find("[[1, 2.5],"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 2], dtype=f32"), std::string::npos) << s;
  Tensor big = Tensor::zeros({100});
  EXPECT_NE(big.str().find("..."), std::string::npos);
}

TEST(Tensor, ViewBackwardAndLeafAccumulation) {
  Tensor w = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  w.requires_grad_();
  // y = w.T.slice(0, 1, 3).reshape(-1): gradient of sum(y * g) w.r.t. w scatters g back.
  Tensor y = w.transpose(0, 1).slice(0, 1, 3).reshape({-1});
  EXPECT_NE(y.grad_fn(), nullptr);
  Tensor g = Tensor::from_vector<float>({10, 20, 30, 40}, {4});
  y.backward(g);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 10, 30, 0, 20, 40}));
  // A second backward through a new graph accumulates.
  w.expand({2, 2, 3}).reshape({12}).backward(Tensor::ones({12}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 12, 32, 2, 22, 42}));
  EXPECT_TITAN_ERROR(Tensor::zeros({1}).backward(), "does not require grad");
  EXPECT_TITAN_ERROR(Tensor::zeros({2}, DType::i64).requires_grad_(), "only floating");
  {
    autograd::NoGradGuard ng;
    EXPECT_FALSE(w.reshape({6}).requires_grad());
  }
}

TEST(ThreadPool, StaticPartitionCoversRange) {
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    std::vector<int> hit(1001, 0);
    parallel_for(1001, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hit[i]++;
    });
    for (int h : hit) EXPECT_EQ(h, 1);
    EXPECT_THROW(parallel_for(4, [](int64_t, int64_t) { fail("boom"); }), Error);
  }
  set_num_threads(2);
}
