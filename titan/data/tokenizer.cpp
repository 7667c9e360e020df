#include "titan/data/tokenizer.h"

#include <algorithm>
#include <filesystem>

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

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (path == "byte") return std::make_unique<ByteTokenizer>();
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::is_regular_file(p / "tokenizer.json")) return load_json(p / "tokenizer.json");
    if (fs::is_regular_file(p / "tokenizer.model"))
      return SentencePieceTokenizer::load((p / "tokenizer.model").string());
    fail("load_tokenizer: directory '{}' has no tokenizer.json or tokenizer.model", path);
  }
  TITAN_CHECK(fs::exists(p, ec), "load_tokenizer: no such file '{}'", path);
  const std::string ext = p.extension().string();
  if (ext == ".json") return load_json(p);
  if (ext == ".model") return SentencePieceTokenizer::load(path);
  fail("load_tokenizer: cannot tell the kind of '{}' (expected 'byte', a tokenizer.json, a *.model "
       "file or a directory holding one)",
       path);
}

}  // namespace titan::data
