// Finds added/special tokens written in text, leftmost-longest, as Hugging Face
// tokenizers' AddedVocabulary does before normalisation and pre-tokenization.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "titan/data/tokenizer.h"

namespace titan::data {

// A piece of input text: either plain text to tokenize (id == -1) or one matched
// added token (id >= 0, text is the matched span).
struct TextSegment {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Splits text into segments (appended to out). At each position the longest
  // token that matches is taken; the earliest position wins. With
  // parse_special=false, tokens with special=true are not matched. lstrip/rstrip
  // tokens drop the Unicode whitespace next to them from the neighbouring text.
  // Empty text segments are not emitted.
  void split(std::string_view text, bool parse_special, std::vector<TextSegment>& out) const;

 private:
  struct Entry {
    std::string_view content;
    int32_t id;
    bool special, lstrip, rstrip;
  };
  std::vector<AddedToken> tokens_;            // owns the strings
  std::array<std::vector<Entry>, 256> by_first_;  // by first byte, longest first
  std::array<bool, 256> first_{};
};

}  // namespace titan::data
