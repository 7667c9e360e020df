#include "titan/core/json_read.h"

#include <vector>

#include "titan/core/error.h"

namespace titan {

namespace {

using json = nlohmann::json;

// Builds a DOM as nlohmann's own parser does, bounding the nesting and optionally
// refusing repeated keys. In streaming mode the root object is not built: each of
// its members is handed to `member_` once complete.
class BoundedSax final : public nlohmann::json_sax<json> {
 public:
  BoundedSax(const std::string& where, const JsonLimits& limits,
             const std::function<void(std::string&&, json&&)>* member)
      : where_(where), limits_(limits), member_(member) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t& v) override { return value(json(v)); }
  bool string(string_t& v) override { return value(json(std::move(v))); }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    if (limits_.reject_duplicate_keys && !streaming_root() && stack_.back()->contains(k))
      fail("{}: duplicate key '{}'", where_, excerpt(k, 64));
    keys_.back() = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

  const std::string& error() const { return error_; }
  json& root() { return root_; }
  bool saw_root() const { return saw_root_; }
  bool root_not_object() const { return root_not_object_; }

 private:
  // True while the (unbuilt) root object of streaming mode is the innermost container.
  bool streaming_root() const { return member_ && stack_.size() == 1; }

  bool open(json&& empty) {
    if (depth_ >= limits_.max_depth) fail("{}: JSON nested deeper than {} levels", where_, limits_.max_depth);
    if (member_ && depth_ == 0) {
      if (!empty.is_object()) {
        root_not_object_ = true;
        return false;
      }
      saw_root_ = true;
      ++depth_;
      stack_.push_back(&root_);  // the root object's frame (members are streamed, not stored)
      keys_.emplace_back();
      return true;
    }
    json* slot = place(std::move(empty));
    ++depth_;
    stack_.push_back(slot);
    keys_.emplace_back();
    return true;
  }
  bool close() {
    --depth_;
    stack_.pop_back();
    keys_.pop_back();
    if (member_ && depth_ == 1) emit();
    return true;
  }
  bool value(json&& v) {
    if (member_ && depth_ == 0) {
      root_not_object_ = true;
      return false;
    }
    place(std::move(v));
    if (member_ && depth_ == 1) emit();
    return true;
  }
  // Puts v where the parser is: the root, the end of the open array, or the open
  // object's current key (in streaming mode at depth 1: the pending member).
  json* place(json&& v) {
    if (stack_.empty()) {
      saw_root_ = true;
      root_ = std::move(v);
      return &root_;
    }
    if (streaming_root()) {
      pending_ = std::move(v);
      return &pending_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[keys_.back()];
    slot = std::move(v);
    return &slot;
  }
  void emit() {
    (*member_)(std::move(keys_.back()), std::move(pending_));
    pending_ = json();
  }

  const std::string& where_;
  const JsonLimits& limits_;
  const std::function<void(std::string&&, json&&)>* member_;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // the current key of each open container
  size_t depth_ = 0;
  json root_, pending_;
  bool saw_root_ = false, root_not_object_ = false;
  std::string error_;
};

void run(std::string_view text, const std::string& where, BoundedSax& sax) {
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, /*strict=*/true);
  if (sax.root_not_object()) fail("{}: expected a JSON object", where);
  if (!ok || !sax.saw_root()) {
    // nlohmann's message ends with the last token read, which can be the whole input.
    fail("{}: malformed JSON: {}", where, excerpt(sax.error().empty() ? "empty input" : sax.error(), 160));
  }
}

}  // namespace

json parse_json(std::string_view text, const std::string& where, const JsonLimits& limits) {
  BoundedSax sax(where, limits, nullptr);
  run(text, where, sax);
  return std::move(sax.root());
}

void parse_json_members(std::string_view text, const std::string& where, const JsonLimits& limits,
                        const std::function<void(std::string&&, json&&)>& member) {
  BoundedSax sax(where, limits, &member);
  run(text, where, sax);
}

std::string excerpt(std::string_view s, size_t max_chars) {
  size_t n = s.size();
  if (n > max_chars) {
    n = max_chars;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a character
  }
  std::string out(s.substr(0, n));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  if (n < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string json_excerpt(const json& v, size_t max_chars) {
  // Depth first, iteratively: dump() recurses once per level.
  std::vector<std::pair<const json*, size_t>> todo{{&v, 1}};
  while (!todo.empty()) {
    auto [x, d] = todo.back();
    todo.pop_back();
    if (d > 2 * kJsonMaxDepth) return "<nested too deep>";
    if (x->is_structured())
      for (const json& c : *x) todo.push_back({&c, d + 1});
  }
  return excerpt(v.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

}  // namespace titan
