// The tool-use workload's tools (titan/rl/tools/): the FTS5 search index's bm25()
// ranking checked against the Okapi BM25 formula computed here, the calculator
// against Python's evaluation of the same expressions, the python tool through the
// sandbox, and the harness's error messages for bad calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tests/util/test_files.h"
#include "titan/core/error.h"
#include "titan/core/philox.h"
#include "titan/rl/tools/calculator.h"
#include "titan/rl/tools/search_index.h"
#include "titan/rl/tools/tools.h"

namespace titan::rl {
namespace {

using nlohmann::json;

std::vector<std::string> words_lower(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.push_back(w);
      w.clear();
    }
  }
  return out;
}

// Okapi BM25 as FTS5 defines bm25() (https://sqlite.org/fts5.html#the_bm25_function):
// sum over query terms of IDF * f (k1 + 1) / (f + k1 (1 - b + b |D| / avgdl)), with
// IDF = ln((N - n + 0.5) / (n + 0.5)) (1e-6 when <= 0), f the term's count over both
// columns, |D| the row's token count, k1 = 1.2, b = 0.75; bm25() returns minus that.
double bm25_formula(const std::vector<SearchDocument>& docs, const std::vector<std::string>& terms, size_t row) {
  const double k1 = 1.2, b = 0.75, N = static_cast<double>(docs.size());
  std::vector<std::vector<std::string>> toks;
  double total = 0;
  for (const SearchDocument& d : docs) {
    std::vector<std::string> t = words_lower(d.title);
    for (std::string& w : words_lower(d.body)) t.push_back(std::move(w));
    total += static_cast<double>(t.size());
    toks.push_back(std::move(t));
  }
  const double avgdl = total / N;
  double score = 0;
  for (const std::string& term : terms) {
    double n = 0;
    for (const auto& t : toks) n += std::count(t.begin(), t.end(), term) > 0;
    double idf = std::log((N - n + 0.5) / (n + 0.5));
    if (idf <= 0) idf = 1e-6;
    const double f = static_cast<double>(std::count(toks[row].begin(), toks[row].end(), term));
    const double dl = static_cast<double>(toks[row].size());
    score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl));
  }
  return -score;
}

std::vector<SearchDocument> corpus() {
  return {{"Alice Wells", "Alice Wells was born in Kelmora, works as a baker and is 34."},
          {"Alice Brown", "Alice Brown was born in Dornel, works as a poet and is 51."},
          {"Bruno Wells", "Bruno Wells was born in Kelmora, works as a miner and is 22."},
          {"Kelmora", "Kelmora is a city in Vastia."},
          {"Dornel", "Dornel is a city in Vastia."},
          {"Vastia", "Vastia is a country with 2 cities."},
          {"Carla Diaz", "Carla Diaz was born in Dornel, works as a judge and is 40."},
          {"Dan Ito", "Dan Ito was born in Dornel, works as a nurse and is 63."},
          {"Eve Stone", "Eve Stone was born in Dornel, works as a pilot and is 29."}};
}

TEST(SearchIndex, Bm25MatchesTheFormulaAndOrdersBestFirst) {
  const std::vector<SearchDocument> docs = corpus();
  SearchIndex idx(docs);
  EXPECT_EQ(idx.size(), 9);
  for (const std::string q : {"Alice Wells", "kelmora", "who is the baker in Kelmora?", "Dornel city", "VASTIA"}) {
    const std::vector<std::string> terms = words_lower(q);
    const std::vector<SearchHit> hits = idx.search(q, 100);
    // Every document holding a term, and no other.
    std::set<int64_t> want;
    for (size_t i = 0; i < docs.size(); ++i)
      for (const std::string& t : terms) {
        const auto w = words_lower(docs[i].title + " " + docs[i].body);
        if (std::count(w.begin(), w.end(), t)) want.insert(static_cast<int64_t>(i));
      }
    std::set<int64_t> got;
    for (const SearchHit& h : hits) got.insert(h.doc);
    EXPECT_EQ(got, want) << q;
    for (size_t i = 0; i < hits.size(); ++i) {
      const double f = bm25_formula(docs, terms, static_cast<size_t>(hits[i].doc));
      EXPECT_NEAR(hits[i].bm25, f, 1e-9 * std::max(1.0, std::fabs(f))) << q << " doc " << hits[i].doc;
      EXPECT_EQ(hits[i].title, docs[static_cast<size_t>(hits[i].doc)].title);
      if (i) {
        EXPECT_LE(hits[i - 1].bm25, hits[i].bm25) << q;
      }
    }
  }
  const std::vector<SearchHit> top = idx.search("Alice Wells", 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].title, "Alice Wells");  // both words beat either one
  EXPECT_TRUE(idx.search("nobody", 3).empty());
}

