// UTF-8 helpers shared by the tokenizers: validation, lossy decoding (invalid
// sequences -> U+FFFD), NFC normalisation (utf8proc) and the GPT-2 byte-level
// alphabet used by byte-level BPE (HF tokenizers' ByteLevel pre-tokenizer/decoder).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {

// Returns the byte offset of the first invalid UTF-8 sequence in s, or npos when s
// is valid UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
size_t utf8_find_invalid(std::string_view s);
inline bool utf8_is_valid(std::string_view s) { return utf8_find_invalid(s) == std::string_view::npos; }

// Decodes the code point starting at s[i] of *valid* UTF-8 and advances i past it.
char32_t utf8_next(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of code point cp to out.
void utf8_append(std::string& out, char32_t cp);

// Returns s with every invalid byte sequence replaced by U+FFFD, one replacement
// per "maximal subpart" (the WHATWG Encoding Standard's UTF-8 decoder, Unicode
// §3.9 U+FFFD substitution of maximal subparts). This is what Rust's
// String::from_utf8_lossy (Hugging Face tokenizers) and JavaScript's TextDecoder do.
// Valid input is returned unchanged.
std::string utf8_replace_invalid(std::string_view s);

// Unicode NFC of valid UTF-8 s (utf8proc). Text whose code points are all below
// U+0300 is already NFC and is returned as is without calling utf8proc.
// Throws titan::Error if s is not valid UTF-8 (naming the byte offset).
std::string nfc(std::string_view s);

// True for Unicode White_Space code points (what Rust's char::is_whitespace tests).
bool is_unicode_whitespace(char32_t cp);

// The GPT-2 byte-level alphabet (bytes_to_unicode in openai/gpt-2 encoder.py):
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in
// byte order. byte_to_unicode()[b] is the code point for byte b.
const std::array<char32_t, 256>& byte_to_unicode();
// Inverse of byte_to_unicode: the byte for code point cp, or -1 if cp is not in
// the alphabet.
int unicode_to_byte(char32_t cp);

}  // namespace titan::data
