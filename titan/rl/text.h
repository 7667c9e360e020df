// Text helpers for parsing model replies (tags, lines, fenced code, numbers).
// All take arbitrary bytes (model output may be anything) and never throw.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace titan::rl {

// Python str.splitlines(): splits at \n, \r\n, \r, \v, \f, \x1c, \x1d, \x1e and the
// UTF-8 encodings of U+0085, U+2028, U+2029; line ends are dropped; a final line
// end does not start an empty line.
std::vector<std::string> split_lines(std::string_view s);

// Python str.strip() for ASCII whitespace (space, \t, \n, \v, \f, \r); other
// Unicode whitespace is kept.
std::string_view strip(std::string_view s);

// ASCII lower-casing (other bytes unchanged).
std::string ascii_lower(std::string_view s);

// The contents of every <tag>...</tag> block, in order, as Python's
//   re.findall(rf"<\s*{tag}\s*>(.*?)</\s*{tag}\s*>", text, re.DOTALL | re.IGNORECASE)
// finds them (tag matched case-insensitively, ASCII whitespace allowed inside the
// brackets, shortest body, scanning on after each match). An opening tag without
// a closing one yields nothing.
std::vector<std::string> find_tag_blocks(std::string_view text, std::string_view tag);

// The code of the first ``` fenced block whose info string is `lang` (case-
// insensitive; e.g. ```python or ```py when lang is "python"), else of the first
// fenced block with any or no info string; nullopt when the text has no complete
// fenced block. The body runs from after the opening line to the line holding the
// closing ```.
std::optional<std::string> extract_fenced_code(std::string_view text, std::string_view lang = "python");

}  // namespace titan::rl
