#include "titan/config/toml_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "titan/config/field_text.h"
#include "titan/core/error.h"
#include "titan/core/fs.h"
#include "titan/core/json_read.h"

namespace titan::config {

namespace {

std::string_view parent_of(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

void emit_comment(std::string& out, std::string_view text) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    out += line.empty() ? "#\n" : fmt::format("# {}\n", line);
    start = end + 1;
  }
}

}  // namespace

std::string format_toml(const FieldTable& table, std::string_view header) {
  std::string out;
  if (!header.empty()) emit_comment(out, header);
  // Root-level fields first (TOML puts bare keys before the first [table]), then
  // each section's own fields under its header, in declaration order.
  std::vector<std::string_view> groups{std::string_view()};
  for (const auto& s : table.sections) groups.push_back(s.path);
  for (std::string_view g : groups) {
    std::vector<std::pair<std::string, std::string_view>> lines;  // "key = value", doc
    size_t width = 0;
    for (const auto& f : table.fields) {
      if (parent_of(f.path) != g) continue;
      std::string_view leaf = g.empty() ? std::string_view(f.path) : std::string_view(f.path).substr(g.size() + 1);
      lines.emplace_back(fmt::format("{} = {}", leaf, format_toml_value(f)), f.doc);
      width = std::max(width, std::min<size_t>(lines.back().first.size(), 44));
    }
    if (!g.empty()) {
      if (!out.empty()) out += '\n';
      emit_comment(out, table.find_section(g)->doc);
      out += fmt::format("[{}]\n", g);
    } else if (lines.empty()) {
      continue;
    }
    for (const auto& [kv, doc] : lines) out += fmt::format("{:<{}}  # {}\n", kv, width, doc);
  }
  return out;
}

namespace {

std::string_view toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}

struct TomlApplier {
  const FieldTable& table;
  const std::string& source;

  [[noreturn]] void fail_at(const toml::source_region& where, const std::string& msg) const {
    fail("{}:{}: {}", source, where.begin.line, msg);
  }
  [[noreturn]] void bad_type(const FieldRef& f, const toml::node& n) const {
    fail_at(n.source(), fmt::format("bad value for '{}': expected {}, got {}", f.path, describe_field_type(f),
                                    toml_type_name(n)));
  }

  // Scalar conversions shared by fields and list elements.
  int64_t get_int(const FieldRef& f, const toml::node& n) const {
    if (auto* v = n.as_integer()) return v->get();
    bad_type(f, n);
  }
  double get_double(const FieldRef& f, const toml::node& n) const {
    if (auto* v = n.as_floating_point()) return v->get();
    if (auto* v = n.as_integer()) return static_cast<double>(v->get());
    bad_type(f, n);
  }
  const std::string& get_string(const FieldRef& f, const toml::node& n) const {
    if (auto* v = n.as_string()) return v->get();
    bad_type(f, n);
  }
  const toml::array& get_array(const FieldRef& f, const toml::node& n) const {
    if (auto* a = n.as_array()) return *a;
    bad_type(f, n);
  }

  void set(const FieldRef& f, const toml::node& n) const {
    switch (f.kind) {
      case FieldKind::boolean:
        if (auto* v = n.as_boolean()) *static_cast<bool*>(f.ptr) = v->get();
        else bad_type(f, n);
        return;
      case FieldKind::i32: {
        int64_t v = get_int(f, n);
        if (v < INT_MIN || v > INT_MAX)
          fail_at(n.source(), fmt::format("bad value for '{}': {} does not fit in 32 bits", f.path, v));
        *static_cast<int*>(f.ptr) = static_cast<int>(v);
        return;
      }
      case FieldKind::i64: *static_cast<int64_t*>(f.ptr) = get_int(f, n); return;
      case FieldKind::f64: *static_cast<double*>(f.ptr) = get_double(f, n); return;
      case FieldKind::string: *static_cast<std::string*>(f.ptr) = get_string(f, n); return;
      case FieldKind::enumeration: {
        const std::string& name = get_string(f, n);
        try {
          f.enum_ops->set(f.ptr, enum_index(f.enum_ops->names(), name, f.path));
        } catch (const Error& e) {
          fail_at(n.source(), e.what());
        }
        return;
      }
      case FieldKind::string_list: {
        std::vector<std::string> v;
        for (const auto& el : get_array(f, n)) v.push_back(get_string(f, el));
        *static_cast<std::vector<std::string>*>(f.ptr) = std::move(v);
        return;
      }
      case FieldKind::i64_list: {
        std::vector<int64_t> v;
        for (const auto& el : get_array(f, n)) v.push_back(get_int(f, el));
        *static_cast<std::vector<int64_t>*>(f.ptr) = std::move(v);
        return;
      }
      case FieldKind::f64_list: {
        std::vector<double> v;
        for (const auto& el : get_array(f, n)) v.push_back(get_double(f, el));
        *static_cast<std::vector<double>*>(f.ptr) = std::move(v);
        return;
      }
    }
  }

