#include "titan/data/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "titan/data/utf8.h"

namespace titan::data {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (const AddedToken& t : tokens_) {
    if (t.content.empty()) continue;
    const auto c = static_cast<unsigned char>(t.content[0]);
    by_first_[c].push_back({t.content, t.id, t.special, t.lstrip, t.rstrip});
    first_[c] = true;
  }
  for (auto& v : by_first_)
    std::stable_sort(v.begin(), v.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
}

namespace {

// Length of the Unicode whitespace suffix of s (s is valid UTF-8).
size_t whitespace_suffix(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_unicode_whitespace(utf8_next(s, i))) break;
    end = start;
  }
  return s.size() - end;
}

size_t whitespace_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_unicode_whitespace(utf8_next(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<TextSegment>& out) const {
  size_t start = 0;  // start of the pending plain-text segment
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!first_[c]) {
      ++i;
      continue;
    }
    const Entry* match = nullptr;
    for (const Entry& e : by_first_[c]) {
      if (!parse_special && e.special) continue;
      if (e.content.size() <= n - i && std::memcmp(text.data() + i, e.content.data(), e.content.size()) == 0) {
        match = &e;
        break;  // longest first
      }
    }
    if (!match) {
      ++i;
      continue;
    }
    std::string_view before = text.substr(start, i - start);
    if (match->lstrip) before.remove_suffix(whitespace_suffix(before));
    if (!before.empty()) out.push_back({before, -1});
    out.push_back({text.substr(i, match->content.size()), match->id});
    i += match->content.size();
    if (match->rstrip) i += whitespace_prefix(text.substr(i));
    start = i;
  }
  if (start < n) out.push_back({text.substr(start), -1});
}

}  // namespace titan::data
