// difflib.SequenceMatcher ratio / matching blocks, str.splitlines and the tag
// regex against /usr/bin/python3 itself (tests/rl/rl_text_reference.py), on
// generated cases: short lists of lines, long lists that trigger autojunk's
// "popular" rule, strings with non-ASCII code points, line breaks of every kind,
// tag blocks with odd spacing, case, nesting and missing ends.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "titan/rl/difflib.h"
#include "titan/rl/text.h"

namespace titan::rl {
namespace {

using nlohmann::json;

std::string run_python(const std::string& cases_path) {
  const std::string cmd =
      "/usr/bin/python3 " TITAN_SOURCE_DIR "/tests/rl/rl_text_reference.py " + cases_path + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

struct Cases {
  json j;
  std::vector<std::vector<std::string>> la, lb;
  std::vector<bool> l_autojunk;
  std::vector<std::string> ta, tb;
  std::vector<bool> t_autojunk;
  std::vector<std::string> split;
  std::vector<std::pair<std::string, std::string>> tags;  // (text, tag)
};

Cases make_cases() {
  Cases c;
  std::mt19937 rng(12345);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const std::vector<std::string> names = {"anna smith", "bob jones", "carl baker", "dana white", "eve adams",
                                          "frank hill", "gina ross", "hugo king", "ida moore", "jack ward"};
  auto add_list = [&](int na, int nb, int vocab, bool autojunk) {
    std::vector<std::string> a, b;
    for (int i = 0; i < na; ++i) a.push_back(names[static_cast<size_t>(pick(vocab))]);
    for (int i = 0; i < nb; ++i) b.push_back(names[static_cast<size_t>(pick(vocab))]);
    c.la.push_back(a);
    c.lb.push_back(b);
    c.l_autojunk.push_back(autojunk);
  };
  for (int k = 0; k < 300; ++k) add_list(pick(13), pick(13), 2 + pick(9), true);
  for (int k = 0; k < 20; ++k) add_list(150 + pick(200), 190 + pick(200), 3 + pick(8), k % 2 == 0);
  // Sorting-shaped cases: a permutation of the expected list, and edits of it.
  for (int k = 0; k < 50; ++k) {
    std::vector<std::string> want(names.begin(), names.begin() + 2 + pick(8));
    std::vector<std::string> got = want;
    std::shuffle(got.begin(), got.end(), rng);
    if (pick(3) == 0) got.pop_back();
    if (pick(3) == 0) got.push_back("zed // new name!");
    c.la.push_back(got);
    c.lb.push_back(want);
    c.l_autojunk.push_back(true);
  }
  const std::vector<std::string> chars = {"a", "b", "c", "\n", " ", "é", "中", "z", "/"};
  auto rand_text = [&](int n, int vocab) {
    std::string s;
    for (int i = 0; i < n; ++i) s += chars[static_cast<size_t>(pick(vocab))];
    return s;
  };
  for (int k = 0; k < 150; ++k) {
    const int vocab = 2 + pick(8);
    const bool long_text = k % 5 == 0;
    c.ta.push_back(rand_text(long_text ? 180 + pick(150) : pick(40), vocab));
    c.tb.push_back(rand_text(long_text ? 200 + pick(150) : pick(40), vocab));
    c.t_autojunk.push_back(k % 7 != 3);
  }
  c.split = {"", "a", "a\n", "a\nb", "a\r\nb\rc\n\nd", "\n", "\n\n", "x\vy\fz\x1c" "w\x1d" "v\x1e" "u",
             "p\xc2\x85q\xe2\x80\xa8r\xe2\x80\xa9s", "trailing\r", "\r\n", "a\n\r\nb", "  spaced  \n\tline\t"};
  c.tags = {{"<alphabetical_sorted>\nA\nB\n</alphabetical_sorted>", "alphabetical_sorted"},
            {"x <Alphabetical_Sorted >a</ alphabetical_sorted> y <alphabetical_sorted>b</alphabetical_sorted>",
             "alphabetical_sorted"},
            {"<alphabetical_sorted>\nA\nB", "alphabetical_sorted"},
            {"<alphabetical_sorted>one<alphabetical_sorted>two</alphabetical_sorted>", "alphabetical_sorted"},
            {"<combined_alphabetical_sorted>x</combined_alphabetical_sorted>", "alphabetical_sorted"},
            {"<combined_alphabetical_sorted>x</combined_alphabetical_sorted>", "combined_alphabetical_sorted"},
            {"<  t\t>\n body \n</\nT  >", "t"},
            {"</t><t></t><t>a</t", "t"},
            {"<t>1</t><t>2</t><t>3", "t"},
            {"", "t"},
            {"<t>é中</t>", "t"}};
  json lists = json::array(), texts = json::array(), tags = json::array();
  for (size_t i = 0; i < c.la.size(); ++i)
    lists.push_back({{"a", c.la[i]}, {"b", c.lb[i]}, {"autojunk", static_cast<bool>(c.l_autojunk[i])}});
  for (size_t i = 0; i < c.ta.size(); ++i)
    texts.push_back({{"a", c.ta[i]}, {"b", c.tb[i]}, {"autojunk", static_cast<bool>(c.t_autojunk[i])}});
  for (const auto& [text, tag] : c.tags) tags.push_back({{"text", text}, {"tag", tag}});
  c.j = {{"lists", lists}, {"texts", texts}, {"splitlines", c.split}, {"tags", tags}};
  return c;
}

std::vector<MatchBlock> blocks_of(const json& j) {
  std::vector<MatchBlock> out;
  for (const json& b : j) out.push_back({b[0].get<int>(), b[1].get<int>(), b[2].get<int>()});
  return out;
}

class DifflibVsPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases_ = new Cases(make_cases());
    char path[] = "/tmp/titan_rl_difflib_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    std::ofstream(path) << cases_->j.dump();
    const std::string out = run_python(path);
    std::remove(path);
    ref_ = new json(json::parse(out, nullptr, false));
    ASSERT_FALSE(ref_->is_discarded()) << "python reference failed: " << out.substr(0, 2000);
  }
  static void TearDownTestSuite() {
    delete cases_;
    delete ref_;
  }
  static Cases* cases_;
  static json* ref_;
};
Cases* DifflibVsPython::cases_ = nullptr;
json* DifflibVsPython::ref_ = nullptr;

TEST_F(DifflibVsPython, ListsOfLines) {
  const json& ref = (*ref_)["lists"];
  ASSERT_EQ(ref.size(), cases_->la.size());
  int popular_cases = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const auto& a = cases_->la[i];
    const auto& b = cases_->lb[i];
    const bool aj = cases_->l_autojunk[i];
    const double r = sequence_ratio<std::string>(a, b, aj);
    EXPECT_EQ(r, ref[i]["ratio"].get<double>()) << "case " << i << " |a|=" << a.size() << " |b|=" << b.size();
    EXPECT_EQ(matching_blocks<std::string>(a, b, aj), blocks_of(ref[i]["blocks"])) << "case " << i;
    popular_cases += aj && b.size() >= 200;
  }
  EXPECT_GE(popular_cases, 5);  // autojunk's popular-element rule was exercised
}

