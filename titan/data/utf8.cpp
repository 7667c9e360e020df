#include "titan/data/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "titan/core/error.h"

namespace titan::data {
namespace {

// One step of the WHATWG UTF-8 decoder over s starting at i. On success sets cp
// and returns the sequence length (1..4). On an invalid sequence returns 0 and sets
// len_bad to the length of its maximal subpart (>= 1): the bytes that are replaced
// by a single U+FFFD.
inline int decode_one(std::string_view s, size_t i, char32_t& cp, size_t& len_bad) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    len_bad = 1;
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      len_bad = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) {
      len_bad = k;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return need + 1;
}

}  // namespace

size_t utf8_find_invalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    char32_t cp;
    size_t bad;
    const int len = decode_one(s, i, cp, bad);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

char32_t utf8_next(std::string_view s, size_t& i) {
  char32_t cp;
  size_t bad;
  const int len = decode_one(s, i, cp, bad);
  if (len == 0) {  // callers pass valid UTF-8; be safe anyway
    i += bad;
    return 0xFFFD;
  }
  i += len;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_replace_invalid(std::string_view s) {
  size_t first_bad = utf8_find_invalid(s);
  if (first_bad == std::string_view::npos) return std::string(s);
  std::string out(s.substr(0, first_bad));
  out.reserve(s.size() + 8);
  size_t i = first_bad;
  while (i < s.size()) {
    char32_t cp;
    size_t bad;
    const int len = decode_one(s, i, cp, bad);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += bad;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

std::string nfc(std::string_view s) {
  // Code points below U+0300 have NFC_Quick_Check=Yes and canonical combining
  // class 0, so a string made only of them is in NFC. In UTF-8 these are the
  // bytes < 0x80 and the two-byte sequences led by 0xC2..0xCB.
  bool simple = true;
  for (unsigned char c : s) {
    if (c >= 0xCC) {
      simple = false;
      break;
    }
  }
  if (simple) {
    const size_t bad = utf8_find_invalid(s);
    TITAN_CHECK(bad == std::string_view::npos, "nfc: text is not valid UTF-8 at byte {}", bad);
    return std::string(s);
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    const size_t bad = utf8_find_invalid(s);
    if (bad != std::string_view::npos) fail("nfc: text is not valid UTF-8 at byte {}", bad);
    fail("nfc: utf8proc failed: {}", utf8proc_errmsg(n));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> inv{};
    inv.fill(-1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) inv[t[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < 512 ? inverse[cp] : -1;
}

}  // namespace titan::data
