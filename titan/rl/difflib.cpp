#include "titan/rl/difflib.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "titan/data/utf8.h"

namespace titan::rl {

namespace {

// The state of one SequenceMatcher(None, a, b, autojunk): b2j without popular
// elements, and the scratch rows of find_longest_match.
template <class T>
class Matcher {
 public:
  Matcher(std::span<const T> a, std::span<const T> b, bool autojunk) : a_(a), b_(b) {
    const int n = static_cast<int>(b.size());
    for (int j = 0; j < n; ++j) b2j_[b[static_cast<size_t>(j)]].push_back(j);
    if (autojunk && n >= 200) {
      const size_t ntest = static_cast<size_t>(n / 100 + 1);
      for (auto it = b2j_.begin(); it != b2j_.end();) {
        if (it->second.size() > ntest) {
          it = b2j_.erase(it);
        } else {
          ++it;
        }
      }
    }
    prev_.assign(static_cast<size_t>(n) + 1, 0);
    cur_.assign(static_cast<size_t>(n) + 1, 0);
  }

  // difflib find_longest_match(alo, ahi, blo, bhi) with isjunk=None (bjunk empty):
  // the longest block seeded from indexed (non-popular) elements, then extended on
  // both ends by equal elements (popular ones included).
  MatchBlock find_longest(int alo, int ahi, int blo, int bhi) {
    int besti = alo, bestj = blo, bestsize = 0;
    // prev_[j + 1] = length of the match ending at (i - 1, j); only indices in
    // touched_prev_ are non-zero.
    for (int i = alo; i < ahi; ++i) {
      touched_cur_.clear();
      auto it = b2j_.find(a_[static_cast<size_t>(i)]);
      if (it != b2j_.end()) {
        for (int j : it->second) {
          if (j < blo) continue;
          if (j >= bhi) break;
          const int k = prev_[static_cast<size_t>(j)] + 1;
          cur_[static_cast<size_t>(j) + 1] = k;
          touched_cur_.push_back(j + 1);
          if (k > bestsize) {
            besti = i - k + 1;
            bestj = j - k + 1;
            bestsize = k;
          }
        }
      }
      for (int t : touched_prev_) prev_[static_cast<size_t>(t)] = 0;
      std::swap(prev_, cur_);
      std::swap(touched_prev_, touched_cur_);
    }
    for (int t : touched_prev_) prev_[static_cast<size_t>(t)] = 0;
    touched_prev_.clear();
    while (besti > alo && bestj > blo && a_[static_cast<size_t>(besti - 1)] == b_[static_cast<size_t>(bestj - 1)]) {
      --besti;
      --bestj;
      ++bestsize;
    }
    while (besti + bestsize < ahi && bestj + bestsize < bhi &&
           a_[static_cast<size_t>(besti + bestsize)] == b_[static_cast<size_t>(bestj + bestsize)]) {
      ++bestsize;
    }
    return {besti, bestj, bestsize};
  }

  std::vector<MatchBlock> blocks() {
    std::vector<MatchBlock> out;
    std::vector<std::array<int, 4>> queue{{0, static_cast<int>(a_.size()), 0, static_cast<int>(b_.size())}};
    while (!queue.empty()) {
      const auto [alo, ahi, blo, bhi] = queue.back();
      queue.pop_back();
      const MatchBlock m = find_longest(alo, ahi, blo, bhi);
      if (m.size == 0) continue;
      out.push_back(m);
      if (alo < m.a_start && blo < m.b_start) queue.push_back({alo, m.a_start, blo, m.b_start});
      if (m.a_start + m.size < ahi && m.b_start + m.size < bhi)
        queue.push_back({m.a_start + m.size, ahi, m.b_start + m.size, bhi});
    }
    std::sort(out.begin(), out.end(), [](const MatchBlock& x, const MatchBlock& y) {
      return std::tie(x.a_start, x.b_start, x.size) < std::tie(y.a_start, y.b_start, y.size);
    });
    // Collapse adjacent blocks, as get_matching_blocks does.
    std::vector<MatchBlock> collapsed;
    for (const MatchBlock& m : out) {
      if (!collapsed.empty()) {
        MatchBlock& last = collapsed.back();
        if (last.a_start + last.size == m.a_start && last.b_start + last.size == m.b_start) {
          last.size += m.size;
          continue;
        }
      }
      collapsed.push_back(m);
    }
    return collapsed;
  }

 private:
  std::span<const T> a_, b_;
  std::unordered_map<T, std::vector<int>> b2j_;
  std::vector<int> prev_, cur_;
  std::vector<int> touched_prev_, touched_cur_;
};

std::u32string code_points(std::string_view s) {
  const std::string valid = data::utf8_replace_invalid(s);
  std::u32string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size();) out.push_back(data::utf8_next(valid, i));
  return out;
}

}  // namespace

template <class T>
std::vector<MatchBlock> matching_blocks(std::span<const T> a, std::span<const T> b, bool autojunk) {
  return Matcher<T>(a, b, autojunk).blocks();
}

template <class T>
double sequence_ratio(std::span<const T> a, std::span<const T> b, bool autojunk) {
  const size_t length = a.size() + b.size();
  if (length == 0) return 1.0;
  int64_t matches = 0;
  for (const MatchBlock& m : matching_blocks(a, b, autojunk)) matches += m.size;
  return 2.0 * static_cast<double>(matches) / static_cast<double>(length);
}

template std::vector<MatchBlock> matching_blocks<std::string>(std::span<const std::string>,
                                                              std::span<const std::string>, bool);
template std::vector<MatchBlock> matching_blocks<char32_t>(std::span<const char32_t>, std::span<const char32_t>,
                                                           bool);
template double sequence_ratio<std::string>(std::span<const std::string>, std::span<const std::string>, bool);
template double sequence_ratio<char32_t>(std::span<const char32_t>, std::span<const char32_t>, bool);

double text_ratio(std::string_view a, std::string_view b, bool autojunk) {
  const std::u32string ca = code_points(a), cb = code_points(b);
  return sequence_ratio<char32_t>(std::span<const char32_t>(ca), std::span<const char32_t>(cb), autojunk);
}

}  // namespace titan::rl