  void apply(const toml::table& tbl, const std::string& prefix) const {
    for (auto&& [key, node] : tbl) {
      std::string path = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
      if (const FieldRef* f = table.find(path)) {
        set(*f, node);
      } else if (table.find_section(path)) {
        if (!node.is_table())
          fail_at(key.source(), fmt::format("'{}' is a section; expected a table, got {}", path, toml_type_name(node)));
        apply(*node.as_table(), path);
      } else {
        fail_at(key.source(), node.is_table() ? unknown_section_message(table, path) : unknown_key_message(table, path));
      }
    }
  }
};

// toml++ 3.3.0 (Debian 12's libtomlplusplus3) reaches __builtin_unreachable() in
// impl::is_non_ascii_horizontal_whitespace for most code points in U+00A1..U+049A
// (the Cyrillic 'Г' of `nГ = 1`, say): undefined behaviour, fixed upstream in 3.4.0.
// It asks that question of a non-ASCII character in many places (wherever whitespace
// may stand, inside a bad value token that it scans to its end, after a backslash in a
// """ string), and which places depends on how its parser reads a broken document. So
// toml++ is only ever given ASCII text, made from the document as follows:
//   - outside strings and comments (where TOML 1.0 allows no non-ASCII character), a
//     non-ASCII character is refused: its 1-based line and column are returned;
//   - in a comment it becomes '?';
//   - in a basic string ("..." or """...""") it becomes the escape \uXXXX or
//     \UXXXXXXXX, the same string; right after a backslash (an invalid escape) it is
//     refused;
//   - a literal string ('...' or '''...''') that holds one becomes the basic string of
//     the same text (its backslashes and quotes escaped).
// Where this scan's idea of a string differs from toml++'s (only in a document that is
// not valid TOML), toml++ still sees ASCII and reports a syntax error. Lines keep their
// numbers; a column after a rewritten character on the same line counts the ASCII text.
// Bytes that are not UTF-8 are refused, as TOML requires.
struct AsciiToml {
  std::string text;  // the ASCII document, when line == 0
  size_t line = 0, col = 0;
  bool bad_utf8 = false;
};

