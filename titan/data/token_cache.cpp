#include "titan/data/token_cache.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/core/progress.h"
#include "titan/core/fs.h"
#include "titan/core/thread_pool.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

static_assert(std::endian::native == std::endian::little, "token cache files are little-endian");

namespace {

constexpr size_t kAlign = 64;  // the arrays start at a multiple of this many bytes
using json = nlohmann::json;

// Text that exercises the tokenizer's merges, digits, whitespace and non-ASCII
// handling; its encoding is part of tokenizer_identity.
constexpr std::string_view kProbe =
    "The quick brown fox jumps over the lazy dog. 0123456789 3.14159 "
    "Hello, world!\n\tdef f(x):\n        return x ** 2  # comment\n"
    "Ünïcödé — café, naïve, 日本語のテキスト, 한국어, emoji 🙂🚀, "
    "ROMEO: But, soft! what light through yonder window breaks?";

// The fingerprint of cached data: its key (tokenizer, source hash, options) and sizes.
uint64_t cache_fingerprint(const json& key, int64_t num_tokens, int64_t num_docs) {
  const int64_t sizes[2] = {num_tokens, num_docs};
  return fnv1a64_bytes(sizes, sizeof(sizes), fnv1a64(key.dump()));
}

}  // namespace

// Builds TokenDatasets (the friend of TokenDataset).
struct TokenCacheAccess {
  static std::shared_ptr<TokenDataset> make() {
    return std::shared_ptr<TokenDataset>(new TokenDataset());
  }

  static void check_ids(std::span<const int32_t> ids, int32_t vocab_size, const std::string& what) {
    if (vocab_size <= 0) return;
    for (size_t i = 0; i < ids.size(); ++i)
      TITAN_CHECK(ids[i] >= 0 && ids[i] < vocab_size,
                  "{}: token {} at position {} is outside [0, {})", what, ids[i], i, vocab_size);
  }

  // Joins tokenised documents (empty ones dropped) into ds's own buffers.
  static void join(TokenDataset& ds, const std::vector<std::vector<int32_t>>& docs, int32_t sep) {
    size_t total = 0;
    for (const auto& d : docs) total += d.size() + 1;
    ds.own_tokens_.reserve(total);
    ds.own_offsets_.assign(1, 0);
    int64_t last = -1;
    for (size_t i = 0; i < docs.size(); ++i)
      if (!docs[i].empty()) last = static_cast<int64_t>(i);
    for (int64_t i = 0; i <= last; ++i) {
      if (docs[i].empty()) continue;
      ds.own_tokens_.insert(ds.own_tokens_.end(), docs[i].begin(), docs[i].end());
      if (sep >= 0 && i < last) ds.own_tokens_.push_back(sep);
      ds.own_offsets_.push_back(static_cast<int64_t>(ds.own_tokens_.size()));
    }
    ds.tokens_ = ds.own_tokens_;
    ds.offsets_ = ds.own_offsets_;
  }

  static uint64_t hash_content(const TokenDataset& ds) {
    const uint64_t h = fnv1a64_bytes(ds.tokens_.data(), ds.tokens_.size_bytes());
    return fnv1a64_bytes(ds.offsets_.data(), ds.offsets_.size_bytes(), h);
  }

  static void set_cache(TokenDataset& ds, std::string path, bool rebuilt, uint64_t fingerprint,
                        TokenDatasetInfo info) {
    ds.cache_path_ = std::move(path);
    ds.rebuilt_ = rebuilt;
    ds.fingerprint_ = fingerprint;
    ds.info_ = std::move(info);
  }

