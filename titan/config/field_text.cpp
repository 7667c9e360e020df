#include "titan/config/field_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>

#include "titan/core/error.h"

namespace titan::config {

namespace detail {
std::vector<std::string> split_enum_names(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\n')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\n')) item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}
}  // namespace detail

const FieldRef* FieldTable::find(std::string_view path) const {
  for (const auto& f : fields)
    if (f.path == path) return &f;
  return nullptr;
}

const SectionRef* FieldTable::find_section(std::string_view path) const {
  for (const auto& s : sections)
    if (s.path == path) return &s;
  return nullptr;
}

int enum_index(const std::vector<std::string>& names, std::string_view name, std::string_view what) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  fail("bad value for '{}': '{}' is not one of: {}", what, name, fmt::join(names, ", "));
}

std::string describe_field_type(const FieldRef& f) {
  switch (f.kind) {
    case FieldKind::boolean: return "a boolean (true|false)";
    case FieldKind::i32: return "a 32-bit integer";
    case FieldKind::i64: return "an integer";
    case FieldKind::f64: return "a number";
    case FieldKind::string: return "a string";
    case FieldKind::enumeration: return fmt::format("one of: {}", fmt::join(f.enum_ops->names(), ", "));
    case FieldKind::string_list: return "a comma-separated list of strings";
    case FieldKind::i64_list: return "a comma-separated list of integers";
    case FieldKind::f64_list: return "a comma-separated list of numbers";
  }
  return "?";
}

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04X}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

namespace {

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);  // shortest round-trip form
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

