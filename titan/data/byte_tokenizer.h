// The byte tokenizer: ids 0..255 are the bytes of the UTF-8 text, and three
// special tokens follow: <|bos|> = 256, <|eos|> = 257, <|pad|> = 258 (vocab_size
// 259). Used for character-level models (tiny Shakespeare), where it needs no
// training and no file.
#pragma once
#include "titan/data/added_tokens.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocabSize = 259;

  ByteTokenizer();

  std::string_view kind() const override { return "byte"; }
  // One id per byte; "<|bos|>", "<|eos|>", "<|pad|>" in the text become their ids
  // (unless parse_special is false). Throws titan::Error on invalid UTF-8.
  void encode_append(std::string_view text, bool parse_special,
                     std::vector<int32_t>& out) const override;
  // Bytes back to text; special ids become their names. Invalid UTF-8 -> U+FFFD.
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return kVocabSize; }
  // Spelling: the byte itself for ASCII (0x00..0x7F), "<0xAB>" for 0x80..0xFF
  // (token_to_id accepts "<0xAB>" for every byte), and the special names.
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;

 private:
  AddedTokenMatcher matcher_;
};

}  // namespace titan::data
