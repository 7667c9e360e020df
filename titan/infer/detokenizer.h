// Incremental detokenization of generated tokens (vLLM's detokenize_incrementally,
// with Tokenizer::decode instead of token strings): the text of the new tokens is
// decode(ids[prefix:]) minus decode(ids[prefix:read]), where prefix starts a few
// tokens before the first unread one so SentencePiece's leading-space handling and
// multi-token UTF-8 characters come out as in a whole-sequence decode. Text that ends
// in an incomplete UTF-8 sequence (U+FFFD) is held back until the next token.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace titan::data {
class Tokenizer;
}

namespace titan::infer {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer() = default;
  // tok may be null (then push/flush return ""). prompt: the context ids.
  void reset(const data::Tokenizer* tok, std::span<const int32_t> prompt);
  // Appends id; returns the text that became final.
  std::string push(int32_t id);
  // The text still held back (an incomplete character at the end), as decoded.
  std::string flush();

 private:
  std::string decode_range(size_t begin, size_t end) const;
  const data::Tokenizer* tok_ = nullptr;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0, read_ = 0;
};

// Finds the earliest stop string in text that ends at or after byte `from` (so only
// new matches are found). Returns the position of the match, or npos; *which* = index
// into stops.
size_t find_stop_string(const std::string& text, size_t from, const std::vector<std::string>& stops,
                        size_t* which);

}  // namespace titan::infer
