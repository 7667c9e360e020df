#include "titan/data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/core/error.h"
#include "titan/core/json_read.h"
#include "titan/data/tokenizer_json.h"
#include "titan/data/utf8.h"

namespace titan::data {

using nlohmann::json;

namespace {

// The GPT-2 pre-tokenization regex (HF ByteLevel pre-tokenizer with use_regex).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr size_t kCacheMaxEntries = 1 << 18;  // pieces remembered per tokenizer
constexpr size_t kCacheMaxPieceBytes = 256;   // longer pieces are not cached

json parse_json_file(const std::string& path) {
  TITAN_CHECK(std::filesystem::is_regular_file(path), "tokenizer: no such file '{}'", path);
  std::ifstream f(path, std::ios::binary);
  TITAN_CHECK(f.good(), "tokenizer: cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_json(ss.str(), path + ": bad JSON");
}

const json& need(const json& obj, const char* key, const std::string& path, const std::string& ctx) {
  TITAN_CHECK(obj.is_object(), "{}: field '{}' must be an object", path, ctx);
  auto it = obj.find(key);
  TITAN_CHECK(it != obj.end(), "{}: missing field '{}{}'", path, ctx.empty() ? "" : ctx + ".", key);
  return *it;
}

// obj[key] as a bool, def when absent or null.
bool get_bool(const json& obj, const char* key, bool def, const std::string& path,
              const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  TITAN_CHECK(it->is_boolean(), "{}: field '{}.{}' must be true or false, got {}", path, ctx, key,
              json_excerpt(*it));
  return it->get<bool>();
}

std::string type_of(const json& node, const std::string& path, const std::string& ctx) {
  const json& t = need(node, "type", path, ctx);
  TITAN_CHECK(t.is_string(), "{}: field '{}.type' must be a string", path, ctx);
  return t.get<std::string>();
}

// Byte-level spelling ("Ġworld") -> raw bytes (" world"). Returns false if a
// character is outside the byte-level alphabet.
bool byte_level_to_bytes(std::string_view spelling, std::string& out) {
  out.clear();
  size_t i = 0;
  while (i < spelling.size()) {
    const int b = unicode_to_byte(utf8_next(spelling, i));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) utf8_append(out, byte_to_unicode()[c]);
  return out;
}

// Special token name from tokenizer_config.json: a string, {"content": ...} or null.
std::string config_token(const json& cfg, const char* key, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail("{}: field '{}' must be a string, an object with 'content', or null", path, key);
}

}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& path,
                                                 const std::string& config_path) {
  TITAN_CHECK(std::filesystem::is_regular_file(path), "tokenizer: no such file '{}'", path);
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->path_ = path;
  const TokenizerJson tj = read_tokenizer_json(path);
  t->parse(tj, path);
  t->parse_specials(path, config_path, tj.doc);
  return t;
}

void BpeTokenizer::parse(const TokenizerJson& tj, const std::string& path) {
  const json& j = tj.doc;
  TITAN_CHECK(j.is_object(), "{}: top level must be a JSON object", path);
  parse_model(need(j, "model", path, ""), tj, path);

  // Added tokens: matched whole in the raw text; their ids extend the vocabulary.
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    TITAN_CHECK(it->is_array(), "{}: field 'added_tokens' must be an array", path);
    for (size_t k = 0; k < it->size(); ++k) {
      const json& a = (*it)[k];
      const std::string ctx = fmt::format("added_tokens[{}]", k);
      const json& id = need(a, "id", path, ctx);
      const json& content = need(a, "content", path, ctx);
      TITAN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 30),
                  "{}: field '{}.id' must be an integer in [0, 2^30), got {}", path, ctx, json_excerpt(id));
      TITAN_CHECK(content.is_string() && !content.get<std::string>().empty(),
                  "{}: field '{}.content' must be a non-empty string", path, ctx);
      TITAN_CHECK(!get_bool(a, "single_word", false, path, ctx),
                  "{}: field '{}.single_word' = true is not supported", path, ctx);
      AddedToken t;
      t.id = id.get<int32_t>();
      t.content = content.get<std::string>();
      TITAN_CHECK(utf8_is_valid(t.content), "{}: field '{}.content' is not valid UTF-8", path, ctx);
      t.special = get_bool(a, "special", false, path, ctx);
      t.lstrip = get_bool(a, "lstrip", false, path, ctx);
      t.rstrip = get_bool(a, "rstrip", false, path, ctx);
      if (static_cast<size_t>(t.id) >= id_bytes_.size()) {
        id_bytes_.resize(t.id + 1);
        id_kind_.resize(t.id + 1, 0);
      }
      if (id_kind_[t.id] == 0) {
        // Decoded as HF's ByteLevel decoder does: through the byte-level alphabet
        // when every character is in it, else as the text itself.
        std::string bytes;
        id_bytes_[t.id] = byte_level_to_bytes(t.content, bytes) ? bytes : t.content;
        id_kind_[t.id] = 2;
      }
      added_.push_back(std::move(t));
    }
    std::stable_sort(added_.begin(), added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  }
  matcher_ = AddedTokenMatcher(added_);

  if (auto it = j.find("normalizer"); it != j.end()) parse_normalizer(*it, path);

  auto pt = j.find("pre_tokenizer");
  TITAN_CHECK(pt != j.end() && !pt->is_null(),
              "{}: field 'pre_tokenizer' is null: only byte-level BPE (a ByteLevel "
              "pre-tokenizer) is supported",
              path);
  bool byte_level = false;
  std::vector<const json*> stack = {&*pt};
  // Check that some step is ByteLevel before compiling anything.
  while (!stack.empty()) {
    const json* n = stack.back();
    stack.pop_back();
    if (!n->is_object()) continue;
    auto t = n->find("type");
    if (t == n->end() || !t->is_string()) continue;
    if (*t == "ByteLevel") byte_level = true;
    if (*t == "Sequence" && n->contains("pretokenizers") && (*n)["pretokenizers"].is_array())
      for (const json& c : (*n)["pretokenizers"]) stack.push_back(&c);
  }
  TITAN_CHECK(byte_level,
              "{}: field 'pre_tokenizer' has no ByteLevel step: only byte-level BPE is supported", path);
  parse_pre_tokenizer(*pt, path, "pre_tokenizer");

  if (auto it = j.find("decoder"); it != j.end() && !it->is_null()) {
    const std::string type = type_of(*it, path, "decoder");
    TITAN_CHECK(type == "ByteLevel" || type == "Sequence",
                "{}: field 'decoder.type' = '{}' is not supported (byte-level BPE needs ByteLevel)",
                path, type);
  }
}

