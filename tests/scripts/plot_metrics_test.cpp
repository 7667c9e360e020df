// scripts/plot_metrics.py (Debian python3-matplotlib under /usr/bin/python3): a small
// metrics.jsonl gives a PNG of the documented size that libpng (through matplotlib's
// reader) decodes and that has curves drawn on it; bad input is one "error:" line
// naming the file and line, exit status 2, and no PNG.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace {

bool have_matplotlib() {
  return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}

struct CmdResult {
  int status = -1;
  std::string out;  // stdout + stderr
};

CmdResult run(const std::string& cmd) {
  CmdResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string script() { return "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) + "/scripts/plot_metrics.py"; }

class PlotMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib not installed (make deps)";
    std::string tmpl = (fs::temp_directory_path() / "titan_plot_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

// An RL-shaped metrics.jsonl: step 0 validation row, then steps 1..6 with the per-step
// keys, val_reward every 3 steps.
std::string rl_metrics() {
  std::string s = "{\"step\": 0, \"val_reward\": 0.40, \"val_ms\": 12.5}\n";
  for (int i = 1; i <= 6; ++i) {
    s += "{\"step\": " + std::to_string(i) + ", \"reward_mean\": " + std::to_string(0.3 + 0.05 * i) +
         ", \"logprob_diff_max\": 0.0, \"loss\": " + std::to_string(0.1 / i) +
         ", \"gen_tokens_per_s\": " + std::to_string(900 + 10 * i) +
         (i % 3 == 0 ? ", \"val_reward\": " + std::to_string(0.4 + 0.06 * i) : std::string()) + "}\n";
  }
  return s;
}

// Width and height from the PNG's IHDR chunk (bytes 16..23, big-endian), after
// checking the 8-byte PNG signature; {-1, -1} when the file is not a PNG.
std::pair<int, int> png_size(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  unsigned char h[24] = {};
  f.read(reinterpret_cast<char*>(h), 24);
  const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (f.gcount() != 24 || std::memcmp(h, sig, 8) != 0 || std::memcmp(h + 12, "IHDR", 4) != 0) return {-1, -1};
  auto be = [&](int o) { return (h[o] << 24) | (h[o + 1] << 16) | (h[o + 2] << 8) | h[o + 3]; };
  return {be(16), be(20)};
}

TEST_F(PlotMetrics, WritesPngOfTheDocumentedSize) {
  const std::string m = write("metrics.jsonl", rl_metrics());
  const fs::path png = dir_ / "reward.png";
  CmdResult r = run(script() + " '" + m + "' --out '" + png.string() + "' --keys val_reward,reward_mean");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(png.string()), std::string::npos) << r.out;  // prints the path it wrote
  // Two keys: one row of two panels of 5 x 3 inches at 90 dpi.
  EXPECT_EQ(png_size(png), std::make_pair(900, 270));
  // Decodes, and holds drawn (non-white, non-grey) pixels: the curves.
  CmdResult d = run("/usr/bin/python3 -c \"import matplotlib.image as im, numpy as np; a = im.imread('" + png.string() +
              "'); rgb = a[..., :3]; print(int((rgb.max(-1) - rgb.min(-1) > 0.3).sum()))\"");
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_GT(std::stol(d.out), 200) << d.out;
}

TEST_F(PlotMetrics, DefaultKeysAreThosePresent) {
  const std::string a = write("a.jsonl", rl_metrics());
  const fs::path png = dir_ / "all.png";
  CmdResult r = run(script() + " '" + a + "' '" + a + "' --out '" + png.string() + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  // loss, reward_mean, val_reward, logprob_diff_max, gen_tokens_per_s: 3 rows of 2 panels.
  EXPECT_EQ(png_size(png), std::make_pair(900, 810));
}

TEST_F(PlotMetrics, BadInputIsOneErrorLineAndExit2) {
  const fs::path png = dir_ / "x.png";
  const std::string out = " --out '" + png.string() + "'";
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"{\"step\": 1, \"loss\": 2.0}\nnot json\n", "bad.jsonl:2: not JSON"},
      {"[1, 2]\n", "bad.jsonl:1: a metrics row must be a JSON object"},
      {"{\"loss\": 2.0}\n", "bad.jsonl:1: row has no integer \"step\""},
      {"{\"step\": 1, \"loss\": \"high\"}\n", "bad.jsonl:1: \"loss\" is \"high\", not a finite number"},
      {"\n", "bad.jsonl: no metrics rows"},
  };
  for (const Case& c : cases) {
    const std::string m = write("bad.jsonl", c.text);
    CmdResult r = run(script() + " '" + m + "'" + out);
    EXPECT_EQ(r.status, 2) << c.text << r.out;
    EXPECT_NE(r.out.find("error: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << "want '" << c.expect << "' in: " << r.out;
    EXPECT_FALSE(fs::exists(png)) << c.text;
  }
  const std::string good = write("good.jsonl", rl_metrics());
  CmdResult r = run(script() + " '" + good + "'" + out + " --keys reward_mean,no_such_key");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("no row has key \"no_such_key\""), std::string::npos) << r.out;
  r = run(script() + " '" + (dir_ / "missing.jsonl").string() + "'" + out);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("missing.jsonl: cannot read"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(png));
  // No temporary file left behind by the failed runs.
  int left = 0;
  for (const auto& e : fs::directory_iterator(dir_)) left += e.path().extension() == ".png";
  EXPECT_EQ(left, 0);
}

}  // namespace
