// Helpers for the tokenizer tests: where the data and the checked-in
// reference files are, and JSONL reading.
#pragma once
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/config/resolve.h"

namespace titan::data::testing {

// The repository's data/ (titan::config::shared_data_dir(): $TITAN_DATA or
// $TITAN_SHARED/data override it).
inline std::string data_dir() { return config::shared_data_dir(); }

// A file under tests/data/ of the repository.
inline std::string test_data(const std::string& name) {
  return std::string(TITAN_SOURCE_DIR) + "/tests/data/" + name;
}

inline std::string qwen3_dir() { return data_dir() + "/qwen3-tokenizer"; }

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<nlohmann::json> rows;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace titan::data::testing
