// The byte tokenizer, SentencePiece (tok512.model vs Python sentencepiece: see
// make_sentencepiece_reference.py) and the Qwen3 chat template (vs Jinja2
// rendering of tokenizer_config.json's chat_template: make_qwen3_chat_reference.py).
#include <gtest/gtest.h>

#include <random>

#include "tests/data/tokenizer_test_util.h"
#include "titan/core/error.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/tokenizer.h"
#include "titan/data/utf8.h"

namespace titan::data {
namespace {

using testing::read_jsonl;
using testing::data_dir;
using testing::test_data;

TEST(ByteTokenizer, BytesAndSpecials) {
  auto t = load_tokenizer("byte");
  EXPECT_EQ(t->kind(), "byte");
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->bos_id(), 256);
  EXPECT_EQ(t->eos_id(), 257);
  EXPECT_EQ(t->pad_id(), 258);
  EXPECT_EQ(t->encode("Hi\n"), (std::vector<int32_t>{'H', 'i', '\n'}));
  EXPECT_EQ(t->encode("\xC3\xA9"), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(t->encode("<|bos|>a<|eos|>"), (std::vector<int32_t>{256, 'a', 257}));
  EXPECT_EQ(t->encode("<|bos|>", false).size(), 7u);
  EXPECT_EQ(t->decode(std::vector<int32_t>{256, 'o', 'k', 257, 258}), "<|bos|>ok<|eos|><|pad|>");
  EXPECT_EQ(t->decode(std::vector<int32_t>{'a', 0xE6, 0x97}), "a\xEF\xBF\xBD");  // truncated -> U+FFFD
  EXPECT_EQ(t->token_to_id("A"), 'A');
  EXPECT_EQ(t->token_to_id("<0xE6>"), 0xE6);
  EXPECT_EQ(t->token_to_id("<|pad|>"), 258);
  EXPECT_EQ(t->token_to_id("ab"), -1);
  EXPECT_EQ(t->id_to_token(0xE6), "<0xE6>");
  EXPECT_EQ(t->id_to_token(257), "<|eos|>");
  EXPECT_TRUE(t->is_special(256));
  EXPECT_FALSE(t->is_special('a'));
  EXPECT_THROW(t->decode(std::vector<int32_t>{259}), Error);
  EXPECT_THROW(t->encode("\xFF"), Error);
}

TEST(ByteTokenizer, RoundTripShakespeare) {
  std::ifstream f(data_dir() + "/tinyshakespeare/input.txt");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.size(), 1115394u);
  auto t = load_tokenizer("byte");
  const auto ids = t->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(t->decode(ids), text);
}

TEST(SentencePiece, MatchesPythonSentencepiece) {
  auto t = load_tokenizer(data_dir() + "/stories260k/tok512.model");
  EXPECT_EQ(t->kind(), "sentencepiece");
  EXPECT_EQ(t->vocab_size(), 512);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->pad_id(), -1);
  EXPECT_TRUE(t->is_special(1));
  EXPECT_FALSE(t->is_special(400));
  const auto rows = read_jsonl(test_data("tok512_reference.jsonl"));
  ASSERT_GE(rows.size(), 10u);
  for (const auto& r : rows) {
    const std::string text = r["text"];
    const auto want = r["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(t->encode(text), want) << text;
    EXPECT_EQ(t->decode(want), r["decoded"].get<std::string>()) << text;
  }
  // stories260K.md's sample starts with these ids (after BOS=1).
  EXPECT_EQ(t->decode(std::vector<int32_t>{403, 407, 261, 378, 432, 383}), "Once upon a time, there");
  EXPECT_EQ(t->id_to_token(3 + 'a'), "<0x61>");
  EXPECT_EQ(t->token_to_id("<0x61>"), 3 + 'a');
  EXPECT_EQ(t->token_to_id("no such piece"), -1);
  EXPECT_THROW(t->decode(std::vector<int32_t>{512}), Error);
  EXPECT_THROW(t->encode("\xC3"), Error);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> m;
  for (const auto& x : j) {
    ChatMessage c{x["role"], x["content"], {}};
    if (x.contains("reasoning_content")) c.reasoning_content = x["reasoning_content"].get<std::string>();
    m.push_back(std::move(c));
  }
  return m;
}

TEST(ChatTemplate, MatchesJinjaRenderingOfQwen3Template) {
  auto t = load_tokenizer(testing::qwen3_dir());
  const auto rows = read_jsonl(test_data("qwen3_chat_reference.jsonl"));
  ASSERT_GE(rows.size(), 50u);
  for (const auto& r : rows) {
    ChatTemplateOptions o;
    o.add_generation_prompt = r["add_generation_prompt"];
    if (r.contains("enable_thinking")) o.enable_thinking = r["enable_thinking"];
    EXPECT_EQ(t->apply_chat_template(messages_of(r["messages"]), o), r["text"].get<std::string>())
        << r["messages"].dump() << " add_generation_prompt=" << o.add_generation_prompt;
  }
  // The rendered prompt tokenizes with the special tokens as single ids.
  const std::vector<ChatMessage> conv = {{"user", "What is 12345+678?", {}}};
  const std::string prompt = t->apply_chat_template(conv, {.add_generation_prompt = true});
  EXPECT_EQ(prompt, "<|im_start|>user\nWhat is 12345+678?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t->encode(prompt), (std::vector<int32_t>{151644, 872, 198, 3838, 374, 220, 16, 17, 18, 19, 20, 10,
                                                     21, 22, 23, 30, 151645, 198, 151644, 77091, 198}));
  EXPECT_THROW(t->apply_chat_template(std::vector<ChatMessage>{{"narrator", "x", {}}}), Error);
  EXPECT_THROW(load_tokenizer("byte")->apply_chat_template(conv), Error);
}

}  // namespace
}  // namespace titan::data
