// SentencePiece models (.model files: llama2.c's tok512.model, Llama 2, ...)
// through Debian's libsentencepiece, so ids match the Python `sentencepiece`
// package built from the same library.
//
// Differences from the common contract (tokenizer.h): SentencePiece never turns
// control symbols written in the text ("<s>", "</s>") into their ids; only
// user-defined symbols are matched (by the library), so parse_special has no
// effect. added_tokens() is empty; is_special() reports control symbols and <unk>.
#pragma once
#include <memory>

#include "titan/data/tokenizer.h"

namespace titan::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws titan::Error naming path if it is missing or not a SentencePiece model.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::string_view kind() const override { return "sentencepiece"; }
  void encode_append(std::string_view text, bool parse_special,
                     std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override;
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  // Control symbols (<s>, </s>, ...) and <unk>.
  bool is_special(int32_t id) const override;

 private:
  SentencePieceTokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace titan::data