void BpeTokenizer::parse_model(const json& model, const TokenizerJson& tj, const std::string& path) {
  if (auto it = model.find("type"); it != model.end()) {
    TITAN_CHECK(it->is_string() && *it == "BPE", "{}: field 'model.type' = {} is not supported (need \"BPE\")",
                path, json_excerpt(*it));
  }
  // vocab and merges were streamed into tj when they had the right JSON type;
  // otherwise they are in the DOM (or missing) and these checks name the problem.
  if (!tj.has_vocab) {
    const json& vocab = need(model, "vocab", path, "model");
    fail("{}: field 'model.vocab' must be an object of token -> id, got {}", path, vocab.type_name());
  }
  if (!tj.has_merges) {
    const json& merges = need(model, "merges", path, "model");
    fail("{}: field 'model.merges' must be an array, got {}", path, merges.type_name());
  }
  TITAN_CHECK(!tj.vocab.empty(), "{}: field 'model.vocab' is empty", path);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    TITAN_CHECK(it == model.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
                "{}: field 'model.{}' = {} is not supported", path, key, json_excerpt(*it));
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    TITAN_CHECK(it->is_number() && it->get<double>() == 0.0,
                "{}: field 'model.dropout' = {} is not supported (only null or 0)", path, json_excerpt(*it));
  }
  ignore_merges_ = get_bool(model, "ignore_merges", false, path, "model");

  int64_t max_id = -1;
  for (const auto& [token, id] : tj.vocab) {
    TITAN_CHECK(id >= 0 && id < (1 << 30), "{}: field 'model.vocab' entry {} has id {} (must be in [0, 2^30))",
                path, json_excerpt(json(token)), id);
    max_id = std::max(max_id, id);
  }
  id_bytes_.assign(max_id + 1, std::string());
  id_kind_.assign(max_id + 1, 0);
  vocab_index_.reserve(tj.vocab.size());
  std::string bytes;
  for (const auto& [token, id] : tj.vocab) {
    TITAN_CHECK(byte_level_to_bytes(token, bytes),
                "{}: field 'model.vocab' token {} has a character outside the byte-level alphabet", path,
                json_excerpt(json(token)));
    TITAN_CHECK(id_kind_[id] == 0, "{}: field 'model.vocab' has id {} twice", path, id);
    id_bytes_[id] = bytes;
    id_kind_[id] = 1;
    // A spelling given twice (duplicate JSON keys) maps to its first id.
    if (find_bytes(bytes) < 0) vocab_index_.insert(hash_bytes(bytes), static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_id_[b] = find_bytes(std::string_view(&c, 1));
  }
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    TITAN_CHECK(it->is_string(), "{}: field 'model.unk_token' must be a string or null", path);
    std::string unk;
    if (byte_level_to_bytes(it->get<std::string>(), unk)) unk_id_ = find_bytes(unk);
  }
  for (int b = 0; b < 256; ++b)
    TITAN_CHECK(byte_id_[b] >= 0 || unk_id_ >= 0,
                "{}: field 'model.vocab' lacks the byte-level token for byte 0x{:02X} and there is no "
                "unk_token",
                path, b);

  merges_.reserve(tj.merges.size());
  std::string ba, bb;
  for (size_t r = 0; r < tj.merges.size(); ++r) {
    const auto& [a, b] = tj.merges[r];
    auto lookup = [&](const std::string& spelling, std::string& raw) -> int32_t {
      TITAN_CHECK(byte_level_to_bytes(spelling, raw),
                  "{}: field 'model.merges[{}]' token {} has a character outside the byte-level alphabet",
                  path, r, json_excerpt(json(spelling)));
      const int32_t id = find_bytes(raw);
      TITAN_CHECK(id >= 0, "{}: field 'model.merges[{}]' token {} is not in model.vocab", path, r,
                  json_excerpt(json(spelling)));
      return id;
    };
    const int32_t ia = lookup(a, ba), ib = lookup(b, bb);
    ba += bb;
    const int32_t merged = find_bytes(ba);
    TITAN_CHECK(merged >= 0, "{}: field 'model.merges[{}]' result {} is not in model.vocab", path, r,
                json_excerpt(json(a + b)));
    merges_.add(ia, ib, static_cast<uint32_t>(r), merged);
  }
}

