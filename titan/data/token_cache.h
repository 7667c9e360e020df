// Tokenised datasets and their on-disk cache.
//
// A TokenDataset is one split of a dataset as a token stream: the documents'
// tokens back to back, document d occupying tokens [doc_offsets[d], doc_offsets[d+1]).
// Documents are joined by a separator token (default: the tokenizer's EOS) placed
// BETWEEN documents — after every document but the last — and counted as the last
// token of the document it ends (TorchTitan's document mask also assigns the EOS to
// the document before it). A one-document dataset therefore has exactly its text's
// tokens (tiny Shakespeare with the byte tokenizer: one token per character).
// Optionally each document starts with the tokenizer's BOS (Llama 3 style).
//
//   auto tok = load_tokenizer("byte");
//   TokenCacheOptions opt;
//   opt.cache_dir = "cache";
//   auto train = load_token_dataset(DatasetSpec::text_file("input.txt"), Split::train, 0.1, *tok,
//   opt); train->tokens();   // span<const int32_t>, 1,003,854 tokens for tiny Shakespeare
//
// The cache file `<cache_dir>/<name>.<key>.tokens` is built once and reused:
//   bytes 0..7   magic "TITANTOK"
//   8..11        u32 format version (kTokenCacheVersion)
//   12..15       u32 length J of the JSON header
//   16..16+J     JSON header, e.g. {"key": {...what the tokens depend on...},
//                "num_documents": D, "num_tokens": N, "vocab_size": V,
//                "split_range": [b, e], "split_unit": "chars"}
//   zero padding to a multiple of 64 bytes
//   i64 doc_offsets[D + 1], then i32 tokens[N]        (little-endian)
// "key" holds: the tokenizer identity (tokenizer_identity) and vocab size, the
// source path, its size and content hash (XXH64, = `xxhsum -H1`), the dataset format options,
// the split and its fraction, the separator id and the BOS/special-token flags.
// <key> in the file name is the FNV-1a hash of the key WITHOUT the content hash, so
// an edited source (or a corrupt / truncated / older-version file) is rebuilt in
// place, while different tokenizers or splits get their own files. The file is
// written with AtomicFileWriter (temporary + fsync + rename) and loaded with mmap
// (the tokens are then a view of the page cache).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "titan/data/dataset.h"

namespace titan {
class MappedFile;
}

namespace titan::data {

class Tokenizer;

inline constexpr uint32_t kTokenCacheVersion = 1;
inline constexpr char kTokenCacheMagic[8] = {'T', 'I', 'T', 'A', 'N', 'T', 'O', 'K'};
inline constexpr int32_t kSeparatorEos = -2;  // TokenCacheOptions::separator_id: tokenizer's EOS

struct TokenCacheOptions {
  // Directory of the cache files (created if missing). Empty: tokenise in memory,
  // write nothing.
  std::string cache_dir;
  // File-name stem; empty = the source file's stem plus the split, e.g. "input.train".
  std::string name;
  // Token placed between documents: kSeparatorEos (the tokenizer's EOS, none if it
  // has no EOS), -1 (none), or an id in [0, vocab_size).
  int32_t separator_id = kSeparatorEos;
  bool add_bos = false;        // prepend the tokenizer's BOS to each document (error if none)
  bool parse_special = false;  // special-token text in the data becomes special ids
};

// The header fields of a token dataset (what load_token_dataset read or wrote).
struct TokenDatasetInfo {
  std::string tokenizer;  // tokenizer identity
  int32_t vocab_size = 0;
  std::string source;        // source path as given ("" for in-memory data)
  uint64_t source_hash = 0;  // XXH64 of the source bytes (xxhash64)
  int64_t source_bytes = 0;
  std::string split;  // "train" | "validation" | "" (in-memory)
  int32_t separator_id = -1;
  int32_t bos_id = -1;  // prepended id, -1 = none
  SplitRange split_range;
};

class TokenDataset {
 public:
  // An in-memory dataset from already tokenised documents, joined by separator_id
  // (-1 = none) as described above. Empty documents are dropped; titan::Error if no
  // token remains or an id is outside [0, vocab_size) (vocab_size <= 0: unchecked).
  static std::shared_ptr<const TokenDataset> from_documents(
      const std::vector<std::vector<int32_t>>& docs, int32_t separator_id, int32_t vocab_size = 0);

  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const int64_t> doc_offsets() const { return offsets_; }  // (D + 1)
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  const TokenDatasetInfo& info() const { return info_; }
  // Identifies the token content: hash of the cache key and sizes (cached data) or
  // of the tokens and offsets (in-memory data). Loader states record it.
  uint64_t fingerprint() const { return fingerprint_; }
  // The cache file ("" when in memory), and whether this call (re)built it.
  const std::string& cache_path() const { return cache_path_; }
  bool rebuilt() const { return rebuilt_; }

 private:
  friend struct TokenCacheAccess;
  TokenDataset() = default;
  std::shared_ptr<MappedFile> map_;  // when loaded from a cache file
  std::vector<int32_t> own_tokens_;  // otherwise
  std::vector<int64_t> own_offsets_;
  std::span<const int32_t> tokens_;
  std::span<const int64_t> offsets_;
  TokenDatasetInfo info_;
  uint64_t fingerprint_ = 0;
  std::string cache_path_;
  bool rebuilt_ = false;
};

// A string naming the tokenizer's behaviour: kind, vocab size, BOS/EOS/PAD ids and
// a 64-bit FNV-1a fingerprint of every id's spelling plus the encoding of a fixed
// probe text (so a changed vocabulary or merge list changes it), e.g.
// "byte V=259 bos=256 eos=257 pad=258 fp=1f0c...". Cost: one id_to_token per id.
std::string tokenizer_identity(const Tokenizer& tok);

// Reads spec.path, splits it (dataset.h), and returns the split's tokens, from the
// cache when a valid file with the same key exists, else by tokenising (documents
// in parallel) and writing the cache. Errors: those of read_documents /
// split_range, an unreadable source or cache directory (naming the path), add_bos
// without a BOS, a separator id outside the vocabulary.
std::shared_ptr<const TokenDataset> load_token_dataset(const DatasetSpec& spec, Split split,
                                                       double val_fraction, const Tokenizer& tok,
                                                       const TokenCacheOptions& options = {});

// Reads a cache file written by load_token_dataset without checking its key (for
// tools and tests). titan::Error naming the path if it is not a valid cache file.
std::shared_ptr<const TokenDataset> read_token_cache(const std::string& path);

}  // namespace titan::data
