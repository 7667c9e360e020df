// `titan tokenize` run as a program (popen): encode, --decode, --raw, --lines,
// the tokenizer kinds by path, and errors (exit code 2, one "error: ..." line).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/data/tokenizer_test_util.h"
#include "tests/util/test_files.h"
#include "tests/util/titan_exe.h"

namespace titan::data {
namespace {

namespace fs = std::filesystem;

// The titan program: $TITAN_BUILD/titan (set by CTest), else next to tests/.
using titan::test::titan_exe;

using Result = test::ShellResult;

Result run(const std::string& args, const std::string& input) {
  const fs::path in = fs::path(::testing::TempDir()) / ("titan_tokenize_in_" + std::to_string(getpid()));
  std::ofstream(in, std::ios::binary) << input;
  Result r = test::run_shell("'" + titan_exe() + "' tokenize " + args + " < '" + in.string() + "' 2>&1");
  fs::remove(in);
  return r;
}

TEST(TokenizeCli, Qwen3EncodeAndDecode) {
  ASSERT_TRUE(fs::exists(titan_exe())) << titan_exe();
  const std::string dir = "'" + testing::qwen3_dir() + "'";
  const auto rows = testing::read_jsonl(testing::qwen3_dir() + "/examples.jsonl");
  // The CLI prints exactly what the reference tool prints for the same input.
  for (const auto& r : {rows[3], rows[4]}) {
    const Result e = run("--tokenizer " + dir, r["text"].get<std::string>());
    EXPECT_EQ(e.code, 0) << e.out;
    EXPECT_EQ(e.out, r["ids"].dump() + "\n");
  }
  const Result d = run("--tokenizer " + dir + "/tokenizer.json --decode", "[9707,1879,11162]");
  EXPECT_EQ(d.code, 0) << d.out;
  EXPECT_EQ(d.out, "\"Hello world \xEF\xBF\xBD\"\n");
}

TEST(TokenizeCli, ByteAndSentencePieceAndLines) {
  Result r = run("--tokenizer byte --lines", "ab\nc\n\nd");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "[97,98]\n[99]\n[]\n[100]\n");
  r = run("--tokenizer byte --decode --raw", "[104,105,10]");
  EXPECT_EQ(r.out, "hi\n");
  r = run("--tokenizer byte --decode --lines", "[104]\n[256, 105]\n");
  EXPECT_EQ(r.out, "\"h\"\n\"<|bos|>i\"\n");
  r = run("--tokenizer byte --no-special", "<|eos|>");
  EXPECT_EQ(r.out, "[60,124,101,111,115,124,62]\n");
  r = run("--tokenizer '" + testing::data_dir() + "/stories260k/tok512.model'", "Hello world");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "[346,306,414,263,304,341]\n");  // python sentencepiece
}

TEST(TokenizeCli, ErrorsExitWithCode2AndOneLine) {
  Result r = run("--tokenizer byte --decode", "[104, 300]");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "error: decode: unknown token id 300 at position 1 (byte tokenizer has 259 ids)\n");
  r = run("--tokenizer byte --decode", "[104, \"x\"]");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("error: tokenize --decode: stdin element 1"), std::string::npos) << r.out;
  r = run("--tokenizer byte --decode", "not json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("is not JSON"), std::string::npos) << r.out;
  r = run("--tokenizer /nonexistent/tok.json", "x");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "error: load_tokenizer: no such file '/nonexistent/tok.json'\n");
  r = run("--tokenizer byte", "bad \xFF");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "error: encode: text is not valid UTF-8 at byte 4\n");
}

}  // namespace
}  // namespace titan::data
