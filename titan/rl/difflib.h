// Python's difflib.SequenceMatcher similarity (Ratcliff/Obershelp "gestalt pattern
// matching"), reproduced exactly for isjunk=None:
//
//   sequence_ratio(a, b) == difflib.SequenceMatcher(None, a, b).ratio()
//
// for lists of strings (e.g. lines) and for strings (code points). Source:
// CPython Lib/difflib.py (3.11): __chain_b, find_longest_match,
// get_matching_blocks, ratio. Details kept:
//   - autojunk: when len(b) >= 200, elements of b occurring more than
//     len(b) // 100 + 1 times are "popular" and left out of the index, so matches
//     are not seeded from them (they can still extend a match). Below 200
//     elements nothing is dropped;
//   - longest-match ties go to the smallest i, then the smallest j;
//   - ratio = 2 M / (len(a) + len(b)), M = total size of the matching blocks;
//     1.0 when both are empty.
// Complexity: O(len(a) * occurrences) per level as in CPython; fine for the short
// lists the rewards compare.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::rl {

// One matching block (a[a_start : a_start+size] == b[b_start : b_start+size]).
struct MatchBlock {
  int a_start = 0, b_start = 0, size = 0;
  bool operator==(const MatchBlock&) const = default;
};

// SequenceMatcher(None, a, b, autojunk).get_matching_blocks() without the final
// (len(a), len(b), 0) sentinel: sorted, adjacent blocks collapsed.
// Instantiated for T = std::string and char32_t.
template <class T>
std::vector<MatchBlock> matching_blocks(std::span<const T> a, std::span<const T> b, bool autojunk = true);

// SequenceMatcher(None, a, b, autojunk).ratio(). Instantiated for std::string and char32_t.
template <class T>
double sequence_ratio(std::span<const T> a, std::span<const T> b, bool autojunk = true);

inline double sequence_ratio(const std::vector<std::string>& a, const std::vector<std::string>& b,
                             bool autojunk = true) {
  return sequence_ratio<std::string>(std::span<const std::string>(a), std::span<const std::string>(b), autojunk);
}
// Over the code points of two UTF-8 strings (invalid bytes become U+FFFD first), as
// difflib does on Python str.
double text_ratio(std::string_view a, std::string_view b, bool autojunk = true);

}  // namespace titan::rl