void BpeTokenizer::parse_normalizer(const json& n, const std::string& path) {
  if (n.is_null()) return;
  const std::string type = type_of(n, path, "normalizer");
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    const json& list = need(n, "normalizers", path, "normalizer");
    TITAN_CHECK(list.is_array(), "{}: field 'normalizer.normalizers' must be an array", path);
    for (const json& c : list) parse_normalizer(c, path);
  } else {
    fail("{}: field 'normalizer.type' = '{}' is not supported (supported: NFC, Sequence)", path, type);
  }
}

void BpeTokenizer::parse_pre_tokenizer(const json& p, const std::string& path, const std::string& field) {
  const std::string type = type_of(p, path, field);
  auto compile = [&](std::string_view pattern, bool literal, const std::string& where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto r = std::make_unique<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &err, &off, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("{}: field '{}' regex does not compile at offset {}: {}", path, where, off,
           reinterpret_cast<const char*>(msg));
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    splits_.push_back(std::move(r));
  };
  if (type == "Sequence") {
    const json& list = need(p, "pretokenizers", path, field);
    TITAN_CHECK(list.is_array(), "{}: field '{}.pretokenizers' must be an array", path, field);
    for (size_t k = 0; k < list.size(); ++k)
      parse_pre_tokenizer(list[k], path, fmt::format("{}.pretokenizers[{}]", field, k));
  } else if (type == "Split") {
    const json& pattern = need(p, "pattern", path, field);
    const json& behavior = need(p, "behavior", path, field);
    TITAN_CHECK(behavior == "Isolated", "{}: field '{}.behavior' = {} is not supported (only \"Isolated\")",
                path, field, json_excerpt(behavior));
    TITAN_CHECK(!get_bool(p, "invert", false, path, field), "{}: field '{}.invert' = true is not supported",
                path, field);
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      compile(pattern["Regex"].get<std::string>(), false, field + ".pattern.Regex");
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      compile(pattern["String"].get<std::string>(), true, field + ".pattern.String");
    } else {
      fail("{}: field '{}.pattern' must be {{\"Regex\": ...}} or {{\"String\": ...}}", path, field);
    }
  } else if (type == "ByteLevel") {
    if (get_bool(p, "add_prefix_space", false, path, field)) {
      TITAN_CHECK(splits_.empty(),
                  "{}: field '{}.add_prefix_space' = true after a Split step is not supported", path,
                  field);
      add_prefix_space_ = true;
    }
    if (get_bool(p, "use_regex", true, path, field)) compile(kGpt2Regex, false, field);
  } else {
    fail("{}: field '{}.type' = '{}' is not supported (supported: Split, ByteLevel, Sequence)", path,
         field, type);
  }
}

