#include "titan/data/dataset.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/utf8.h"

namespace titan::data {

std::string_view to_string(DatasetFormat f) {
  return f == DatasetFormat::text ? "text" : "jsonl";
}

std::string_view to_string(TextDocuments t) {
  switch (t) {
    case TextDocuments::whole_file:
      return "whole_file";
    case TextDocuments::blank_lines:
      return "blank_lines";
    case TextDocuments::separator:
      return "separator";
  }
  return "?";
}

std::string_view to_string(Split s) {
  return s == Split::train ? "train" : "validation";
}

DatasetFormat parse_dataset_format(std::string_view s, std::string_view what) {
  if (s == "text") return DatasetFormat::text;
  if (s == "jsonl") return DatasetFormat::jsonl;
  fail("{}: unknown value '{}' (expected text | jsonl)", what, s);
}

TextDocuments parse_text_documents(std::string_view s, std::string_view what) {
  if (s == "whole_file") return TextDocuments::whole_file;
  if (s == "blank_lines") return TextDocuments::blank_lines;
  if (s == "separator") return TextDocuments::separator;
  fail("{}: unknown value '{}' (expected whole_file | blank_lines | separator)", what, s);
}

uint64_t fnv1a64_bytes(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull, kP4 = 0x85EBCA77C2B2AE63ull,
                   kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl64(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian host (token_cache.cpp asserts it)
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
  return rotl64(acc + input * kP2, 31) * kP1;
}
inline uint64_t xxh_merge(uint64_t acc, uint64_t v) {
  return (acc ^ xxh_round(0, v)) * kP1 + kP4;
}

}  // namespace

uint64_t xxhash64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (; p + 32 <= end; p += 32) {
      v1 = xxh_round(v1, read64(p));
      v2 = xxh_round(v2, read64(p + 8));
      v3 = xxh_round(v3, read64(p + 16));
      v4 = xxh_round(v4, read64(p + 24));
    }
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(n);
  for (; p + 8 <= end; p += 8) h = rotl64(h ^ xxh_round(0, read64(p)), 27) * kP1 + kP4;
  if (p + 4 <= end) {
    h = rotl64(h ^ (static_cast<uint64_t>(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl64(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

void DocumentSet::add(std::string_view text) {
  if (text.empty()) return;
  bytes.append(text);
  offsets.push_back(static_cast<int64_t>(bytes.size()));
}

namespace {

bool is_blank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

// Documents separated by runs of blank lines. A document keeps its inner newlines
// and loses the newline that ends its last line.
void split_blank_lines(std::string_view text, DocumentSet& out) {
  size_t doc_begin = 0, pos = 0;
  bool in_doc = false;
  size_t doc_end = 0;  // end of the last non-blank line of the current document
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const size_t line_end = nl == std::string_view::npos ? text.size() : nl;
    const std::string_view line = text.substr(pos, line_end - pos);
    if (is_blank(line)) {
      if (in_doc) out.add(text.substr(doc_begin, doc_end - doc_begin));
      in_doc = false;
    } else {
      if (!in_doc) doc_begin = pos;
      in_doc = true;
      doc_end = line_end;
    }
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  if (in_doc) out.add(text.substr(doc_begin, doc_end - doc_begin));
}

void split_separator(std::string_view text, std::string_view sep, DocumentSet& out) {
  size_t pos = 0;
  while (true) {
    const size_t at = text.find(sep, pos);
    if (at == std::string_view::npos) {
      out.add(text.substr(pos));
      return;
    }
    out.add(text.substr(pos, at - pos));
    pos = at + sep.size();
  }
}

void read_jsonl(const DatasetSpec& spec, std::string_view source, DocumentSet& out) {
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < source.size()) {
    size_t nl = source.find('\n', pos);
    const size_t line_end = nl == std::string_view::npos ? source.size() : nl;
    const std::string_view line = source.substr(pos, line_end - pos);
    pos = nl == std::string_view::npos ? source.size() : nl + 1;
    ++line_no;
    if (is_blank(line)) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail("{}:{}: malformed JSON ({})", spec.path, line_no, e.what());
    }
    TITAN_CHECK(row.is_object(), "{}:{}: expected a JSON object, got {}", spec.path, line_no,
                row.type_name());
    auto it = row.find(spec.jsonl_key);
    TITAN_CHECK(it != row.end(), "{}:{}: missing key '{}'", spec.path, line_no, spec.jsonl_key);
    TITAN_CHECK(it->is_string(), "{}:{}: key '{}' holds a {}, expected a string", spec.path,
                line_no, spec.jsonl_key, it->type_name());
    out.add(it->get_ref<const std::string&>());
  }
}

int64_t count_code_points(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Byte offset of code point k (k <= number of code points) in valid UTF-8 s.
int64_t code_point_offset(std::string_view s, int64_t k) {
  int64_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == k) return static_cast<int64_t>(i);
      ++seen;
    }
  }
  return static_cast<int64_t>(s.size());
}

}  // namespace

DocumentSet read_documents(const DatasetSpec& spec, std::string_view source) {
  DocumentSet out;
  if (spec.format == DatasetFormat::jsonl) {
    TITAN_CHECK(!spec.jsonl_key.empty(), "dataset {}: jsonl_key is empty", spec.path);
    read_jsonl(spec, source, out);
  } else {
    const size_t bad = utf8_find_invalid(source);
    TITAN_CHECK(bad == std::string_view::npos, "dataset {}: invalid UTF-8 at byte {}", spec.path,
                bad);
    switch (spec.text_documents) {
      case TextDocuments::whole_file:
        out.add(source);
        break;
      case TextDocuments::blank_lines:
        split_blank_lines(source, out);
        break;
      case TextDocuments::separator:
        TITAN_CHECK(!spec.separator.empty(),
                    "dataset {}: text_documents = separator needs a non-empty separator",
                    spec.path);
        split_separator(source, spec.separator, out);
        break;
    }
  }
  TITAN_CHECK(out.size() > 0, "dataset {}: empty ({} bytes, no non-empty document)", spec.path,
              source.size());
  return out;
}

SplitRange split_range(const DocumentSet& all, Split split, double val_fraction,
                       const std::string& path) {
  TITAN_CHECK(val_fraction >= 0.0 && val_fraction <= 1.0,
              "dataset {}: split fraction must be in [0, 1], got {}", path, val_fraction);
  TITAN_CHECK(all.size() > 0, "dataset {}: empty (no documents)", path);
  SplitRange r;
  int64_t n;
  if (all.size() == 1) {
    r.unit = "chars";
    n = count_code_points(all.doc(0));
  } else {
    r.unit = "documents";
    n = all.size();
  }
  const auto n_train =
      static_cast<int64_t>(std::floor(static_cast<double>(n) * (1.0 - val_fraction)));
  if (split == Split::train) {
    r.begin = 0;
    r.end = n_train;
  } else {
    r.begin = n_train;
    r.end = n;
  }
  TITAN_CHECK(r.end > r.begin,
              "dataset {}: the {} split is empty ({} {} in all, validation fraction {})", path,
              to_string(split), n, r.unit, val_fraction);
  return r;
}

DocumentSet split_documents(const DocumentSet& all, Split split, double val_fraction,
                            const std::string& path) {
  const SplitRange r = split_range(all, split, val_fraction, path);
  DocumentSet out;
  if (r.unit == "chars") {
    const std::string_view doc = all.doc(0);
    const int64_t b = code_point_offset(doc, r.begin), e = code_point_offset(doc, r.end);
    out.add(doc.substr(b, e - b));
  } else {
    for (int64_t i = r.begin; i < r.end; ++i) out.add(all.doc(i));
  }
  return out;
}

}  // namespace titan::data
