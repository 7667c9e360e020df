#include "titan/infer/detokenizer.h"

#include <algorithm>

#include "titan/data/tokenizer.h"

namespace titan::infer {

namespace {
constexpr size_t kContextTokens = 5;  // vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

void IncrementalDetokenizer::reset(const data::Tokenizer* tok, std::span<const int32_t> prompt) {
  tok_ = tok;
  ids_.assign(prompt.begin(), prompt.end());
  read_ = ids_.size();
  prefix_ = read_ > kContextTokens ? read_ - kContextTokens : 0;
}

std::string IncrementalDetokenizer::decode_range(size_t begin, size_t end) const {
  if (begin >= end) return {};
  return tok_->decode(std::span<const int32_t>(ids_.data() + begin, end - begin));
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (!tok_) return {};
  ids_.push_back(id);
  const std::string prefix_text = decode_range(prefix_, read_);
  const std::string new_text = decode_range(prefix_, ids_.size());
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return {};
  std::string delta = new_text.substr(prefix_text.size());
  prefix_ = read_;
  read_ = ids_.size();
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  if (!tok_ || read_ >= ids_.size()) return {};
  const std::string prefix_text = decode_range(prefix_, read_);
  const std::string new_text = decode_range(prefix_, ids_.size());
  prefix_ = read_ = ids_.size();
  return new_text.size() > prefix_text.size() ? new_text.substr(prefix_text.size()) : std::string();
}

size_t find_stop_string(const std::string& text, size_t from, const std::vector<std::string>& stops,
                        size_t* which) {
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    // A new match ends at or after `from`: it starts at or after from - (|s| - 1).
    const size_t start = from + 1 > s.size() ? from + 1 - s.size() : 0;
    const size_t pos = text.find(s, start);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      if (which) *which = i;
    }
  }
  return best;
}

}  // namespace titan::infer