TEST_F(DifflibVsPython, AutojunkChangesLongResults) {
  // For long lists with few distinct lines, autojunk gives a different (lower)
  // ratio than autojunk=False, in Python and here alike.
  std::vector<std::string> a, b;
  for (int i = 0; i < 300; ++i) {
    a.push_back(i % 3 == 0 ? "x" : "y");
    b.push_back(i % 2 == 0 ? "x" : "y");
  }
  EXPECT_LT(sequence_ratio<std::string>(a, b, true), sequence_ratio<std::string>(a, b, false));
}

TEST_F(DifflibVsPython, TextsAsCodePoints) {
  const json& ref = (*ref_)["texts"];
  ASSERT_EQ(ref.size(), cases_->ta.size());
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_EQ(text_ratio(cases_->ta[i], cases_->tb[i], cases_->t_autojunk[i]), ref[i]["ratio"].get<double>())
        << "case " << i;
}

TEST_F(DifflibVsPython, SplitLines) {
  const json& ref = (*ref_)["splitlines"];
  for (size_t i = 0; i < cases_->split.size(); ++i)
    EXPECT_EQ(json(split_lines(cases_->split[i])), ref[i]) << "case " << i << ": " << json(cases_->split[i]).dump();
}

TEST_F(DifflibVsPython, TagBlocks) {
  const json& ref = (*ref_)["tags"];
  for (size_t i = 0; i < cases_->tags.size(); ++i)
    EXPECT_EQ(json(find_tag_blocks(cases_->tags[i].first, cases_->tags[i].second)), ref[i])
        << "case " << i << ": " << json(cases_->tags[i].first).dump();
}

TEST(Difflib, EdgeCases) {
  const std::vector<std::string> empty;
  EXPECT_EQ(sequence_ratio(empty, empty), 1.0);
  EXPECT_EQ(sequence_ratio(empty, {"a"}), 0.0);
  EXPECT_EQ(sequence_ratio({"a", "b"}, {"a", "b"}), 1.0);
  EXPECT_EQ(sequence_ratio({"a", "b"}, {"b", "a"}), 0.5);
  EXPECT_EQ(text_ratio("abcd", "bcde"), 0.75);
}

TEST(Text, StripLowerFences) {
  EXPECT_EQ(strip("  \t a b \r\n"), "a b");
  EXPECT_EQ(strip(" \n "), "");
  EXPECT_EQ(ascii_lower("AbC é"), "abc é");
  EXPECT_EQ(extract_fenced_code("text\n```python\nx = 1\n```\nmore"), "x = 1\n");
  EXPECT_EQ(extract_fenced_code("```\nplain\n```\n```py\npy = 2\n```"), "py = 2\n");
  EXPECT_EQ(extract_fenced_code("```\nplain\n```"), "plain\n");
  EXPECT_EQ(extract_fenced_code("```python\nunclosed"), std::nullopt);
  EXPECT_EQ(extract_fenced_code("no fence"), std::nullopt);
  EXPECT_EQ(extract_fenced_code("```Python\ndef f(): pass```"), "def f(): pass");
}

}  // namespace
}  // namespace titan::rl
