#include "titan/rl/tools/search_index.h"

#include <sqlite3.h>

#include "titan/core/error.h"
#include "titan/core/progress.h"

namespace titan::rl {

namespace {

// Finalizes a prepared statement on every path.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

void check_sqlite(sqlite3* db, int rc, int want, const char* what) {
  TITAN_CHECK(rc == want, "SearchIndex: sqlite3 {} failed: {} ({})", what, sqlite3_errmsg(db), rc);
}

bool is_word_byte(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

}  // namespace

std::vector<std::string> query_words(std::string_view query) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < query.size()) {
    while (i < query.size() && !is_word_byte(static_cast<unsigned char>(query[i]))) ++i;
    const size_t b = i;
    while (i < query.size() && is_word_byte(static_cast<unsigned char>(query[i]))) ++i;
    if (i > b) out.emplace_back(query.substr(b, i - b));
  }
  return out;
}

std::string fts5_match_expression(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) out += " OR ";
    out += '"' + words[i] + '"';  // words hold no '"' (query_words keeps letters, digits, non-ASCII)
  }
  return out;
}

SearchIndex::SearchIndex(const std::vector<SearchDocument>& docs) : n_docs_(static_cast<int64_t>(docs.size())) {
  int rc = sqlite3_open_v2(":memory:", &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    fail("SearchIndex: sqlite3_open_v2(:memory:) failed: {} ({})", msg, rc);
  }
  try {
    check_sqlite(db_, sqlite3_exec(db_, "CREATE VIRTUAL TABLE docs USING fts5(title, body)", nullptr, nullptr, nullptr),
                 SQLITE_OK, "CREATE VIRTUAL TABLE docs USING fts5");
    check_sqlite(db_, sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK, "BEGIN");
    Stmt ins;
    check_sqlite(db_, sqlite3_prepare_v2(db_, "INSERT INTO docs(rowid, title, body) VALUES (?1, ?2, ?3)", -1, &ins.s,
                                         nullptr),
                 SQLITE_OK, "prepare INSERT");
    Progress progress("building the search index", n_docs_, "documents");
    for (int64_t i = 0; i < n_docs_; ++i) {
      const SearchDocument& d = docs[static_cast<size_t>(i)];
      sqlite3_reset(ins.s);
      sqlite3_bind_int64(ins.s, 1, i + 1);
      sqlite3_bind_text(ins.s, 2, d.title.data(), static_cast<int>(d.title.size()), SQLITE_TRANSIENT);
      sqlite3_bind_text(ins.s, 3, d.body.data(), static_cast<int>(d.body.size()), SQLITE_TRANSIENT);
      check_sqlite(db_, sqlite3_step(ins.s), SQLITE_DONE, "INSERT");
      progress.add(1);
    }
    check_sqlite(db_, sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK, "COMMIT");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

SearchIndex::~SearchIndex() { sqlite3_close(db_); }

std::vector<SearchHit> SearchIndex::search(std::string_view query, int k) const {
  TITAN_CHECK(k >= 1 && k <= 100, "search: k must be in [1, 100], got {}", k);
  TITAN_CHECK(query.size() <= kMaxQueryBytes, "search: the query has {} bytes, more than {}", query.size(),
              kMaxQueryBytes);
  const std::vector<std::string> words = query_words(query);
  TITAN_CHECK(!words.empty(), "search: the query has no words");
  TITAN_CHECK(words.size() <= kMaxQueryWords, "search: the query has {} words, more than {}", words.size(),
              kMaxQueryWords);
  const std::string match = fts5_match_expression(words);
  std::lock_guard<std::mutex> lock(mu_);
  Stmt q;
  check_sqlite(db_,
               sqlite3_prepare_v2(db_,
                                  "SELECT rowid, title, body, bm25(docs) FROM docs WHERE docs MATCH ?1 "
                                  "ORDER BY bm25(docs), rowid LIMIT ?2",
                                  -1, &q.s, nullptr),
               SQLITE_OK, "prepare SELECT");
  sqlite3_bind_text(q.s, 1, match.data(), static_cast<int>(match.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(q.s, 2, k);
  std::vector<SearchHit> out;
  for (;;) {
    const int rc = sqlite3_step(q.s);
    if (rc == SQLITE_DONE) break;
    check_sqlite(db_, rc, SQLITE_ROW, "SELECT ... MATCH");
    SearchHit h;
    h.doc = sqlite3_column_int64(q.s, 0) - 1;
    const unsigned char* title = sqlite3_column_text(q.s, 1);
    const unsigned char* body = sqlite3_column_text(q.s, 2);
    h.title = title ? reinterpret_cast<const char*>(title) : "";
    h.body = body ? reinterpret_cast<const char*>(body) : "";
    h.bm25 = sqlite3_column_double(q.s, 3);
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace titan::rl
