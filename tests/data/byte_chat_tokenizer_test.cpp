// The byte_chat tokenizer: bytes + the ChatML specials of the Qwen3 chat template.
// Expected renderings were produced by Qwen3's own Jinja chat_template
// (tokenizer_config.json, rendered with jinja2 3.1) for the same messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "titan/core/error.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/tokenizer.h"

using namespace titan;
using namespace titan::data;

namespace {

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}
void append(std::vector<int32_t>& a, const std::vector<int32_t>& b) { a.insert(a.end(), b.begin(), b.end()); }

std::vector<ChatMessage> two_turns() {
  return {{"user", "Sort: Bo, Al", std::nullopt}, {"assistant", "Al\nBo", std::nullopt}, {"user", "More: Cy", std::nullopt}};
}

TEST(ByteChatTokenizer, VocabularyAndSpecials) {
  auto tok = load_tokenizer("byte_chat");
  EXPECT_EQ(tok->kind(), "byte_chat");
  EXPECT_EQ(tok->vocab_size(), 263);
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->pad_id(), 258);
  EXPECT_EQ(tok->eos_id(), 260);  // <|im_end|> ends an assistant turn
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 259);
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 260);
  EXPECT_EQ(tok->token_to_id("<think>"), 261);
  EXPECT_EQ(tok->token_to_id("</think>"), 262);
  EXPECT_TRUE(tok->is_special(259));
  EXPECT_TRUE(tok->is_special(260));
  EXPECT_FALSE(tok->is_special(261));  // Qwen3: <think> is an added, non-special token
  EXPECT_EQ(tok->id_to_token(262), "</think>");
  EXPECT_THROW(tok->decode(std::vector<int32_t>{263}), Error);
  // The plain byte tokenizer is unchanged.
  auto byte = load_tokenizer("byte");
  EXPECT_EQ(byte->kind(), "byte");
  EXPECT_EQ(byte->vocab_size(), 259);
  EXPECT_EQ(byte->eos_id(), 257);
  EXPECT_EQ(byte->token_to_id("<|im_start|>"), -1);
  EXPECT_EQ(byte->encode("<|im_end|>").size(), 10u);
}

TEST(ByteChatTokenizer, RoundTrip) {
  auto tok = load_tokenizer("byte_chat");
  const std::string text = "h\xC3\xA9llo <|im_start|>user\n<think>x</think><|im_end|>\xF0\x9F\x98\x80";
  const std::vector<int32_t> ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  std::vector<int32_t> want = bytes_of("h\xC3\xA9llo ");
  want.push_back(259);
  append(want, bytes_of("user\n"));
  want.push_back(261);
  want.push_back('x');
  want.push_back(262);
  want.push_back(260);
  append(want, bytes_of("\xF0\x9F\x98\x80"));
  EXPECT_EQ(ids, want);
  // parse_special = false: specials stay bytes, the non-special <think> still matches.
  const std::vector<int32_t> raw = tok->encode("<|im_end|><think>", false);
  std::vector<int32_t> want_raw = bytes_of("<|im_end|>");
  want_raw.push_back(261);
  EXPECT_EQ(raw, want_raw);
  for (int32_t id = 0; id < tok->vocab_size(); ++id) EXPECT_EQ(tok->token_to_id(tok->id_to_token(id)), id);
}

TEST(ByteChatTokenizer, ChatTemplateTwoTurns) {
  auto tok = load_tokenizer("byte_chat");
  const auto msgs = two_turns();
  const std::string expected =
      "<|im_start|>user\nSort: Bo, Al<|im_end|>\n<|im_start|>assistant\nAl\nBo<|im_end|>\n"
      "<|im_start|>user\nMore: Cy<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(tok->apply_chat_template(msgs, {.add_generation_prompt = true}), expected);
  EXPECT_EQ(tok->apply_chat_template(msgs, {.add_generation_prompt = true, .enable_thinking = false}),
            expected + "<think>\n\n</think>\n\n");
  // A finished conversation: the last assistant turn gets the (empty) think block.
  const std::vector<ChatMessage> one(msgs.begin(), msgs.begin() + 2);
  EXPECT_EQ(tok->apply_chat_template(one),
            "<|im_start|>user\nSort: Bo, Al<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nAl\nBo<|im_end|>\n");
  // Ids: one per byte, one per special.
  std::vector<int32_t> want;
  auto turn = [&](std::string_view role, std::string_view content) {
    want.push_back(259);
    append(want, bytes_of(role));
    want.push_back('\n');
    append(want, bytes_of(content));
    want.push_back(260);
    want.push_back('\n');
  };
  turn("user", "Sort: Bo, Al");
  turn("assistant", "Al\nBo");
  turn("user", "More: Cy");
  want.push_back(259);
  append(want, bytes_of("assistant\n"));
  want.push_back(261);
  append(want, bytes_of("\n\n"));
  want.push_back(262);
  append(want, bytes_of("\n\n"));
  EXPECT_EQ(tok->encode(tok->apply_chat_template(msgs, {.add_generation_prompt = true, .enable_thinking = false})),
            want);
  // The plain byte tokenizer has no chat template.
  EXPECT_THROW(load_tokenizer("byte")->apply_chat_template(msgs), Error);
}

TEST(ByteChatTokenizer, LoadedFromAModelDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("byte_chat_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / kBuiltinTokenizerFile) << "byte_chat\n";
  EXPECT_EQ(load_tokenizer(dir.string())->kind(), "byte_chat");
  std::ofstream(dir / kBuiltinTokenizerFile) << "gpt2\n";
  EXPECT_THROW(load_tokenizer(dir.string()), Error);
  fs::remove_all(dir);
}

}  // namespace
