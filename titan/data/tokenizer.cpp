#include "titan/data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "titan/core/error.h"
#include "titan/data/bpe_tokenizer.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/sentencepiece_tokenizer.h"

namespace titan::data {

namespace fs = std::filesystem;

bool Tokenizer::is_special(int32_t id) const {
  auto it = std::lower_bound(added_.begin(), added_.end(), id,
                             [](const AddedToken& a, int32_t v) { return a.id < v; });
  return it != added_.end() && it->id == id && it->special;
}

namespace {

std::unique_ptr<Tokenizer> load_json(const fs::path& file) {
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  return BpeTokenizer::load(file.string(), fs::is_regular_file(config) ? config.string() : "");
}

}  // namespace

bool is_builtin_tokenizer(std::string_view path) { return path == "byte" || path == "byte_chat"; }

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (path == "byte") return std::make_unique<ByteTokenizer>(false);
  if (path == "byte_chat") return std::make_unique<ByteTokenizer>(true);
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::is_regular_file(p / "tokenizer.json")) return load_json(p / "tokenizer.json");
    if (fs::is_regular_file(p / "tokenizer.model"))
      return SentencePieceTokenizer::load((p / "tokenizer.model").string());
    if (fs::is_regular_file(p / kBuiltinTokenizerFile)) {
      const std::string file = (p / kBuiltinTokenizerFile).string();
      std::ifstream in(file);
      std::string kind;
      std::getline(in, kind);
      TITAN_CHECK(is_builtin_tokenizer(kind), "load_tokenizer: {}: first line '{}' is not a built-in tokenizer "
                  "(expected byte or byte_chat)", file, kind);
      return load_tokenizer(kind);
    }
    fail("load_tokenizer: directory '{}' has no tokenizer.json, tokenizer.model or {}", path,
         kBuiltinTokenizerFile);
  }
  TITAN_CHECK(fs::exists(p, ec), "load_tokenizer: no such file '{}'", path);
  const std::string ext = p.extension().string();
  if (ext == ".json") return load_json(p);
  if (ext == ".model") return SentencePieceTokenizer::load(path);
  fail("load_tokenizer: cannot tell the kind of '{}' (expected 'byte', 'byte_chat', a tokenizer.json, a *.model "
       "file or a directory holding one)",
       path);
}

}  // namespace titan::data
