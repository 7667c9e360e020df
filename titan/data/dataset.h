// Dataset sources: a UTF-8 text file or a JSONL file, read into documents and split
// into train / validation. Tokenisation and caching: token_cache.h.
//
//   DatasetSpec spec = DatasetSpec::text_file(".../input.txt");
//   DocumentSet all = read_documents(spec, read_file(spec.path));
//   DocumentSet train = split_documents(all, Split::train, 0.1, spec.path);
//
// Formats
//   text   one UTF-8 file. text_documents picks how it becomes documents:
//            whole_file   the whole file is one document (tiny Shakespeare);
//            blank_lines  documents are separated by one or more blank lines
//                         (lines that are empty or hold only spaces, tabs, '\r');
//            separator    documents are separated by the exact string `separator`
//                         (e.g. "<|endoftext|>").
//          Empty documents are dropped.
//   jsonl  one JSON object per line; the document is the string at `jsonl_key`.
//          Blank lines are skipped; an empty string is an empty document (dropped).
//
// Train / validation split (validation = the end of the data, like nanoGPT's
// prepare.py and config validation.split_fraction):
//   - a dataset of ONE document is split by characters (Unicode code points):
//     train = the first floor(n * (1 - f)) characters, validation = the rest. For
//     tiny Shakespeare (1,115,394 ASCII characters, f = 0.1) that is 1,003,854 /
//     111,540, exactly nanoGPT's data[:int(n*0.9)] / data[int(n*0.9):];
//   - a dataset of several documents is split by whole documents: train = the first
//     floor(D * (1 - f)) documents, validation = the rest.
//
// Errors (titan::Error): malformed JSON, a line that is not an object, a missing key
// or a non-string value name "<file>:<line>"; a dataset without any (non-empty)
// document, and an empty requested split, name the file.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data {

enum class DatasetFormat { text, jsonl };
enum class TextDocuments { whole_file, blank_lines, separator };
enum class Split { train, validation };

std::string_view to_string(DatasetFormat f);  // "text" | "jsonl"
std::string_view to_string(TextDocuments t);  // "whole_file" | "blank_lines" | "separator"
std::string_view to_string(Split s);          // "train" | "validation"
// Parse the names above; titan::Error naming `what` and the accepted values otherwise.
DatasetFormat parse_dataset_format(std::string_view s, std::string_view what = "dataset format");
TextDocuments parse_text_documents(std::string_view s, std::string_view what = "text_documents");

struct DatasetSpec {
  DatasetFormat format = DatasetFormat::text;
  std::string path;                                          // the source file
  TextDocuments text_documents = TextDocuments::whole_file;  // text only
  std::string separator;                                     // text + separator only; non-empty
  std::string jsonl_key = "text";                            // jsonl only

  static DatasetSpec text_file(std::string path, TextDocuments docs = TextDocuments::whole_file,
                               std::string separator = "") {
    DatasetSpec s;
    s.path = std::move(path);
    s.text_documents = docs;
    s.separator = std::move(separator);
    return s;
  }
  static DatasetSpec jsonl_file(std::string path, std::string key = "text") {
    DatasetSpec s;
    s.format = DatasetFormat::jsonl;
    s.path = std::move(path);
    s.jsonl_key = std::move(key);
    return s;
  }
};

// Documents as one byte buffer plus offsets: document i is bytes[offsets[i], offsets[i+1]).
struct DocumentSet {
  std::string bytes;
  std::vector<int64_t> offsets{0};  // (D + 1), offsets[0] = 0, strictly increasing

  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  std::string_view doc(int64_t i) const {
    return std::string_view(bytes).substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
  void add(std::string_view text);  // appends a document (ignored when empty)
};

// Splits the file's bytes (`source`) into documents per spec (see above). Errors
// name spec.path (and the line for JSONL).
DocumentSet read_documents(const DatasetSpec& spec, std::string_view source);

// Where a split lies in the documents it came from: [begin, end) in `unit`
// ("chars" for a one-document dataset, "documents" otherwise).
struct SplitRange {
  int64_t begin = 0, end = 0;
  std::string unit;
};

// The range of `split` for a dataset of these documents and validation fraction
// `val_fraction` in [0, 1] (rules above). Throws titan::Error naming `path` when
// the split would be empty, and for a fraction outside [0, 1].
SplitRange split_range(const DocumentSet& all, Split split, double val_fraction,
                       const std::string& path);
// The documents of the split (split_range applied).
DocumentSet split_documents(const DocumentSet& all, Split split, double val_fraction,
                            const std::string& path);

// 64-bit FNV-1a (Fowler–Noll–Vo, http://www.isthe.com/chongo/tech/comp/fnv/) of
// bytes, continuing from h (the standard offset basis by default). Used for cache
// keys and fingerprints of small strings (not cryptographic).
inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a64_bytes(const void* data, size_t n, uint64_t h = kFnv1aOffset);
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1aOffset) {
  return fnv1a64_bytes(s.data(), s.size(), h);
}
// XXH64 (xxHash, https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md) of
// bytes with `seed`; equals `xxhsum -H1` for seed 0. The source content hash of the
// token cache (≈10x faster than FNV-1a on large files).
uint64_t xxhash64(const void* data, size_t n, uint64_t seed = 0);
inline uint64_t xxhash64(std::string_view s) {
  return xxhash64(s.data(), s.size(), 0);
}

std::string hex64(uint64_t v);  // 16 lower-case hex digits

}  // namespace titan::data