TEST(SearchIndex, QueriesAreWordsNotFts5Syntax) {
  SearchIndex idx(corpus());
  // FTS5 operators, quotes, column filters and prefix stars are just separators here.
  EXPECT_EQ(query_words("title:Alice AND \"Wells\" NEAR(x*)"),
            (std::vector<std::string>{"title", "Alice", "AND", "Wells", "NEAR", "x"}));
  EXPECT_EQ(fts5_match_expression({"a", "b"}), "\"a\" OR \"b\"");
  EXPECT_FALSE(idx.search("title:Alice AND \"Wells\" NEAR(x*)", 3).empty());
  EXPECT_THROW(idx.search("?!  ", 3), Error);
  EXPECT_THROW(idx.search(std::string(2000, 'a'), 3), Error);
  EXPECT_THROW(idx.search("alice", 0), Error);
  std::string many;
  for (int i = 0; i < 40; ++i) many += "w" + std::to_string(i) + " ";
  EXPECT_THROW(idx.search(many, 3), Error);
}

TEST(Calculator, PrecedenceAndErrors) {
  EXPECT_EQ(calculate("1 + 2 * 3"), 7);
  EXPECT_EQ(calculate("(1 + 2) * 3"), 9);
  EXPECT_EQ(calculate("-2^2"), -4);
  EXPECT_EQ(calculate("2^3^2"), 512);
  EXPECT_EQ(calculate("2^-1"), 0.5);
  EXPECT_EQ(calculate("7 / 2"), 3.5);
  EXPECT_EQ(calculate("1.5e2 + .5"), 150.5);
  EXPECT_EQ(format_number(calculate("34 + 51")), "85");
  EXPECT_EQ(format_number(1.0 / 3), "0.333333333333");
  for (const char* bad : {"", "  ", "1 +", "(1 + 2", "1 + 2)", "2 ** 3", "abs(3)", "x", "1,2", "1 / 0", "1e", "10^400",
                          "0^-1", "(-8)^(1/3)", "__import__('os')", "1 2"})
    EXPECT_THROW(calculate(bad), Error) << bad;
  EXPECT_THROW(calculate(std::string(300, '1')), Error);
  EXPECT_THROW(calculate(std::string(40, '(') + "1" + std::string(40, ')')), Error);
  EXPECT_THROW(calculate(std::string(40, '-') + "1"), Error);
  EXPECT_EQ(calculate(std::string(10, '(') + "1" + std::string(10, ')')), 1);
}