void BpeTokenizer::parse_specials(const std::string& path, const std::string& config_path,
                                  const json& j) {
  auto resolve = [&](const std::string& name, const std::string& where, const char* key) -> int32_t {
    if (name.empty()) return -1;
    const int32_t id = token_to_id(name);
    TITAN_CHECK(id >= 0, "{}: field '{}' = '{}' is not a token of {}", where, key, name, path);
    return id;
  };
  if (!config_path.empty()) {
    const json cfg = parse_json_file(config_path);
    TITAN_CHECK(cfg.is_object(), "{}: top level must be a JSON object", config_path);
    bos_id_ = resolve(config_token(cfg, "bos_token", config_path), config_path, "bos_token");
    eos_id_ = resolve(config_token(cfg, "eos_token", config_path), config_path, "eos_token");
    pad_id_ = resolve(config_token(cfg, "pad_token", config_path), config_path, "pad_token");
    return;
  }
  // No config: BOS from a TemplateProcessing post-processor (at the top or inside
  // a Sequence, as Llama 3 has it) whose template starts with a special token;
  // EOS from the usual names.
  std::vector<const json*> procs;
  if (auto pp = j.find("post_processor"); pp != j.end() && pp->is_object()) {
    procs.push_back(&*pp);
    if (pp->value("type", "") == "Sequence" && pp->contains("processors") && (*pp)["processors"].is_array())
      for (const json& p : (*pp)["processors"]) procs.push_back(&p);
  }
  for (const json* pp : procs) {
    if (!pp->is_object() || pp->value("type", "") != "TemplateProcessing" || bos_id_ >= 0) continue;
    if (auto single = pp->find("single"); single != pp->end() && single->is_array() && !single->empty()) {
      const json& first = (*single)[0];
      if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object() &&
          first["SpecialToken"].contains("id") && first["SpecialToken"]["id"].is_string())
        bos_id_ = token_to_id(first["SpecialToken"]["id"].get<std::string>());
    }
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
    if (eos_id_ < 0) eos_id_ = token_to_id(name);
  }
}

int32_t BpeTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  std::string bytes;
  if (!byte_level_to_bytes(token, bytes)) return -1;
  return find_bytes(bytes);
}