template <class T, class F>
std::string format_list(const std::vector<T>& xs, F&& one) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i) out += ", ";
    out += one(xs[i]);
  }
  return out + "]";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_i64(std::string_view s, int64_t& out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_f64(std::string_view s, double& out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// "a, b" or "[a, b]" -> {"a", "b"}; "" or "[]" -> {}. Elements are trimmed.
std::vector<std::string_view> split_list(std::string_view s) {
  s = trim(s);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = trim(s.substr(1, s.size() - 2));
  std::vector<std::string_view> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(',', start);
    out.push_back(trim(s.substr(start, end == std::string_view::npos ? end : end - start)));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

[[noreturn]] void bad_value(const FieldRef& f, std::string_view text) {
  fail("bad value for '{}': expected {}, got '{}'", f.path, describe_field_type(f), text);
}

}  // namespace

std::string format_toml_value(const FieldRef& f) {
  switch (f.kind) {
    case FieldKind::boolean: return *static_cast<const bool*>(f.ptr) ? "true" : "false";
    case FieldKind::i32: return fmt::format("{}", *static_cast<const int*>(f.ptr));
    case FieldKind::i64: return fmt::format("{}", *static_cast<const int64_t*>(f.ptr));
    case FieldKind::f64: return format_double(*static_cast<const double*>(f.ptr));
    case FieldKind::string: return toml_quote(*static_cast<const std::string*>(f.ptr));
    case FieldKind::enumeration: return toml_quote(f.enum_ops->names().at(f.enum_ops->get(f.ptr)));
    case FieldKind::string_list:
      return format_list(*static_cast<const std::vector<std::string>*>(f.ptr), toml_quote);
    case FieldKind::i64_list:
      return format_list(*static_cast<const std::vector<int64_t>*>(f.ptr),
                         [](int64_t x) { return fmt::format("{}", x); });
    case FieldKind::f64_list:
      return format_list(*static_cast<const std::vector<double>*>(f.ptr), format_double);
  }
  return "?";
}

void parse_field_value(const FieldRef& f, std::string_view text) {
  switch (f.kind) {
    case FieldKind::boolean: {
      std::string_view t = trim(text);
      bool v;
      if (t == "true" || t == "1") v = true;
      else if (t == "false" || t == "0") v = false;
      else bad_value(f, text);
      *static_cast<bool*>(f.ptr) = v;
      return;
    }
    case FieldKind::i32: {
      int64_t v;
      if (!parse_i64(text, v) || v < INT_MIN || v > INT_MAX) bad_value(f, text);
      *static_cast<int*>(f.ptr) = static_cast<int>(v);
      return;
    }
    case FieldKind::i64: {
      int64_t v;
      if (!parse_i64(text, v)) bad_value(f, text);
      *static_cast<int64_t*>(f.ptr) = v;
      return;
    }
    case FieldKind::f64: {
      double v;
      if (!parse_f64(text, v)) bad_value(f, text);
      *static_cast<double*>(f.ptr) = v;
      return;
    }
    case FieldKind::string: *static_cast<std::string*>(f.ptr) = std::string(text); return;
    case FieldKind::enumeration:
      f.enum_ops->set(f.ptr, enum_index(f.enum_ops->names(), trim(text), f.path));
      return;
    case FieldKind::string_list: {
      std::vector<std::string> v;
      for (auto item : split_list(text)) {
        // TOML's spelling, ["a", "b"], as well as a,b: one pair of matching quotes is dropped.
        if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') && item.back() == item.front())
          item = item.substr(1, item.size() - 2);
        if (item.empty()) bad_value(f, text);
        v.emplace_back(item);
      }
      *static_cast<std::vector<std::string>*>(f.ptr) = std::move(v);
      return;
    }
    case FieldKind::i64_list: {
      std::vector<int64_t> v;
      for (auto item : split_list(text)) {
        int64_t x;
        if (!parse_i64(item, x)) bad_value(f, text);
        v.push_back(x);
      }
      *static_cast<std::vector<int64_t>*>(f.ptr) = std::move(v);
      return;
    }
    case FieldKind::f64_list: {
      std::vector<double> v;
      for (auto item : split_list(text)) {
        double x;
        if (!parse_f64(item, x)) bad_value(f, text);
        v.push_back(x);
      }
      *static_cast<std::vector<double>*>(f.ptr) = std::move(v);
      return;
    }
  }
}

void set_field(const FieldTable& table, std::string_view path, std::string_view text) {
  if (const FieldRef* f = table.find(path)) return parse_field_value(*f, text);
  if (const SectionRef* s = table.find_section(path)) {
    std::string example;
    for (const auto& f : table.fields)
      if (f.path.size() > s->path.size() && f.path.compare(0, s->path.size() + 1, s->path + ".") == 0) {
        example = f.path;
        break;
      }
    fail("'{}' is a section, not a field (set a field such as '{}')", path, example);
  }
  fail("{}", unknown_key_message(table, path));
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string nearest_key(const std::vector<std::string>& candidates, std::string_view key) {
  std::string best;
  size_t best_d = SIZE_MAX;
  const bool bare = key.find('.') == std::string_view::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(key, c);
    if (bare) {
      size_t dot = c.rfind('.');
      if (dot != std::string::npos)
        d = std::min(d, edit_distance(key, std::string_view(c).substr(dot + 1)) + 1);
    }
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best_d <= std::max<size_t>(2, key.size() / 2) ? best : std::string();
}

std::vector<std::string> field_paths(const FieldTable& table) {
  std::vector<std::string> out;
  out.reserve(table.fields.size());
  for (const auto& f : table.fields) out.push_back(f.path);
  return out;
}

std::string unknown_key_message(const FieldTable& table, std::string_view key) {
  std::string near = nearest_key(field_paths(table), key);
  if (near.empty()) return fmt::format("unknown key '{}' (no similar key; titan train --print-config lists all)", key);
  return fmt::format("unknown key '{}' (did you mean '{}'?)", key, near);
}

std::string unknown_section_message(const FieldTable& table, std::string_view key) {
  std::vector<std::string> names;
  for (const auto& s : table.sections) names.push_back(s.path);
  std::string near = nearest_key(names, key);
  if (near.empty()) return fmt::format("unknown section '{}'", key);
  return fmt::format("unknown section '{}' (did you mean '{}'?)", key, near);
}

}  // namespace titan::config
