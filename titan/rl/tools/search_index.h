// A BM25 search index over a small document collection, on SQLite's FTS5 full-text
// extension (libsqlite3, https://sqlite.org/fts5.html): an in-memory database with
// one FTS5 table `docs(title, body)`, its default unicode61 tokenizer (case-folded
// words of letters and digits) and ranking by FTS5's bm25() (Robertson's Okapi
// BM25, k1 = 1.2, b = 0.75, both columns weighted 1; FTS5 returns -score, so the
// best match sorts first). The index is built once and then only read.
//
//   SearchIndex idx({{"Alice Wells", "Alice Wells was born in Kelmora."}, ...});
//   std::vector<SearchHit> hits = idx.search("alice wells", 3);   // best first
//
// Queries are free text (model output): search() keeps its words (runs of ASCII
// letters/digits or non-ASCII bytes), quotes each as an FTS5 string and ORs them,
// so no FTS5 query syntax (AND, NEAR, column filters, *) reaches the parser.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;

namespace titan::rl {

struct SearchDocument {
  std::string title;
  std::string body;
};

struct SearchHit {
  int64_t doc = 0;     // 0-based index of the document in the constructor's list
  std::string title, body;
  double bm25 = 0.0;   // FTS5's bm25() value: minus the BM25 score (more negative = better)
};

class SearchIndex {
 public:
  // Builds the index (a progress line on stderr when it takes more than 2 s).
  // Throws titan::Error when SQLite fails (naming the call and SQLite's message).
  explicit SearchIndex(const std::vector<SearchDocument>& docs);
  ~SearchIndex();
  SearchIndex(const SearchIndex&) = delete;
  SearchIndex& operator=(const SearchIndex&) = delete;

  int64_t size() const { return n_docs_; }

  // The k (>= 1) best documents for the words of `query`, ordered by bm25() then
  // document index. Throws titan::Error for a query without words, more than
  // kMaxQueryWords words, a query over kMaxQueryBytes, or k out of [1, 100].
  // Thread-safe (one connection behind a mutex).
  std::vector<SearchHit> search(std::string_view query, int k) const;

  static constexpr size_t kMaxQueryBytes = 1024;
  static constexpr size_t kMaxQueryWords = 32;

 private:
  sqlite3* db_ = nullptr;
  int64_t n_docs_ = 0;
  mutable std::mutex mu_;
};

// The words of a free-text query as search() reads them, and the FTS5 MATCH
// expression it builds from them ("w1" OR "w2" ...).
std::vector<std::string> query_words(std::string_view query);
std::string fts5_match_expression(const std::vector<std::string>& words);

}  // namespace titan::rl
