#include "titan/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::data {

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceTokenizer::SentencePieceTokenizer() : impl_(std::make_unique<Impl>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  TITAN_CHECK(std::filesystem::is_regular_file(path), "tokenizer: no such file '{}'", path);
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->path_ = path;
  auto& sp = t->impl_->sp;
  const auto status = sp.Load(path);
  TITAN_CHECK(status.ok(), "{}: not a SentencePiece model: {}", path, status.ToString());
  t->bos_id_ = sp.bos_id();
  t->eos_id_ = sp.eos_id();
  t->pad_id_ = sp.pad_id();
  return t;
}

void SentencePieceTokenizer::encode_append(std::string_view text, bool /*parse_special*/,
                                           std::vector<int32_t>& out) const {
  const size_t bad = utf8_find_invalid(text);
  TITAN_CHECK(bad == std::string_view::npos, "encode: text is not valid UTF-8 at byte {}", bad);
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  TITAN_CHECK(status.ok(), "encode: sentencepiece failed ({}): {}", path_, status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const int32_t n = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    TITAN_CHECK(ids[i] >= 0 && ids[i] < n, "decode: unknown token id {} at position {} ({} has {} ids)",
                ids[i], i, path_, n);
  std::string text;
  const auto status = impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  TITAN_CHECK(status.ok(), "decode: sentencepiece failed ({}): {}", path_, status.ToString());
  return utf8_replace_invalid(text);
}

int32_t SentencePieceTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }

int32_t SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = impl_->sp.PieceToId(token);
  return impl_->sp.IdToPiece(id) == token ? id : -1;
}

std::string SentencePieceTokenizer::id_to_token(int32_t id) const {
  TITAN_CHECK(id >= 0 && id < vocab_size(), "id_to_token: unknown token id {} ({} has {} ids)", id, path_,
              vocab_size());
  return impl_->sp.IdToPiece(id);
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (impl_->sp.IsControl(id) || impl_->sp.IsUnknown(id));
}

}  // namespace titan::data
