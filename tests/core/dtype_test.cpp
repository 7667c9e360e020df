// dtype conversions: bf16/f16 against PyTorch's RNE casts, fp8 against the OCP spec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>

#include "titan/core/dtype.h"
#include "titan/core/error.h"

using namespace titan;

namespace {
std::vector<float> probe_values() {
  std::vector<float> v = {0.f, -0.f, 1.f, -1.f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.f, 65520.f,
                          1e-8f, 6e-8f, 3e-5f, 448.f, 464.f, 465.f, 480.f, 57344.f, 1e30f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(), 1.17549435e-38f};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    uint32_t u = rng();
    float f = bits_f32(u);
    if (std::isnan(f)) continue;
    v.push_back(f);
    v.push_back(std::ldexp(static_cast<float>(rng() % 100000) / 1000.f, static_cast<int>(rng() % 40) - 30));
  }
  return v;
}
}  // namespace

TEST(DType, Bf16AndF16MatchPyTorch) {
  auto vals = probe_values();
  char dir[] = "/tmp/titan_dtype_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string in = std::string(dir) + "/in.f32", out = std::string(dir) + "/out.u16";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(vals.data()), vals.size() * 4);
  }
  std::string cmd = "OMP_NUM_THREADS=1 /usr/bin/python3 -c \"import torch,numpy as np,sys;"
                    "x=torch.from_numpy(np.fromfile('" + in + "',dtype=np.float32));"
                    "b=x.to(torch.bfloat16).view(torch.int16).numpy();"
                    "h=x.to(torch.float16).view(torch.int16).numpy();"
                    "np.concatenate([b,h]).tofile('" + out + "')\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<uint16_t> ref(vals.size() * 2);
  std::ifstream f(out, std::ios::binary);
  f.read(reinterpret_cast<char*>(ref.data()), ref.size() * 2);
  ASSERT_TRUE(f.good());
  int bad_b = 0, bad_h = 0;
  for (size_t i = 0; i < vals.size(); ++i) {
    if (f32_to_bf16(vals[i]) != ref[i] && bad_b++ < 5)
      ADD_FAILURE() << "bf16(" << vals[i] << ") = " << f32_to_bf16(vals[i]) << " torch " << ref[i];
    if (f32_to_f16(vals[i]) != ref[vals.size() + i] && bad_h++ < 5)
      ADD_FAILURE() << "f16(" << vals[i] << ") = " << f32_to_f16(vals[i]) << " torch " << ref[vals.size() + i];
  }
  EXPECT_EQ(bad_b, 0);
  EXPECT_EQ(bad_h, 0);
  std::system(("rm -rf " + std::string(dir)).c_str());
}

TEST(DType, F16DecodeIsExactInverse) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(DType, Fp8E4M3Spec) {
  // Every code round-trips; known values from the OCP OFP8 spec table.
  for (int c = 0; c < 256; ++c) {
    float f = f8e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      EXPECT_EQ(c & 0x7f, 0x7f);
      continue;
    }
    if (f == 0.f) continue;
    EXPECT_EQ(f32_to_f8e4m3(f), c);
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.f);             // max normal S.1111.110
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.f, -9));  // min subnormal 2^-9
  EXPECT_EQ(f8e4m3_to_f32(0x08), std::ldexp(1.f, -6));  // min normal 2^-6
  EXPECT_EQ(f32_to_f8e4m3(464.f), 0x7e);             // tie -> even (448)
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(470.f))));  // overflow -> NaN (no inf)
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);           // 1 + 1/16 is a tie between 1 and 1.125 -> 1.0
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3a);           // tie between 1.125 and 1.25 -> 1.25 (even)
}

TEST(DType, Fp8E5M2Spec) {
  for (int c = 0; c < 256; ++c) {
    float f = f8e5m2_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(f) || f == 0.f) continue;
    EXPECT_EQ(f32_to_f8e5m2(f), c);
  }
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.f);                // max normal
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(0x7c)));           // inf
  EXPECT_EQ(f8e5m2_to_f32(0x01), std::ldexp(1.f, -16));  // min subnormal
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(f32_to_f8e5m2(70000.f))));
  EXPECT_EQ(f32_to_f8e5m2(1.125f), 0x3c);  // tie between 1.0 and 1.25 -> 1.0 (even)
}

TEST(DType, Names) {
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_EQ(dtype_from_name("float32"), DType::f32);
  try {
    dtype_from_name("f33");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'f33'"), std::string::npos);
  }
}
