#include "titan/data/byte_tokenizer.h"

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::data {

ByteTokenizer::ByteTokenizer(bool chat) : chat_(chat) {
  added_ = {{kBos, "<|bos|>", true, false, false},
            {kEos, "<|eos|>", true, false, false},
            {kPad, "<|pad|>", true, false, false}};
  if (chat) {
    added_.push_back({kImStart, "<|im_start|>", true, false, false});
    added_.push_back({kImEnd, "<|im_end|>", true, false, false});
    added_.push_back({kThink, "<think>", false, false, false});
    added_.push_back({kThinkEnd, "</think>", false, false, false});
  }
  bos_id_ = kBos;
  eos_id_ = chat ? kImEnd : kEos;
  pad_id_ = kPad;
  matcher_ = AddedTokenMatcher(added_);
}

void ByteTokenizer::encode_append(std::string_view text, bool parse_special,
                                  std::vector<int32_t>& out) const {
  const size_t bad = utf8_find_invalid(text);
  TITAN_CHECK(bad == std::string_view::npos, "encode: text is not valid UTF-8 at byte {}", bad);
  std::vector<TextSegment> segments;
  matcher_.split(text, parse_special, segments);
  out.reserve(out.size() + text.size());
  for (const TextSegment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (unsigned char c : s.text) out.push_back(c);
  }
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  bytes.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    TITAN_CHECK(id >= 0 && id < vocab_size(), "decode: unknown token id {} at position {} ({} tokenizer has {} ids)",
                id, i, kind(), vocab_size());
    if (id < 256)
      bytes.push_back(static_cast<char>(id));
    else
      bytes += added_[id - 256].content;
  }
  return utf8_replace_invalid(bytes);
}

int32_t ByteTokenizer::token_to_id(std::string_view token) const {
  if (token.size() == 1 && static_cast<unsigned char>(token[0]) < 0x80)
    return static_cast<unsigned char>(token[0]);
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  if (token.size() == 6 && token.substr(0, 3) == "<0x" && token[5] == '>') {
    int v = 0;
    for (char c : token.substr(3, 2)) {
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
  return -1;
}

std::string ByteTokenizer::id_to_token(int32_t id) const {
  TITAN_CHECK(id >= 0 && id < vocab_size(), "id_to_token: unknown token id {} ({} tokenizer has {} ids)", id,
              kind(), vocab_size());
  if (id < 0x80) return std::string(1, static_cast<char>(id));
  if (id < 256) return fmt::format("<0x{:02X}>", id);
  return added_[id - 256].content;
}

}  // namespace titan::data
