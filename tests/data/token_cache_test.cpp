// Token cache: tokenise once, reuse while the header matches, rebuild on a changed
// source or tokenizer or a damaged file, atomic replacement; the 90/10 token split
// of tiny Shakespeare with the byte tokenizer.
#include "titan/data/token_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "data_test_util.h"
#include "titan/core/fs.h"
#include "titan/data/byte_tokenizer.h"
#include "titan/data/tokenizer.h"

namespace titan::data {
namespace {

using testing::expect_error;
using testing::ScratchDir;
using testing::write_text;

std::vector<int32_t> vec(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}
std::vector<int64_t> vec(std::span<const int64_t> s) {
  return {s.begin(), s.end()};
}

// Byte ids of text (what the byte tokenizer gives for ASCII).
std::vector<int32_t> bytes_of(std::string_view text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

TokenCacheOptions options(std::string dir, int32_t separator_id = kSeparatorEos,
                          bool add_bos = false) {
  TokenCacheOptions o;
  o.cache_dir = std::move(dir);
  o.separator_id = separator_id;
  o.add_bos = add_bos;
  return o;
}

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

// A tokenizer with neither BOS nor EOS: one id per lower-case letter, 'a' = 0.
class LetterTokenizer final : public Tokenizer {
 public:
  std::string_view kind() const override { return "letters"; }
  void encode_append(std::string_view text, bool, std::vector<int32_t>& out) const override {
    for (char c : text)
      if (c >= 'a' && c <= 'z') out.push_back(c - 'a');
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t i : ids) s.push_back(static_cast<char>('a' + i));
    return s;
  }
  int32_t vocab_size() const override { return 26; }
  int32_t token_to_id(std::string_view t) const override { return t.size() == 1 ? t[0] - 'a' : -1; }
  std::string id_to_token(int32_t id) const override {
    return std::string(1, static_cast<char>('a' + id));
  }
};

class TokenCacheTest : public ::testing::Test {
 protected:
  ScratchDir dir;
  ByteTokenizer byte;
  std::string src = dir.file("corpus.txt");
  std::string cache = dir.file("cache");
  DatasetSpec spec = DatasetSpec::text_file(src, TextDocuments::blank_lines);