// Random expressions evaluated here and by Python (^ written as **), compared
// bitwise (both are IEEE double with the same operation order).
TEST(Calculator, AgreesWithPython) {
  std::vector<std::string> exprs;
  uint64_t ctr = 0;
  auto draw = [&](uint32_t n) { return philox_draw(99, ctr++)[0] % n; };
  std::function<std::string(int)> gen = [&](int depth) -> std::string {
    if (depth == 0 || draw(3) == 0) return std::to_string(1 + draw(20)) + (draw(4) == 0 ? ".5" : "");
    const char* ops[] = {"+", "-", "*", "/"};
    std::string e = gen(depth - 1) + " " + ops[draw(4)] + " " + gen(depth - 1);
    return draw(2) ? "(" + e + ")" : e;
  };
  for (int i = 0; i < 200; ++i) exprs.push_back(gen(4));
  exprs.push_back("2^10 - 3^2^2");
  exprs.push_back("-(3 + 4) * -2");
  std::string py = "import sys\nfor e in sys.stdin.read().split('\\n'):\n  print(repr(float(eval(e.replace('^', '**')))))\n";
  const std::string dir = test::fresh_dir("calculator_py");
  std::FILE* f = std::fopen((dir + "/in.txt").c_str(), "w");
  for (size_t i = 0; i < exprs.size(); ++i) std::fprintf(f, "%s%s", i ? "\n" : "", exprs[i].c_str());
  std::fclose(f);
  std::FILE* s = std::fopen((dir + "/eval.py").c_str(), "w");
  std::fputs(py.c_str(), s);
  std::fclose(s);
  const test::ShellResult r = test::run_shell("/usr/bin/python3 " + dir + "/eval.py < " + dir + "/in.txt");
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> lines;
  std::string line;
  for (char c : r.out) {
    if (c == '\n') {
      lines.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  ASSERT_EQ(lines.size(), exprs.size());
  for (size_t i = 0; i < exprs.size(); ++i) {
    const double want = std::strtod(lines[i].c_str(), nullptr);
    double got = 0;
    try {
      got = calculate(exprs[i]);
    } catch (const Error& e) {
      ADD_FAILURE() << exprs[i] << ": " << e.what();
      continue;
    }
    EXPECT_TRUE(test::same_bits(got, want)) << exprs[i] << " = " << got << " vs python " << lines[i];
  }
}

ParsedToolCall call(std::string name, json args) { return ParsedToolCall{ToolCall{std::move(name), std::move(args)}, "", ""}; }

TEST(ToolSet, ResultsAndErrorMessages) {
  ToolSet tools;
  tools.add(search_tool(std::make_shared<SearchIndex>(corpus()), 2));
  tools.add(calculator_tool());
  tools.add(Tool{"boom", "boom(): throws", [](const json&) -> std::string { throw std::runtime_error("kaboom\nline 2"); }});
  EXPECT_THROW(tools.add(calculator_tool()), Error);
  EXPECT_EQ(tools.names(), (std::vector<std::string>{"search", "calculator", "boom"}));

  ToolResult r = tools.run(call("search", {{"query", "Alice Wells"}}));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.text.substr(0, 26), "1. Alice Wells: Alice Well");
  EXPECT_NE(r.text.find("\n2. "), std::string::npos);
  EXPECT_EQ(r.text.find("\n3. "), std::string::npos);
  r = tools.run(call("search", {{"query", "Alice Wells"}, {"k", 1}}));
  EXPECT_EQ(r.text.find('\n'), std::string::npos);
  EXPECT_EQ(tools.run(call("search", {{"query", "zzz"}})).text, "no results");
  EXPECT_EQ(tools.run(call("calculator", {{"expression", "34 + 51"}})).text, "85");

  auto err = [&](const ParsedToolCall& c) {
    const ToolResult e = tools.run(c);
    EXPECT_FALSE(e.ok);
    EXPECT_EQ(e.text.rfind("error: ", 0), 0u) << e.text;
    EXPECT_EQ(e.text.find('\n'), std::string::npos) << e.text;
    return e.text;
  };
  EXPECT_EQ(err(ParsedToolCall{std::nullopt, "malformed JSON: x", "{x"}), "error: malformed JSON: x");
  EXPECT_EQ(err(call("weather", json::object())), "error: unknown tool 'weather' (known: search, calculator, boom)");
  EXPECT_EQ(err(call("search", json::object())), "error: search: missing argument 'query'");
  EXPECT_EQ(err(call("search", {{"query", 3}})), "error: search: argument 'query' must be a string, got number");
  EXPECT_EQ(err(call("search", {{"q", "x"}})), "error: search: unknown argument 'q' (expected query, k)");
  EXPECT_EQ(err(call("search", {{"query", "x"}, {"k", 50}})), "error: search: argument 'k' must be in [1, 10], got 50");
  EXPECT_EQ(err(call("calculator", {{"expression", "2 ** 3"}})),
            "error: calculator: '**' is not an operator (use ^ for powers)");
  EXPECT_EQ(err(call("boom", json::object())), "error: kaboom line 2");
  const int64_t before = tool_time_ns();
  tools.run(call("calculator", {{"expression", "1"}}));
  EXPECT_GT(tool_time_ns(), before);
}

TEST(ToolSet, PythonThroughTheSandbox) {
  SandboxLimits lim;
  lim.timeout_s = 2.0;
  lim.cpu_s = 2;
  ToolSet tools;
  tools.add(python_tool("/usr/bin/python3", lim));
  ToolResult r = tools.run(call("python", {{"code", "print(sum(range(10)))"}}));
  EXPECT_TRUE(r.ok) << r.text;
  EXPECT_EQ(r.text, "45\n");
  r = tools.run(call("python", {{"code", "raise ValueError('no')"}}));
  EXPECT_TRUE(r.ok);  // the program's failure is its result, for the model to read
  EXPECT_NE(r.text.find("ValueError: no"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("[exit code 1]"), std::string::npos) << r.text;
  r = tools.run(call("python", {{"code", "while True: pass"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.text.rfind("error: python: ", 0), 0u) << r.text;
  r = tools.run(call("python", {{"code", "print('x' * 100000)"}}));
  EXPECT_TRUE(r.ok);
  EXPECT_LT(r.text.size(), kToolResultMaxBytes + 100);
  EXPECT_NE(r.text.find("[output cut at"), std::string::npos);
  EXPECT_EQ(tools.run(call("python", {{"source", "1"}})).text, "error: python: unknown argument 'source' (expected code)");
}

}  // namespace
}  // namespace titan::rl