  // Maps a cache file; returns null (with the reason in *why) if it is not valid.
  static std::shared_ptr<TokenDataset> read(const std::string& path, json* header,
                                            std::string* why) {
    std::shared_ptr<MappedFile> map;
    try {
      map = MappedFile::open(path);
    } catch (const Error& e) {
      *why = e.what();
      return nullptr;
    }
    const uint8_t* p = map->data();
    const size_t n = map->size();
    if (n < 16 || std::memcmp(p, kTokenCacheMagic, 8) != 0) {
      *why = "not a token cache file (bad magic)";
      return nullptr;
    }
    uint32_t version, jlen;
    std::memcpy(&version, p + 8, 4);
    std::memcpy(&jlen, p + 12, 4);
    if (version != kTokenCacheVersion) {
      *why = fmt::format("format version {} (expected {})", version, kTokenCacheVersion);
      return nullptr;
    }
    if (16 + static_cast<size_t>(jlen) > n) {
      *why = "truncated header";
      return nullptr;
    }
    try {
      *header = json::parse(std::string_view(reinterpret_cast<const char*>(p + 16), jlen));
      const auto nt = header->at("num_tokens").get<int64_t>();
      const auto nd = header->at("num_documents").get<int64_t>();
      const size_t data = (16 + jlen + kAlign - 1) / kAlign * kAlign;
      if (nt <= 0 || nd <= 0 ||
          n != data + 8 * static_cast<size_t>(nd + 1) + 4 * static_cast<size_t>(nt)) {
        *why = fmt::format("size {} does not match {} documents and {} tokens", n, nd, nt);
        return nullptr;
      }
      auto ds = make();
      ds->offsets_ = {reinterpret_cast<const int64_t*>(p + data), static_cast<size_t>(nd + 1)};
      ds->tokens_ = {reinterpret_cast<const int32_t*>(p + data + 8 * (nd + 1)),
                     static_cast<size_t>(nt)};
      if (ds->offsets_.front() != 0 || ds->offsets_.back() != nt) {
        *why = "document offsets do not span the tokens";
        return nullptr;
      }
      for (int64_t d = 0; d < nd; ++d)
        if (ds->offsets_[d + 1] <= ds->offsets_[d]) {
          *why = fmt::format("document offsets not increasing at document {}", d);
          return nullptr;
        }
      ds->map_ = std::move(map);
      const json& key = header->at("key");
      TokenDatasetInfo& info = ds->info_;
      info.tokenizer = key.at("tokenizer").get<std::string>();
      info.vocab_size = key.at("vocab_size").get<int32_t>();
      info.source = key.at("source").get<std::string>();
      info.source_hash = std::stoull(key.at("source_hash").get<std::string>(), nullptr, 16);
      info.source_bytes = key.at("source_bytes").get<int64_t>();
      info.split = key.at("split").get<std::string>();
      info.separator_id = key.at("separator_id").get<int32_t>();
      info.bos_id = key.at("bos_id").get<int32_t>();
      info.split_range.begin = header->at("split_range").at(0).get<int64_t>();
      info.split_range.end = header->at("split_range").at(1).get<int64_t>();
      info.split_range.unit = header->at("split_unit").get<std::string>();
      ds->cache_path_ = path;
      ds->fingerprint_ = cache_fingerprint(key, nt, nd);
      return ds;
    } catch (const json::exception& e) {
      *why = fmt::format("bad header ({})", e.what());
      return nullptr;
    }
  }

  static void write(const std::string& path, const json& header, const TokenDataset& ds) {
    const std::string text = header.dump();
    AtomicFileWriter w(path);
    w.write(kTokenCacheMagic, 8);
    const uint32_t version = kTokenCacheVersion, jlen = static_cast<uint32_t>(text.size());
    w.write(&version, 4);
    w.write(&jlen, 4);
    w.write(text);
    const size_t data = (16 + text.size() + kAlign - 1) / kAlign * kAlign;
    const std::string pad(data - 16 - text.size(), '\0');
    w.write(pad);
    w.write(ds.offsets_.data(), ds.offsets_.size_bytes());
    w.write(ds.tokens_.data(), ds.tokens_.size_bytes());
    w.commit();
  }
};

std::shared_ptr<const TokenDataset> TokenDataset::from_documents(
    const std::vector<std::vector<int32_t>>& docs, int32_t separator_id, int32_t vocab_size) {
  auto ds = TokenCacheAccess::make();
  TITAN_CHECK(separator_id >= -1 && (vocab_size <= 0 || separator_id < vocab_size),
              "TokenDataset::from_documents: separator_id {} is outside [-1, {})", separator_id,
              vocab_size);
  for (size_t i = 0; i < docs.size(); ++i)
    TokenCacheAccess::check_ids(docs[i], vocab_size,
                                fmt::format("TokenDataset::from_documents: document {}", i));
  TokenCacheAccess::join(*ds, docs, separator_id);
  TITAN_CHECK(ds->num_tokens() > 0,
              "TokenDataset::from_documents: no tokens ({} documents, all empty)", docs.size());
  TokenDatasetInfo info;
  info.vocab_size = vocab_size;
  info.separator_id = separator_id;
  TokenCacheAccess::set_cache(*ds, "", false, TokenCacheAccess::hash_content(*ds), info);
  return ds;
}

std::string tokenizer_identity(const Tokenizer& tok) {
  uint64_t h = kFnv1aOffset;
  const int32_t v = tok.vocab_size();
  for (int32_t id = 0; id < v; ++id) {
    std::string s;
    try {
      s = tok.id_to_token(id);
    } catch (const Error&) {
      s = "\x01<no token>";
    }
    h = fnv1a64_bytes(s.data(), s.size() + 1, h);  // + the terminating NUL as a separator
  }
  const std::vector<int32_t> probe = tok.encode(kProbe, /*parse_special=*/false);
  h = fnv1a64_bytes(probe.data(), probe.size() * sizeof(int32_t), h);
  return fmt::format("{} V={} bos={} eos={} pad={} fp={}", tok.kind(), v, tok.bos_id(),
                     tok.eos_id(), tok.pad_id(), hex64(h));
}

namespace {

std::string default_name(const DatasetSpec& spec, Split split) {
  std::string stem = std::filesystem::path(spec.path).stem().string();
  if (stem.empty()) stem = "data";
  return stem + (split == Split::train ? ".train" : ".val");
}

}  // namespace

