// Byte-level BPE from a Hugging Face tokenizer.json (Qwen3, Llama3, GPT-2 style).
//
// Pipeline of encode (the order of HF tokenizers' TokenizerImpl::encode):
//   1. added tokens are matched whole in the raw text (AddedTokenMatcher);
//   2. each remaining text segment is normalised (normalizer: null or NFC, utf8proc);
//   3. pre-tokenized: every Split regex of the pre_tokenizer runs as written in the
//      file with PCRE2 (PCRE2_UTF | PCRE2_UCP, JIT), behaviour "Isolated" (matches
//      and the gaps between them become pieces); ByteLevel with use_regex runs the
//      GPT-2 regex; add_prefix_space prepends a space to each segment;
//   4. each piece's bytes go through the BPE merges (bpe_merge.h); with
//      ignore_merges a piece that is itself in the vocabulary is taken as is.
//      Results of pieces up to 256 bytes are cached (piece bytes -> ids).
// The byte-level alphabet (GPT-2 bytes_to_unicode) is undone at load time: the
// vocabulary and merges are held as raw bytes, so no per-character mapping runs
// while encoding.
//
// Supported tokenizer.json fields (anything else is a titan::Error naming it):
// model.type "BPE" with vocab, merges ([a, b] pairs or "a b" strings),
// ignore_merges, unk_token; normalizer null | NFC | Sequence of those;
// pre_tokenizer Split (Regex or String pattern, Isolated) | ByteLevel | Sequence;
// added_tokens. The decoder is byte-level.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/added_tokens.h"
#include "titan/data/bpe_merge.h"
#include "titan/data/flat_index.h"
#include "titan/data/tokenizer.h"
#include "titan/data/tokenizer_json.h"

namespace titan::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // Loads path (a tokenizer.json). config_path: a tokenizer_config.json for
  // bos/eos/pad ("" = none; then bos comes from a TemplateProcessing
  // post-processor and eos/pad from common token names). Throws titan::Error
  // naming the file and field on malformed input.
  static std::unique_ptr<BpeTokenizer> load(const std::string& path,
                                            const std::string& config_path = "");
  ~BpeTokenizer() override;

  std::string_view kind() const override { return "bpe"; }
  void encode_append(std::string_view text, bool parse_special,
                     std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_bytes_.size()); }
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;

  // Number of merges loaded.
  size_t num_merges() const { return merges_.size(); }

 private:
  struct Regex;  // a compiled PCRE2 pattern
  // Pre-token cache: piece bytes -> ids, in arenas indexed by a FlatIndex.
  struct Cache {
    struct Entry {
      uint32_t key_off, key_len, ids_off, ids_len;
    };
    FlatIndex index;
    std::string keys;
    std::vector<int32_t> ids;
    std::vector<Entry> entries;
  };

  BpeTokenizer() = default;
  void parse(const TokenizerJson& tj, const std::string& path);
  void parse_model(const nlohmann::json& model, const TokenizerJson& tj, const std::string& path);
  void parse_normalizer(const nlohmann::json& n, const std::string& path);
  void parse_pre_tokenizer(const nlohmann::json& p, const std::string& path, const std::string& field);
  void parse_specials(const std::string& path, const std::string& config_path,
                      const nlohmann::json& j);

  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void split_pieces(size_t step, std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // Id of the vocabulary token with these raw bytes, or -1.
  int32_t find_bytes(std::string_view bytes) const {
    return vocab_index_.find(bytes, hash_bytes(bytes),
                             [this](int32_t id) { return std::string_view(id_bytes_[id]); });
  }

  std::string path_;
  std::vector<std::string> id_bytes_;  // raw bytes of every id ("" for holes)
  std::vector<uint8_t> id_kind_;       // 0 = hole, 1 = vocab token, 2 = added token
  FlatIndex vocab_index_;              // raw bytes -> id (vocabulary only)
  int32_t byte_id_[256];               // id of each single byte, -1 if absent
  int32_t unk_id_ = -1;
  MergeTable merges_;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  std::vector<std::unique_ptr<Regex>> splits_;  // applied in order
  AddedTokenMatcher matcher_;

  mutable std::mutex cache_mu_;
  mutable Cache cache_;
};

}  // namespace titan::data
