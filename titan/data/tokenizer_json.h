// Reads a Hugging Face tokenizer.json. The two big members, model.vocab (an
// object of ~150k token -> id entries) and model.merges (~150k pairs), are
// streamed into flat vectors by a SAX handler instead of being built as a JSON
// DOM (a std::map per object), which makes loading several times faster; the
// rest of the file is returned as a DOM.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace titan::data {

struct TokenizerJson {
  nlohmann::json doc;  // the file without model.vocab / model.merges when captured
  bool has_vocab = false;   // model.vocab was an object and is in `vocab`
  bool has_merges = false;  // model.merges was an array and is in `merges`
  std::vector<std::pair<std::string, int64_t>> vocab;       // in file order
  std::vector<std::pair<std::string, std::string>> merges;  // in file (rank) order
  // First malformed entry inside vocab/merges (one line naming the field), or "".
  std::string error;
};

// Parses path. Throws titan::Error naming the file for a missing file or bad JSON
// (with nlohmann's position), and for a malformed vocab/merges entry.
TokenizerJson read_tokenizer_json(const std::string& path);

}  // namespace titan::data
