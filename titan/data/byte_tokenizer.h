// The byte tokenizer: ids 0..255 are the bytes of the UTF-8 text, and three
// special tokens follow: <|bos|> = 256, <|eos|> = 257, <|pad|> = 258 (vocab_size
// 259). Used for character-level models (tiny Shakespeare), where it needs no
// training and no file.
//
// "byte_chat" (ByteTokenizer(true)): the same ids plus what the Qwen3/ChatML chat
// template (Tokenizer::apply_chat_template) needs: <|im_start|> = 259,
// <|im_end|> = 260 (special) and <think> = 261, </think> = 262 (added, not special,
// as in Qwen3's tokenizer.json); vocab_size 263. Its eos_id() is <|im_end|>, the
// token that ends an assistant turn (Qwen3's tokenizer_config eos_token), so a chat
// generation stops there. For small chat models trained from scratch (alphabet_sort).
#pragma once
#include "titan/data/added_tokens.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocabSize = 259;
  static constexpr int32_t kImStart = 259, kImEnd = 260, kThink = 261, kThinkEnd = 262, kChatVocabSize = 263;

  // chat = false: "byte" (vocab 259, eos <|eos|>); true: "byte_chat" (vocab 263, eos <|im_end|>).
  explicit ByteTokenizer(bool chat = false);

  std::string_view kind() const override { return chat_ ? "byte_chat" : "byte"; }
  // One id per byte; the added tokens written in the text ("<|bos|>", "<|im_end|>",
  // ...) become their ids (the special ones only when parse_special is true). Throws titan::Error on invalid UTF-8.
  void encode_append(std::string_view text, bool parse_special,
                     std::vector<int32_t>& out) const override;
  // Bytes back to text; special ids become their names. Invalid UTF-8 -> U+FFFD.
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return chat_ ? kChatVocabSize : kVocabSize; }
  // Spelling: the byte itself for ASCII (0x00..0x7F), "<0xAB>" for 0x80..0xFF
  // (token_to_id accepts "<0xAB>" for every byte), and the special names.
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;

 private:
  bool chat_ = false;
  AddedTokenMatcher matcher_;
};

}  // namespace titan::data