  std::shared_ptr<const TokenDataset> load(Split split = Split::train, double frac = 0.25,
                                           const Tokenizer* tok = nullptr,
                                           TokenCacheOptions opt = {}) {
    if (opt.cache_dir.empty()) opt.cache_dir = cache;
    return load_token_dataset(spec, split, frac, tok ? *tok : byte, opt);
  }
};

TEST_F(TokenCacheTest, BuildsOnceThenReuses) {
  write_text(src, "one\n\ntwo two\n\nthree\n\nfour\n");
  auto a = load();
  EXPECT_TRUE(a->rebuilt());
  ASSERT_TRUE(file_exists(a->cache_path()));
  EXPECT_EQ(std::filesystem::path(a->cache_path()).parent_path(), std::filesystem::path(cache));
  const std::string fname = std::filesystem::path(a->cache_path()).filename().string();
  EXPECT_EQ(fname.rfind("corpus.train.", 0), 0u) << fname;
  EXPECT_EQ(fname.substr(fname.size() - 7), ".tokens");

  // 4 documents, train = floor(4 * 0.75) = 3, joined by EOS (257) between documents.
  std::vector<int32_t> expect = bytes_of("one");
  expect.push_back(ByteTokenizer::kEos);
  for (int32_t t : bytes_of("two two")) expect.push_back(t);
  expect.push_back(ByteTokenizer::kEos);
  for (int32_t t : bytes_of("three")) expect.push_back(t);
  EXPECT_EQ(vec(a->tokens()), expect);
  EXPECT_EQ(vec(a->doc_offsets()), (std::vector<int64_t>{0, 4, 12, 17}));
  EXPECT_EQ(a->info().separator_id, ByteTokenizer::kEos);
  EXPECT_EQ(a->info().source_hash, xxhash64(read_file(src)));
  EXPECT_EQ(a->info().split_range.unit, "documents");
  EXPECT_EQ(a->info().split_range.end, 3);

  auto b = load();
  EXPECT_FALSE(b->rebuilt());
  EXPECT_EQ(b->cache_path(), a->cache_path());
  EXPECT_EQ(vec(b->tokens()), expect);
  EXPECT_EQ(vec(b->doc_offsets()), vec(a->doc_offsets()));
  EXPECT_EQ(b->fingerprint(), a->fingerprint());
  EXPECT_EQ(b->info().tokenizer, tokenizer_identity(byte));
  EXPECT_EQ(b->info().source, a->info().source);

  // The file read back without the key check, and its layout.
  auto c = read_token_cache(a->cache_path());
  EXPECT_EQ(vec(c->tokens()), expect);
  const std::string raw = read_file(a->cache_path());
  EXPECT_EQ(raw.substr(0, 8), "TITANTOK");
  uint32_t version = 0;
  std::memcpy(&version, raw.data() + 8, 4);
  EXPECT_EQ(version, kTokenCacheVersion);
  EXPECT_EQ(raw.size() % 4, 0u);
  EXPECT_EQ(
      std::memcmp(raw.data() + raw.size() - 4 * expect.size(), expect.data(), 4 * expect.size()),
      0);

  // The validation split gets its own file.
  auto v = load(Split::validation);
  EXPECT_TRUE(v->rebuilt());
  EXPECT_NE(v->cache_path(), a->cache_path());
  EXPECT_EQ(vec(v->tokens()), bytes_of("four"));
}

TEST_F(TokenCacheTest, RebuildsWhenTheSourceChanges) {
  write_text(src, "alpha\n\nbeta\n\ngamma\n\ndelta\n");
  auto old = load();
  const std::vector<int32_t> old_tokens = vec(old->tokens());
  const uint64_t old_inode = inode_of(old->cache_path());
  auto reused = load();  // mmapped view of the file
  ASSERT_FALSE(reused->rebuilt());

  write_text(src, "ALPHA\n\nbeta\n\ngamma\n\ndelta\n");  // same size, other bytes
  auto fresh = load();
  EXPECT_TRUE(fresh->rebuilt());
  EXPECT_EQ(fresh->cache_path(), old->cache_path());  // rebuilt in place
  EXPECT_EQ(vec(fresh->tokens())[0], 'A');
  EXPECT_NE(fresh->fingerprint(), old->fingerprint());
  EXPECT_NE(fresh->info().source_hash, old->info().source_hash);
  // Atomic replacement: a new file was renamed over the old one, so the mapping of
  // the old file still shows the old tokens (an in-place rewrite would change them).
  EXPECT_NE(inode_of(fresh->cache_path()), old_inode);
  EXPECT_EQ(vec(reused->tokens()), old_tokens);
  EXPECT_FALSE(load()->rebuilt());
  // No temporary file is left behind.
  EXPECT_EQ(testing::list_dir(cache).size(), 1u);
}

TEST_F(TokenCacheTest, RebuildsForAnotherTokenizerOrOptions) {
  write_text(src, "abc\n\ndef\n\nghi\n\njkl\n");
  LetterTokenizer letters;
  EXPECT_NE(tokenizer_identity(letters), tokenizer_identity(byte));
  auto b = load();
  auto l = load(Split::train, 0.25, &letters);
  EXPECT_TRUE(l->rebuilt());
  EXPECT_NE(l->cache_path(), b->cache_path());
  // No EOS: documents follow each other without a separator.
  EXPECT_EQ(vec(l->tokens()), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(vec(l->doc_offsets()), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(l->info().separator_id, -1);

  // Options are part of the key: BOS on each document, no separator.
  auto bos = load(Split::train, 0.25, nullptr, options("", -1, true));
  EXPECT_TRUE(bos->rebuilt());
  EXPECT_EQ(vec(bos->tokens()),
            (std::vector<int32_t>{256, 'a', 'b', 'c', 256, 'd', 'e', 'f', 256, 'g', 'h', 'i'}));
  EXPECT_FALSE(load(Split::train, 0.25, nullptr, options("", -1, true))->rebuilt());
  // A fraction change is another split.
  EXPECT_TRUE(load(Split::train, 0.5)->rebuilt());
  EXPECT_FALSE(load()->rebuilt());

  expect_error([&] { load(Split::train, 0.25, &letters, options("", kSeparatorEos, true)); },
               {src, "add_bos", "no BOS"});
  expect_error([&] { load(Split::train, 0.25, nullptr, options("", 300)); },
               {src, "separator_id 300"});
}

TEST_F(TokenCacheTest, RebuildsADamagedFile) {
  write_text(src, "first\n\nsecond\n\nthird\n\nfourth\n");
  auto a = load();
  const std::string path = a->cache_path();
  const std::vector<int32_t> good = vec(a->tokens());
  a.reset();
  std::string raw = read_file(path);
  write_text(path, raw.substr(0, raw.size() - 4));  // truncated
  expect_error([&] { read_token_cache(path); }, {path, "does not match"});
  auto b = load();
  EXPECT_TRUE(b->rebuilt());
  EXPECT_EQ(vec(b->tokens()), good);
  write_text(path, "not a cache file at all");
  expect_error([&] { read_token_cache(path); }, {path, "bad magic"});
  EXPECT_TRUE(load()->rebuilt());
  // A temporary left by a crashed writer is ignored.
  write_text(cache + "/." + std::filesystem::path(path).filename().string() + ".tmp.1.0", "torn");
  auto c = load();
  EXPECT_FALSE(c->rebuilt());
  EXPECT_EQ(vec(c->tokens()), good);
}

TEST_F(TokenCacheTest, InMemoryWithoutCacheDir) {
  write_text(src, "x\n\ny\n");
  auto d = load_token_dataset(spec, Split::train, 0.5, byte, {});
  EXPECT_EQ(d->cache_path(), "");
  EXPECT_FALSE(d->rebuilt());
  EXPECT_EQ(vec(d->tokens()), std::vector<int32_t>{'x'});
  EXPECT_FALSE(std::filesystem::exists(cache));
}

TEST_F(TokenCacheTest, JsonlSource) {
  const std::string p = dir.file("rows.jsonl");
  write_text(p, "{\"text\": \"hi\"}\n{\"text\": \"yo\"}\n{\"text\": \"ok\"}\n");
  const DatasetSpec js = DatasetSpec::jsonl_file(p);
  auto d = load_token_dataset(js, Split::train, 0.34, byte, options(cache));  // floor(1.98) = 1
  EXPECT_EQ(vec(d->tokens()), bytes_of("hi"));
  auto v = load_token_dataset(js, Split::validation, 0.34, byte, options(cache));
  EXPECT_EQ(vec(v->tokens()), (std::vector<int32_t>{'y', 'o', 257, 'o', 'k'}));
  EXPECT_EQ(std::filesystem::path(v->cache_path()).filename().string().rfind("rows.val.", 0), 0u);
}

TEST_F(TokenCacheTest, ErrorsNameTheFile) {
  write_text(src, "");
  expect_error([&] { load(); }, {src, "empty"});
  expect_error(
      [&] {
        load_token_dataset(DatasetSpec::text_file(dir.file("missing.txt")), Split::train, 0.1, byte,
                           {});
      },
      {"missing.txt"});
  const std::string p = dir.file("bad.jsonl");
  write_text(p, "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n");
  expect_error([&] { load_token_dataset(DatasetSpec::jsonl_file(p), Split::train, 0.1, byte, {}); },
               {p + ":2:", "missing key 'text'"});
}

TEST(TokenDatasetFromDocuments, JoinsWithSeparator) {
  auto d = TokenDataset::from_documents({{1, 2}, {}, {3}, {4, 5, 6}}, 0, 10);
  EXPECT_EQ(vec(d->tokens()), (std::vector<int32_t>{1, 2, 0, 3, 0, 4, 5, 6}));
  EXPECT_EQ(vec(d->doc_offsets()), (std::vector<int64_t>{0, 3, 5, 8}));
  auto e = TokenDataset::from_documents({{1, 2}, {3}, {4, 5, 6}}, 0, 10);
  EXPECT_EQ(d->fingerprint(), e->fingerprint());
  EXPECT_NE(d->fingerprint(),
            TokenDataset::from_documents({{1, 2}, {3}, {4, 5, 7}}, 0, 10)->fingerprint());
  expect_error(
      [] {
        TokenDataset::from_documents({{1, 12}}, -1, 10);
      },
      {"document 0", "token 12", "position 1"});
  expect_error([] { TokenDataset::from_documents({{}, {}}, -1, 10); }, {"no tokens"});
}

TEST(TokenCacheShakespeare, ByteTokenizerSplit) {
  ScratchDir dir;
  ByteTokenizer byte;
  const std::string path = testing::tinyshakespeare_path();
  const DatasetSpec spec = DatasetSpec::text_file(path);
  auto train = load_token_dataset(spec, Split::train, 0.1, byte, options(dir.path()));
  auto val = load_token_dataset(spec, Split::validation, 0.1, byte, options(dir.path()));
  EXPECT_EQ(train->num_tokens(), 1003854);
  EXPECT_EQ(val->num_tokens(), 111540);
  EXPECT_EQ(train->num_documents(), 1);
  const std::string text = read_file(path);
  EXPECT_EQ(vec(train->tokens().subspan(0, 14)), bytes_of("First Citizen:"));
  EXPECT_EQ(vec(val->tokens()), bytes_of(std::string_view(text).substr(1003854)));
  EXPECT_EQ(train->info().split_range.unit, "chars");
  // Reloaded from the cache (mmap): the same tokens.
  auto again = load_token_dataset(spec, Split::train, 0.1, byte, options(dir.path()));
  EXPECT_FALSE(again->rebuilt());
  EXPECT_TRUE(std::equal(again->tokens().begin(), again->tokens().end(), train->tokens().begin()));
}

}  // namespace
}  // namespace titan::data
