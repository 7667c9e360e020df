// Byte-level BPE (Qwen3 tokenizer.json) against reference ids:
//  - data/qwen3-tokenizer/examples.jsonl;
//  - tests/data/qwen3_reference.jsonl: 509 texts (Shakespeare, GSM8K, MBPP,
//    HumanEval, tricky Unicode, random strings) encoded by the reference tool
//    shared/tools/qwen3_tokenize.mjs (made by make_qwen3_reference.mjs; Hugging
//    Face tokenizers 0.23.2 (Rust) gives the same ids for all of them);
//  - tests/data/qwen3_decode_reference.jsonl: id lists (incl. invalid UTF-8) and
//    the reference tool's decoded text.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tests/data/tokenizer_test_util.h"
#include "titan/core/error.h"
#include "titan/data/bpe_tokenizer.h"
#include "titan/data/utf8.h"

namespace titan::data {
namespace {

using testing::qwen3_dir;
using testing::read_jsonl;
using testing::test_data;

const Tokenizer& qwen3() {
  static const std::unique_ptr<Tokenizer> tok = load_tokenizer(qwen3_dir());
  return *tok;
}

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

TEST(Qwen3Bpe, ExamplesMatchReference) {
  const auto rows = read_jsonl(qwen3_dir() + "/examples.jsonl");
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& r : rows) {
    const std::string text = r["text"];
    EXPECT_EQ(qwen3().encode(text), ids_of(r["ids"])) << text;
    EXPECT_EQ(qwen3().decode(ids_of(r["ids"])), text);
  }
}

TEST(Qwen3Bpe, GeneratedReferenceMatches) {
  const auto rows = read_jsonl(test_data("qwen3_reference.jsonl"));
  ASSERT_GE(rows.size(), 500u);
  size_t mismatches = 0, tokens = 0;
  for (const auto& r : rows) {
    const std::string text = r["text"];
    const std::vector<int32_t> want = ids_of(r["ids"]);
    tokens += want.size();
    const std::vector<int32_t> got = qwen3().encode(text);
    if (got != want && ++mismatches <= 3) ADD_FAILURE() << "ids differ for text " << nlohmann::json(text).dump();
    // Decoding gives back the NFC form of the text.
    EXPECT_EQ(qwen3().decode(want), nfc(text)) << nlohmann::json(text).dump();
  }
  EXPECT_EQ(mismatches, 0u) << "of " << rows.size() << " texts";
  EXPECT_GT(tokens, 40000u);
}

TEST(Qwen3Bpe, DecodeMatchesReferenceIncludingInvalidUtf8) {
  const auto rows = read_jsonl(test_data("qwen3_decode_reference.jsonl"));
  ASSERT_GE(rows.size(), 50u);
  for (const auto& r : rows) {
    const std::string text = r["text"];
    EXPECT_EQ(qwen3().decode(ids_of(r["ids"])), text) << r["ids"].dump();
  }
  // A partial 4-byte sequence (the first 2 bytes of U+1F999) is one U+FFFD.
  EXPECT_EQ(qwen3().decode(std::vector<int32_t>{11162}), " \xEF\xBF\xBD");
  EXPECT_EQ(qwen3().decode(std::vector<int32_t>{11162, 99, 247}), " \xF0\x9F\xA6\x99");
}

// JavaScript's \s includes U+FEFF and Unicode White_Space does not, so the JS
// reference pre-tokenizes " \uFEFFthe" as " " + "\uFEFFthe" where Hugging Face
// (Oniguruma) and PCRE2 give " \uFEFF" + "the". Ids from HF tokenizers 0.23.2 (Rust).
TEST(Qwen3Bpe, ByteOrderMarkFollowsHuggingFace) {
  EXPECT_EQ(qwen3().encode("a\xEF\xBB\xBF" "b \xEF\xBB\xBFthe"), (std::vector<int32_t>{64, 3225, 65, 75780, 1782}));
}

std::string random_utf8(std::mt19937& rng, int max_len) {
  static const std::pair<char32_t, char32_t> ranges[] = {
      {0x20, 0x7E}, {0x20, 0x7E}, {0x09, 0x0D}, {0x30, 0x39}, {0xA0, 0x24F}, {0x300, 0x36F},
      {0x370, 0x3FF}, {0x400, 0x4FF}, {0x590, 0x6FF}, {0x900, 0x97F}, {0xE00, 0xE7F},
      {0x1100, 0x11FF}, {0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},
      {0xE000, 0xF8FF}, {0xFF00, 0xFFEF}, {0x10000, 0x1FFFF}, {0x1F300, 0x1FAFF}, {0x20000, 0x2FFFF},
      {0xE0000, 0x10FFFF}};
  std::uniform_int_distribution<int> len_d(0, max_len), range_d(0, std::size(ranges) - 1);
  std::string s;
  const int n = len_d(rng);
  for (int i = 0; i < n; ++i) {
    const auto [lo, hi] = ranges[range_d(rng)];
    char32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    utf8_append(s, cp);
    if (rng() % 23 == 0) s += "<|im_start|>";
  }
  return s;
}

TEST(Qwen3Bpe, RoundTripRandomUtf8) {
  std::mt19937 rng(1234);
  for (int k = 0; k < 400; ++k) {
    const std::string raw = random_utf8(rng, 80);
    const std::string text = nfc(raw);
    ASSERT_EQ(qwen3().decode(qwen3().encode(text)), text) << nlohmann::json(text).dump();
    // Input that is not NFC comes back in NFC; special-token text stays text.
    ASSERT_EQ(qwen3().decode(qwen3().encode(raw, /*parse_special=*/false)), text);
  }
}

// encode is const and shares the pre-token cache: threads get the serial ids.
TEST(Qwen3Bpe, ConcurrentEncodeMatchesSerial) {
  const auto rows = read_jsonl(test_data("qwen3_reference.jsonl"));
  std::vector<std::vector<int32_t>> got(rows.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < rows.size(); i += 4) got[i] = qwen3().encode(rows[i]["text"].get<std::string>());
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(got[i], ids_of(rows[i]["ids"])) << i;
}

TEST(Qwen3Bpe, VocabularyAndSpecialTokens) {
  const Tokenizer& t = qwen3();
  EXPECT_EQ(t.kind(), "bpe");
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.bos_id(), -1);  // tokenizer_config.json: bos_token null
  EXPECT_EQ(t.eos_id(), 151645);
  EXPECT_EQ(t.pad_id(), 151643);
  EXPECT_EQ(t.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(t.token_to_id("\xC4\xA0world"), 1879);  // "Ġworld"
  EXPECT_EQ(t.token_to_id("no-such-token-xyz"), -1);
  EXPECT_EQ(t.id_to_token(1879), "\xC4\xA0world");
  EXPECT_EQ(t.id_to_token(151667), "<think>");
  EXPECT_TRUE(t.is_special(151644));
  EXPECT_FALSE(t.is_special(151667));  // <think> is an added, non-special token
  EXPECT_FALSE(t.is_special(1879));
  ASSERT_EQ(t.added_tokens().size(), 26u);
  EXPECT_EQ(t.added_tokens().front().content, "<|endoftext|>");

  // parse_special=false: special-token text is tokenized as text, non-special
  // added tokens are still matched (HF split_special_tokens=True).
  const auto as_text = t.encode("<|im_start|>", false);
  EXPECT_GT(as_text.size(), 1u);
  EXPECT_EQ(t.decode(as_text), "<|im_start|>");
  EXPECT_EQ(t.encode("<think>", false), std::vector<int32_t>{151667});
  EXPECT_EQ(t.encode("<|im_start|>"), std::vector<int32_t>{151644});
  EXPECT_TRUE(t.encode("").empty());
}

TEST(Qwen3Bpe, BadInputNamesTheProblem) {
  const Tokenizer& t = qwen3();
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no titan::Error, expected one containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { t.decode(std::vector<int32_t>{9707, 151669}); }, "unknown token id 151669 at position 1");
  expect_error([&] { t.decode(std::vector<int32_t>{-1}); }, "unknown token id -1");
  expect_error([&] { t.id_to_token(200000); }, "unknown token id 200000");
  expect_error([&] { t.encode("ok \xC3\x28"); }, "not valid UTF-8 at byte 3");
  expect_error([&] { load_tokenizer("/nonexistent/tokenizer.json"); }, "/nonexistent/tokenizer.json");
  expect_error([&] { load_tokenizer("/nonexistent/dir/"); }, "no such file '/nonexistent/dir/'");
}

}  // namespace
}  // namespace titan::data