std::string BpeTokenizer::id_to_token(int32_t id) const {
  TITAN_CHECK(id >= 0 && id < vocab_size() && id_kind_[id] != 0, "id_to_token: unknown token id {} in {}",
              id, path_);
  if (id_kind_[id] == 2) {
    for (const AddedToken& a : added_)
      if (a.id == id) return a.content;
  }
  return bytes_to_byte_level(id_bytes_[id]);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    TITAN_CHECK(id >= 0 && id < vocab_size() && id_kind_[id] != 0,
                "decode: unknown token id {} at position {} ({} has {} ids)", id, i, path_, vocab_size());
    bytes += id_bytes_[id];
  }
  return utf8_replace_invalid(bytes);
}

void BpeTokenizer::encode_append(std::string_view text, bool parse_special,
                                 std::vector<int32_t>& out) const {
  const size_t bad = utf8_find_invalid(text);
  TITAN_CHECK(bad == std::string_view::npos, "encode: text is not valid UTF-8 at byte {}", bad);
  std::vector<TextSegment> segments;
  matcher_.split(text, parse_special, segments);
  for (const TextSegment& s : segments) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      encode_segment(s.text, out);
  }
}

void BpeTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  std::string buf;
  if (nfc_) {
    buf = nfc(text);
    text = buf;
  }
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    std::string prefixed = " ";
    prefixed += text;
    buf = std::move(prefixed);
    text = buf;
  }
  split_pieces(0, text, out);
}

void BpeTokenizer::split_pieces(size_t step, std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (step == splits_.size()) {
    encode_piece(text, out);
    return;
  }
  struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(md); }
  };
  thread_local MatchData tl;
  const Regex& re = *splits_[step];
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0, gap = 0;
  while (pos < n) {
    const int rc = re.jit ? pcre2_jit_match(re.code, subject, n, pos, PCRE2_NO_UTF_CHECK, tl.md, nullptr)
                          : pcre2_match(re.code, subject, n, pos, PCRE2_NO_UTF_CHECK, tl.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("encode: pre-tokenizer regex failed at byte {}: {}", pos, reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tl.md);
    const size_t ms = ov[0], me = ov[1];
    if (ms > gap) split_pieces(step + 1, text.substr(gap, ms - gap), out);
    if (me > ms) {
      split_pieces(step + 1, text.substr(ms, me - ms), out);
      gap = pos = me;
    } else {  // empty match: step over one character
      gap = ms;
      pos = ms + 1;
      while (pos < n && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (gap < n) split_pieces(step + 1, text.substr(gap), out);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    const int32_t id = byte_id_[static_cast<unsigned char>(piece[0])];
    out.push_back(id >= 0 ? id : unk_id_);
    return;
  }
  if (ignore_merges_) {
    const int32_t id = find_bytes(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  const uint32_t h = cacheable ? hash_bytes(piece) : 0;
  const auto key_of = [this](int32_t i) {
    const Cache::Entry& e = cache_.entries[i];
    return std::string_view(cache_.keys.data() + e.key_off, e.key_len);
  };
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    const int32_t i = cache_.index.find(piece, h, key_of);
    if (i >= 0) {
      const Cache::Entry& e = cache_.entries[i];
      out.insert(out.end(), cache_.ids.begin() + e.ids_off, cache_.ids.begin() + e.ids_off + e.ids_len);
      return;
    }
  }
  thread_local std::vector<int32_t> syms;
  syms.clear();
  for (unsigned char c : piece) syms.push_back(byte_id_[c] >= 0 ? byte_id_[c] : unk_id_);
  bpe_merge_word(merges_, syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.entries.size() < kCacheMaxEntries && cache_.index.find(piece, h, key_of) < 0) {
      cache_.entries.push_back({uint32_t(cache_.keys.size()), uint32_t(piece.size()), uint32_t(cache_.ids.size()),
                                uint32_t(syms.size())});
      cache_.keys.append(piece);
      cache_.ids.insert(cache_.ids.end(), syms.begin(), syms.end());
      cache_.index.insert(h, int32_t(cache_.entries.size() - 1));
    }
  }
}

}  // namespace titan::data
