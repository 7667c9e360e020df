// Row kernels against PyTorch (tests/reference/rows_ref.py through /usr/bin/python3):
// fused cross-entropy forward/backward with ignore_index and z-loss, RMSNorm forward/
// backward, and RoPE (rotate_half) bit for bit against HF's float32 formula.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "rows_test_util.h"
#include "titan/kernels/cpu/loss.h"
#include "titan/kernels/cpu/norm.h"
#include "titan/kernels/cpu/rope.h"

namespace titan::kernels::cpu {
namespace {
using test::randn;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "titan_rows_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  template <class T>
  void write(const std::string& name, const std::vector<T>& v) const {
    std::ofstream f(file(name), std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  }
  template <class T>
  std::vector<T> read(const std::string& name, size_t n) const {
    std::vector<T> v(n);
    std::ifstream f(file(name), std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
    EXPECT_TRUE(f.good() && f.peek() == EOF) << "bad size or missing: " << file(name);
    return v;
  }

 private:
  std::string path_;
};

TEST(RowsVsTorch, CrossEntropyRmsNormAndRope) {
  const int64_t T = 37, D = 24, V = kVocabChunk + 301, ignore = -100;
  const float zc = 1e-3f, it = 1.0f / 0.9f, eps = 1e-6f;
  const int64_t Tr = 9, Dr = 257;
  const int64_t Tq = 6, H = 3, Dh = 20, R = 16, P = 100;
  TempDir dir;
  {
    std::ofstream f(dir.file("dims.txt"));
    f << T << " " << D << " " << V << " " << ignore << " " << zc << " " << it << " " << eps << " "
      << Tr << " " << Dr << " " << Tq << " " << H << " " << Dh << " " << R << " " << P << "\n";
  }
  // inputs
  const auto h = randn(T * D, 1), w = randn(V * D, 2, 0.4f), dl = randn(T, 3);
  std::vector<int64_t> y(T);
  for (int64_t t = 0; t < T; ++t) y[t] = t % 5 == 3 ? ignore : (t * 7919) % V;
  const auto x = randn(Tr * Dr, 4, 2.0f), rw = randn(Dr, 5), dout = randn(Tr * Dr, 6);
  const auto q = randn(Tq * H * Dh, 7);
  std::vector<float> cs(P * R / 2), sn(P * R / 2);
  rope_cache(cs.data(), sn.data(), P, R, 10000.0);
  const std::vector<int64_t> pos = {0, 1, 99, 42, 42, 7};
  dir.write("hidden.f32", h);
  dir.write("weight.f32", w);
  dir.write("targets.i64", y);
  dir.write("dloss.f32", dl);
  dir.write("x.f32", x);
  dir.write("w.f32", rw);
  dir.write("dout.f32", dout);
  dir.write("q.f32", q);
  dir.write("cos.f32", cs);
  dir.write("sin.f32", sn);
  dir.write("pos.i64", pos);
  const std::string cmd = "OMP_NUM_THREADS=1 /usr/bin/python3 " TITAN_SOURCE_DIR
                          "/tests/reference/rows_ref.py '" + dir.path() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  // cross-entropy
  std::vector<float> loss(T), lse(T), dh(T * D), dw(V * D);
  cross_entropy_fwd(loss.data(), lse.data(), h.data(), w.data(), y.data(), T, D, V, ignore, zc, it);
  cross_entropy_bwd(dh.data(), dw.data(), dl.data(), h.data(), w.data(), y.data(), lse.data(), T, D,
                    V, ignore, zc, it, false);
  test::expect_close(loss, dir.read<double>("ce_loss.f64", T), 1e-5, 1e-5, "torch ce loss");
  test::expect_close(lse, dir.read<double>("ce_lse.f64", T), 1e-5, 1e-5, "torch ce lse");
  test::expect_close(dh, dir.read<double>("ce_dhidden.f64", T * D), 1e-4, 1e-6, "torch ce dhidden");
  test::expect_close(dw, dir.read<double>("ce_dweight.f64", V * D), 1e-4, 1e-6, "torch ce dweight");

  // RMSNorm
  std::vector<float> yr(Tr * Dr), rstd(Tr), dx(Tr * Dr), dwr(Dr);
  rms_norm_fwd(yr.data(), rstd.data(), x.data(), rw.data(), Tr, Dr, eps);
  rms_norm_bwd(dx.data(), dwr.data(), dout.data(), x.data(), rw.data(), rstd.data(), Tr, Dr, false);
  test::expect_close(yr, dir.read<double>("rms_y.f64", Tr * Dr), 2e-6, 1e-6, "torch rms y");
  test::expect_close(dx, dir.read<double>("rms_dx.f64", Tr * Dr), 1e-4, 1e-5, "torch rms dx");
  test::expect_close(dwr, dir.read<double>("rms_dw.f64", Dr), 1e-5, 1e-5, "torch rms dw");

  // RoPE: same fp32 operations as HF's q * cos + rotate_half(q) * sin -> same bits
  std::vector<float> qr(q.size());
  rope_apply(qr.data(), q.data(), pos.data(), cs.data(), sn.data(), Tq, H, Dh, R, P,
             RopeStyle::rotate_half, false);
  const auto want = dir.read<float>("rope_q.f32", q.size());
  EXPECT_TRUE(test::same_bits(qr.data(), want.data(), static_cast<int64_t>(q.size())))
      << "rope_apply differs from HF apply_rotary_pos_emb in float32";
}

}  // namespace
}  // namespace titan::kernels::cpu
