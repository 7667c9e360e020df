// UTF-8 helpers: validation, U+FFFD replacement of maximal subparts (the WHATWG
// decoder; expected strings from the Encoding Standard's algorithm and Unicode
// §3.9 Table 3-8), NFC, and the GPT-2 byte-level alphabet.
#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::data {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8, FindInvalid) {
  EXPECT_TRUE(utf8_is_valid(""));
  EXPECT_TRUE(utf8_is_valid("plain ascii text that is longer than eight bytes"));
  EXPECT_TRUE(utf8_is_valid("caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\xA6\x99"));
  EXPECT_EQ(utf8_find_invalid("abc\xFF"), 3u);
  EXPECT_EQ(utf8_find_invalid("0123456789\xC0\xAF"), 10u);   // overlong
  EXPECT_EQ(utf8_find_invalid("\xED\xA0\x80"), 0u);          // surrogate U+D800
  EXPECT_EQ(utf8_find_invalid("ab\xF4\x90\x80\x80"), 2u);    // > U+10FFFF
  EXPECT_EQ(utf8_find_invalid("ab\xE6\x97"), 2u);            // truncated
}

TEST(Utf8, ReplaceInvalidMaximalSubparts) {
  EXPECT_EQ(utf8_replace_invalid("ok"), "ok");
  EXPECT_EQ(utf8_replace_invalid("\x80"), R);
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), R + R);  // C0 is never a lead byte
  EXPECT_EQ(utf8_replace_invalid("\xE0\x80\xAF"), R + R + R);
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), R + R + R);
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\xA6"), R);  // truncated 4-byte: one U+FFFD
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\xA6" "a"), R + "a");
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F" "\xF0\x9F\xA6\x99"), R + "\xF0\x9F\xA6\x99");
  EXPECT_EQ(utf8_replace_invalid("\xE6\x97\xE6\x97\xA5"), R + "\xE6\x97\xA5");
  EXPECT_EQ(utf8_replace_invalid("a\xFF" "b\xFE"), "a" + R + "b" + R);
  // Unicode §3.9, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  EXPECT_EQ(utf8_replace_invalid("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
}

TEST(Utf8, NextAndAppendRoundTrip) {
  for (char32_t cp : {char32_t(0), char32_t(0x7F), char32_t(0x80), char32_t(0x7FF), char32_t(0x800),
                      char32_t(0xFFFF), char32_t(0x10000), char32_t(0x10FFFF)}) {
    std::string s;
    utf8_append(s, cp);
    size_t i = 0;
    EXPECT_EQ(utf8_next(s, i), cp);
    EXPECT_EQ(i, s.size());
  }
}

TEST(Utf8, Nfc) {
  EXPECT_EQ(nfc("cafe\xCC\x81"), "caf\xC3\xA9");                   // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // Hangul jamo -> 한
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                        // Angstrom sign -> Å
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");       // reordered by ccc, composed
  EXPECT_EQ(nfc("already NFC \xC3\xA9"), "already NFC \xC3\xA9");
  EXPECT_THROW(nfc("bad \xFF"), Error);
  EXPECT_THROW(nfc("bad \xCC"), Error);
}

TEST(Utf8, ByteLevelAlphabet) {
  const auto& t = byte_to_unicode();
  EXPECT_EQ(t['!'], U'!');
  EXPECT_EQ(t[' '], char32_t(0x120));  // 'Ġ'
  EXPECT_EQ(t['\n'], char32_t(0x10A));  // 'Ċ'
  EXPECT_EQ(t[0xAD], char32_t(0x143));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(t[b]), b);
  EXPECT_EQ(unicode_to_byte(U' '), -1);
  EXPECT_EQ(unicode_to_byte(0x4E00), -1);
}

TEST(Utf8, Whitespace) {
  EXPECT_TRUE(is_unicode_whitespace(' '));
  EXPECT_TRUE(is_unicode_whitespace(0x3000));
  EXPECT_TRUE(is_unicode_whitespace(0x85));
  EXPECT_FALSE(is_unicode_whitespace(0xFEFF));
  EXPECT_FALSE(is_unicode_whitespace(0x200B));
}

}  // namespace
}  // namespace titan::data