std::shared_ptr<const TokenDataset> load_token_dataset(const DatasetSpec& spec, Split split,
                                                       double val_fraction, const Tokenizer& tok,
                                                       const TokenCacheOptions& options) {
  namespace fs = std::filesystem;
  const std::string source = read_file(spec.path);
  const int32_t vocab = tok.vocab_size();
  TITAN_CHECK(
      options.separator_id >= kSeparatorEos && options.separator_id < vocab,
      "load_token_dataset {}: separator_id {} is outside the vocabulary [0, {}) (or -1 = none, "
      "-2 = the tokenizer's EOS)",
      spec.path, options.separator_id, vocab);
  const int32_t sep = options.separator_id == kSeparatorEos ? tok.eos_id() : options.separator_id;
  const int32_t bos = options.add_bos ? tok.bos_id() : -1;
  TITAN_CHECK(!options.add_bos || bos >= 0,
              "load_token_dataset {}: add_bos is set but the {} tokenizer has no BOS token",
              spec.path, tok.kind());

  // What the tokens depend on, apart from the source bytes (-> the file name).
  json key = {
      {"tokenizer", tokenizer_identity(tok)},
      {"vocab_size", vocab},
      {"source", fs::absolute(spec.path).lexically_normal().string()},
      {"dataset",
       {{"format", to_string(spec.format)},
        {"text_documents", to_string(spec.text_documents)},
        {"separator", spec.separator},
        {"jsonl_key", spec.jsonl_key}}},
      {"split", to_string(split)},
      {"split_fraction", val_fraction},
      {"separator_id", sep},
      {"bos_id", bos},
      {"parse_special", options.parse_special},
  };
  const uint64_t name_hash = fnv1a64(key.dump());
  const uint64_t content_hash = xxhash64(source);
  key["source_hash"] = hex64(content_hash);
  key["source_bytes"] = static_cast<int64_t>(source.size());

  std::string path;
  if (!options.cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(options.cache_dir, ec);
    TITAN_CHECK(!ec && dir_exists(options.cache_dir),
                "load_token_dataset: cannot create cache directory {}: {}", options.cache_dir,
                ec.message());
    const std::string name = options.name.empty() ? default_name(spec, split) : options.name;
    path = (fs::path(options.cache_dir) / fmt::format("{}.{}.tokens", name, hex64(name_hash)))
               .string();
    if (file_exists(path)) {
      json header;
      std::string why;
      if (auto ds = TokenCacheAccess::read(path, &header, &why); ds && header.at("key") == key)
        return ds;
    }
  }

  // Tokenise: documents in parallel (each into its own vector), then join in order.
  const DocumentSet all = read_documents(spec, source);
  const SplitRange range = split_range(all, split, val_fraction, spec.path);
  const DocumentSet docs = split_documents(all, split, val_fraction, spec.path);
  std::vector<std::vector<int32_t>> ids(docs.size());
  const int64_t text_bytes = static_cast<int64_t>(docs.bytes.size());
  Progress progress(fmt::format("tokenising {} ({} split)", spec.path, to_string(split)), text_bytes);
  parallel_for(docs.size(), [&](int64_t b, int64_t e) {
    for (int64_t d = b; d < e; ++d) {
      if (bos >= 0) ids[d].push_back(bos);
      tok.encode_append(docs.doc(d), options.parse_special, ids[d]);
      progress.add(static_cast<int64_t>(docs.doc(d).size()));
    }
  });
  auto ds = TokenCacheAccess::make();
  TokenCacheAccess::join(*ds, ids, sep);
  TITAN_CHECK(ds->num_tokens() > 0, "dataset {}: the {} split has no tokens", spec.path,
              to_string(split));
  TokenCacheAccess::check_ids(ds->tokens(), vocab, fmt::format("load_token_dataset {}", spec.path));

  TokenDatasetInfo info;
  info.tokenizer = key["tokenizer"].get<std::string>();
  info.vocab_size = vocab;
  info.source = key["source"].get<std::string>();
  info.source_hash = content_hash;
  info.source_bytes = static_cast<int64_t>(source.size());
  info.split = std::string(to_string(split));
  info.separator_id = sep;
  info.bos_id = bos;
  info.split_range = range;
  const int64_t nt = ds->num_tokens(), nd = ds->num_documents();
  const uint64_t fingerprint = cache_fingerprint(key, nt, nd);
  if (!path.empty()) {
    const json header = {{"key", key},
                         {"num_documents", nd},
                         {"num_tokens", nt},
                         {"vocab_size", vocab},
                         {"split_range", {range.begin, range.end}},
                         {"split_unit", range.unit}};
    TokenCacheAccess::write(path, header, *ds);
  }
  TokenCacheAccess::set_cache(*ds, path, !path.empty(), fingerprint, std::move(info));
  return ds;
}

std::shared_ptr<const TokenDataset> read_token_cache(const std::string& path) {
  json header;
  std::string why;
  auto ds = TokenCacheAccess::read(path, &header, &why);
  TITAN_CHECK(ds != nullptr, "read_token_cache {}: {}", path, why);
  return ds;
}

}  // namespace titan::data
