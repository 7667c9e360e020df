// Dataset sources: text / JSONL documents, errors naming file and line, the
// train/validation split (nanoGPT's 90/10 character split of tiny Shakespeare).
#include "titan/data/dataset.h"

#include <gtest/gtest.h>

#include "data_test_util.h"
#include "titan/core/fs.h"

namespace titan::data {
namespace {

using testing::expect_error;

std::vector<std::string> docs_of(const DocumentSet& d) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < d.size(); ++i) out.emplace_back(d.doc(i));
  return out;
}

DocumentSet read_text(std::string_view text, TextDocuments mode, std::string sep = "") {
  return read_documents(DatasetSpec::text_file("mem.txt", mode, sep), text);
}

DocumentSet read_jsonl(std::string_view text, std::string key = "text") {
  return read_documents(DatasetSpec::jsonl_file("mem.jsonl", key), text);
}

TEST(Fnv1a64, StandardVectors) {
  // Reference values from the FNV test suite (isthe.com/chongo/src/fnv/test_fnv.c).
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  // Streaming in pieces gives the same hash.
  EXPECT_EQ(fnv1a64("bar", fnv1a64("foo")), fnv1a64("foobar"));
  EXPECT_EQ(hex64(0xabcull), "0000000000000abc");
}

TEST(XxHash64, MatchesXxhsum) {
  // `printf ... | xxhsum -H1` (xxhash 0.8.1, Debian): lengths 0, 1, 3 (tail paths).
  EXPECT_EQ(xxhash64(""), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxhash64("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(xxhash64("abc"), 0x44bc2cf5ad770999ull);
  // `head -c N input.txt | xxhsum -H1`: the 8-, 4- and 1-byte tails with and
  // without 32-byte stripes; then the whole file.
  const std::string text = read_file(testing::tinyshakespeare_path());
  const std::string_view t(text);
  EXPECT_EQ(xxhash64(t.substr(0, 7)), 0xea6480369bb07619ull);
  EXPECT_EQ(xxhash64(t.substr(0, 31)), 0x4563d4b655b14e0cull);
  EXPECT_EQ(xxhash64(t.substr(0, 45)), 0xfa92e06b29cb11cdull);
  EXPECT_EQ(xxhash64(t.substr(0, 100)), 0xaa92651ccbee9329ull);
  EXPECT_EQ(xxhash64(text), 0xdcfa653f079489f3ull);
}

TEST(Dataset, TextWholeFileIsOneDocument) {
  const auto d = read_text("line one\n\nline two\n", TextDocuments::whole_file);
  EXPECT_EQ(docs_of(d), std::vector<std::string>{"line one\n\nline two\n"});
}

TEST(Dataset, TextBlankLines) {
  const auto d =
      read_text("\n\nfirst a\nfirst b\n\n  \t\r\nsecond\n\nthird\r\nx", TextDocuments::blank_lines);
  EXPECT_EQ(docs_of(d), (std::vector<std::string>{"first a\nfirst b", "second", "third\r\nx"}));
}

TEST(Dataset, TextSeparator) {
  const auto d = read_text("<|e|>one<|e|>two\n<|e|><|e|>three", TextDocuments::separator, "<|e|>");
  EXPECT_EQ(docs_of(d), (std::vector<std::string>{"one", "two\n", "three"}));
  expect_error([] { read_text("a", TextDocuments::separator, ""); }, {"mem.txt", "separator"});
}

TEST(Dataset, Jsonl) {
  const auto d = read_jsonl(
      "{\"text\": \"a\\nb\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"caf\\u00e9\"}\n"
      "{\"text\": \"\"}\n{\"text\": \"last\"}");
  EXPECT_EQ(docs_of(d), (std::vector<std::string>{"a\nb", "caf\xc3\xa9", "last"}));
  const auto q = read_jsonl("{\"question\": \"q1\"}\n{\"question\": \"q2\"}\n", "question");
  EXPECT_EQ(docs_of(q), (std::vector<std::string>{"q1", "q2"}));
}

TEST(Dataset, JsonlErrorsNameFileAndLine) {
  expect_error([] { read_jsonl("{\"text\": \"a\"}\n\n{\"text\": \"b\"\n"); },
               {"mem.jsonl:3:", "malformed JSON"});
  expect_error([] { read_jsonl("{\"text\": \"a\"}\n{\"body\": \"b\"}\n"); },
               {"mem.jsonl:2:", "missing key 'text'"});
  expect_error([] { read_jsonl("{\"text\": 5}\n"); },
               {"mem.jsonl:1:", "'text'", "number", "expected a string"});
  expect_error([] { read_jsonl("[1, 2]\n"); }, {"mem.jsonl:1:", "expected a JSON object", "array"});
}

TEST(Dataset, EmptyDatasetNamesTheFile) {
  expect_error([] { read_text("", TextDocuments::whole_file); }, {"mem.txt", "empty"});
  expect_error([] { read_text("\n \n\n", TextDocuments::blank_lines); }, {"mem.txt", "empty"});
  expect_error([] { read_jsonl("\n\n"); }, {"mem.jsonl", "empty"});
  expect_error([] { read_jsonl("{\"text\": \"\"}\n"); }, {"mem.jsonl", "empty"});
}

TEST(Dataset, InvalidUtf8TextNamesTheByte) {
  expect_error([] { read_text("abc\xff", TextDocuments::whole_file); },
               {"mem.txt", "invalid UTF-8", "byte 3"});
}

TEST(Dataset, ErrorsFromFilesNameThePath) {
  testing::ScratchDir dir;
  const std::string p = dir.file("bad.jsonl");
  testing::write_text(p, "{\"text\": \"ok\"}\n{oops}\n");
  expect_error([&] { read_documents(DatasetSpec::jsonl_file(p), read_file(p)); },
               {p + ":2:", "malformed JSON"});
}

TEST(Split, OneDocumentSplitsByCharacters) {
  // 10 code points, 2-byte 'é' among them: train = floor(10 * 0.9) = 9 characters.
  const auto all = read_text(
      "abc\xc3\xa9"
      "efghij",
      TextDocuments::whole_file);
  const auto train = split_documents(all, Split::train, 0.1, "mem.txt");
  const auto val = split_documents(all, Split::validation, 0.1, "mem.txt");
  EXPECT_EQ(docs_of(train), std::vector<std::string>{"abc\xc3\xa9"
                                                     "efghi"});
  EXPECT_EQ(docs_of(val), std::vector<std::string>{"j"});
  const SplitRange r = split_range(all, Split::validation, 0.1, "mem.txt");
  EXPECT_EQ(r.begin, 9);
  EXPECT_EQ(r.end, 10);
  EXPECT_EQ(r.unit, "chars");
}

TEST(Split, SeveralDocumentsSplitByDocuments) {
  DocumentSet all;
  for (int i = 0; i < 10; ++i) all.add("doc" + std::to_string(i));
  const auto train = split_documents(all, Split::train, 0.25, "x");  // floor(7.5) = 7
  const auto val = split_documents(all, Split::validation, 0.25, "x");
  ASSERT_EQ(train.size(), 7);
  ASSERT_EQ(val.size(), 3);
  EXPECT_EQ(train.doc(6), "doc6");
  EXPECT_EQ(val.doc(0), "doc7");
  EXPECT_EQ(split_range(all, Split::train, 0.25, "x").unit, "documents");
  // Fraction 0: everything is train; the validation split is empty -> error.
  EXPECT_EQ(split_documents(all, Split::train, 0.0, "x").size(), 10);
  expect_error([&] { split_documents(all, Split::validation, 0.0, "x"); },
               {"x", "validation split is empty"});
  expect_error([&] { split_documents(all, Split::train, 1.5, "x"); }, {"x", "[0, 1]", "1.5"});
}

TEST(Split, TinyShakespeareNinetyTen) {
  const std::string path = testing::tinyshakespeare_path();
  const std::string text = read_file(path);
  ASSERT_EQ(text.size(), 1115394u);
  const DocumentSet all = read_documents(DatasetSpec::text_file(path), text);
  ASSERT_EQ(all.size(), 1);
  const auto train = split_documents(all, Split::train, 0.1, path);
  const auto val = split_documents(all, Split::validation, 0.1, path);
  // nanoGPT data/shakespeare_char/prepare.py: n = 1115394; train = data[:int(n*0.9)].
  EXPECT_EQ(train.doc(0).size(), 1003854u);
  EXPECT_EQ(val.doc(0).size(), 111540u);
  EXPECT_EQ(std::string(train.doc(0)) + std::string(val.doc(0)), text);
}

TEST(Dataset, EnumNames) {
  EXPECT_EQ(parse_dataset_format("jsonl"), DatasetFormat::jsonl);
  EXPECT_EQ(parse_text_documents(to_string(TextDocuments::blank_lines)),
            TextDocuments::blank_lines);
  expect_error([] { parse_dataset_format("csv", "training.dataset"); },
               {"training.dataset", "csv", "text | jsonl"});
}

}  // namespace
}  // namespace titan::data