AsciiToml ascii_toml(std::string_view t) {
  enum State { normal, comment, basic, literal, ml_basic, ml_literal } st = normal;
  AsciiToml r;
  std::string& out = r.text;
  out.reserve(t.size());
  size_t line = 1, line_start = 0;
  // The last character outside strings and comments other than space, tab and CR
  // ('\n' at a line start). A quote opens a string only where TOML lets one begin: at
  // a line start or after = [ , { or a dot; elsewhere it is a character of a bad token.
  char last = '\n';
  auto run = [&](size_t i, char q) {  // length of a run of quote q at i (up to 5)
    size_t k = 0;
    while (i + k < t.size() && t[i + k] == q && k < 5) ++k;
    return k;
  };
  auto refuse = [&](size_t i, bool utf8) {
    r.line = line;
    r.col = i - line_start + 1;
    r.bad_utf8 = utf8;
    r.text.clear();
    return r;
  };
  // The code point of the UTF-8 sequence at i, advancing i to its last byte; -1 when
  // the bytes there are not UTF-8 (overlong forms and surrogates included).
  auto code_point = [&](size_t& i) -> long {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    int n = -1;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) n = 2;
    else if (c >= 0xF0 && c <= 0xF4) n = 3;
    if (n < 0 || i + n >= t.size()) return -1;
    long cp = c & (0x3F >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(t[i + k]);
      if ((d & 0xC0) != 0x80) return -1;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr long kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    i += n;
    return cp;
  };
  // Whether the literal string whose body starts at i (ended by ' or the line's end, or
  // by ''' for a multi-line one) holds a non-ASCII byte.
  auto literal_has_non_ascii = [&](size_t i, bool multi) {
    for (; i < t.size(); ++i) {
      if (static_cast<unsigned char>(t[i]) >= 0x80) return true;
      if (!multi && (t[i] == '\'' || t[i] == '\n')) return false;
      if (multi && t[i] == '\'' && run(i, '\'') >= 3) return false;
    }
    return false;
  };
  bool rewrite_literal = false;  // the open literal string is written as a basic one
  for (size_t i = 0; i < t.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      if (st == comment || st == basic || st == literal) st = normal;
      if (st == normal) last = '\n';
      out += '\n';
      continue;
    }
    if (c >= 0x80) {
      const size_t at = i;
      const long cp = code_point(i);
      if (cp < 0) return refuse(at, true);
      if (st == normal) return refuse(at, false);
      if (st == comment) out += '?';
      else out += cp > 0xFFFF ? fmt::format("\\U{:08X}", cp) : fmt::format("\\u{:04X}", cp);
      continue;
    }
    switch (st) {
      case normal: {
        const bool string_may_open = last == '\n' || last == '=' || last == '[' || last == ',' || last == '{' ||
                                     last == '.';
        if (c != ' ' && c != '\t' && c != '\r') last = static_cast<char>(c);
        if (c == '#') {
          st = comment;
          out += '#';
        } else if ((c == '"' || c == '\'') && string_may_open && run(i, static_cast<char>(c)) == 2) {
          out.append(2, static_cast<char>(c));  // "" or '': an empty string
          ++i;
        } else if (c == '"' && string_may_open) {
          const bool multi = run(i, '"') >= 3;
          st = multi ? ml_basic : basic;
          out.append(multi ? 3 : 1, '"');
          i += multi ? 2 : 0;
        } else if (c == '\'' && string_may_open) {
          const bool multi = run(i, '\'') >= 3;
          st = multi ? ml_literal : literal;
          i += multi ? 2 : 0;
          rewrite_literal = literal_has_non_ascii(i + 1, multi);
          out.append(multi ? 3 : 1, rewrite_literal ? '"' : '\'');
        } else {
          out += static_cast<char>(c);  // a quote here is a character of a bad token
        }
        break;
      }
      case comment: out += static_cast<char>(c); break;
      case basic:
      case ml_basic:
        if (c == '\\') {
          // An escape. The character after the backslash (and, in a """ string, after
          // the spaces that may follow it) must not be non-ASCII: \é is no escape.
          size_t j = i + 1;
          if (st == ml_basic)
            while (j < t.size() && (t[j] == ' ' || t[j] == '\t' || t[j] == '\r')) ++j;
          if (j < t.size() && static_cast<unsigned char>(t[j]) >= 0x80) return refuse(j, false);
          out += '\\';
          if (i + 1 < t.size() && t[i + 1] != '\n') out += t[++i];  // the escaped character
        } else if (c == '"' && st == basic) {
          out += '"';
          st = normal;
        } else if (c == '"' && run(i, '"') >= 3) {
          const size_t k = run(i, '"');  // the closing quotes end the run (""""" = two quotes + close)
          out.append(k, '"');
          i += k - 1;
          st = normal;
        } else {
          out += static_cast<char>(c);
        }
        break;
      case literal:
      case ml_literal:
        if (c == '\'' && (st == literal || run(i, '\'') >= 3)) {
          const size_t k = st == literal ? 1 : run(i, '\'');
          if (rewrite_literal) out.append(k - (st == literal ? 1 : 3), '\'').append(st == literal ? 1 : 3, '"');
          else out.append(k, '\'');
          i += k - 1;
          st = normal;
        } else if (rewrite_literal && (c == '\\' || c == '"')) {
          out += '\\';
          out += static_cast<char>(c);
        } else {
          out += static_cast<char>(c);
        }
        break;
    }
  }
  return r;
}

}  // namespace

void apply_toml_text(const FieldTable& table, std::string_view text, const std::string& source) {
  const AsciiToml ascii = ascii_toml(text);
  if (ascii.line != 0 && ascii.bad_utf8)
    fail("{}:{}:{}: TOML syntax error: bytes that are not UTF-8", source, ascii.line, ascii.col);
  if (ascii.line != 0)
    fail("{}:{}:{}: TOML syntax error: a non-ASCII character where whitespace or a key may stand (allowed only "
         "inside strings and comments, and not after a backslash in a string)", source, ascii.line, ascii.col);
  toml::table doc;
  try {
    doc = toml::parse(ascii.text, source);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: TOML syntax error: {}", source, e.source().begin.line, e.source().begin.column,
         excerpt(e.description(), 120));
  }
  TomlApplier{table, source}.apply(doc, "");
}

void apply_toml_file(const FieldTable& table, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("cannot read config file '{}': is a directory (a TOML file is expected)", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read config file '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  apply_toml_text(table, ss.str(), path);
}

void write_file_atomic(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path();
  std::error_code ec;
  if (!dir.empty()) {
    fs::create_directories(dir, ec);
    if (ec) fail("write_file_atomic: cannot create directory '{}': {}", dir.string(), ec.message());
  }
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("write_file_atomic: cannot create '{}': {}", tmp, std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("write_file_atomic: write to '{}' failed: {}", tmp, std::strerror(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("write_file_atomic: fsync/close of '{}' failed: {}", tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("write_file_atomic: rename '{}' -> '{}' failed: {}", tmp, path, std::strerror(err));
  }
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace titan::config
