#include "titan/rl/text.h"

namespace titan::rl {

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

// Length of the line break starting at s[i] (0 if none).
size_t line_break_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == '\r') return (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
  if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) return 1;
  if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) return 2;  // U+0085
  if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80) {
    const auto c2 = static_cast<unsigned char>(s[i + 2]);
    if (c2 == 0xA8 || c2 == 0xA9) return 3;  // U+2028, U+2029
  }
  return 0;
}

// If text[i..] is "<\s*tag\s*>" (closing: "</\s*tag\s*>"), returns its length, else 0.
size_t match_tag(std::string_view text, size_t i, std::string_view tag, bool closing) {
  size_t p = i;
  if (p >= text.size() || text[p] != '<') return 0;
  ++p;
  if (closing) {
    if (p >= text.size() || text[p] != '/') return 0;
    ++p;
  }
  while (p < text.size() && is_ascii_space(text[p])) ++p;
  if (text.size() - p < tag.size() || !iequals(text.substr(p, tag.size()), tag)) return 0;
  p += tag.size();
  while (p < text.size() && is_ascii_space(text[p])) ++p;
  if (p >= text.size() || text[p] != '>') return 0;
  return p + 1 - i;
}

}  // namespace

std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t br = line_break_at(s, i);
    if (br == 0) {
      ++i;
      continue;
    }
    out.emplace_back(s.substr(start, i - start));
    i += br;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string_view strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_ascii_space(s[b])) ++b;
  while (e > b && is_ascii_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

std::vector<std::string> find_tag_blocks(std::string_view text, std::string_view tag) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = match_tag(text, i, tag, /*closing=*/false);
    if (open == 0) {
      ++i;
      continue;
    }
    // Shortest body: the first closing tag after the opening one.
    const size_t body = i + open;
    size_t j = body;
    size_t close = 0;
    for (; j < text.size(); ++j)
      if ((close = match_tag(text, j, tag, /*closing=*/true)) != 0) break;
    if (close == 0) {
      ++i;  // no closing tag after this opening: the regex retries from the next position
      continue;
    }
    out.emplace_back(text.substr(body, j - body));
    i = j + close;
  }
  return out;
}

std::optional<std::string> extract_fenced_code(std::string_view text, std::string_view lang) {
  std::optional<std::string> first_any;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find("```", pos);
    if (open == std::string_view::npos) break;
    const size_t eol = text.find('\n', open + 3);
    if (eol == std::string_view::npos) break;
    const std::string info = ascii_lower(strip(text.substr(open + 3, eol - open - 3)));
    const size_t close = text.find("```", eol + 1);
    if (close == std::string_view::npos) break;
    std::string body(text.substr(eol + 1, close - eol - 1));
    const bool lang_match = !lang.empty() && (iequals(info, lang) || (iequals(lang, "python") &&
                                                                         (info == "py" || info == "python3")));
    if (lang_match) return body;
    if (!first_any && info.find(' ') == std::string::npos) first_any = std::move(body);
    pos = close + 3;
  }
  return first_any;
}

}  // namespace titan::rl
