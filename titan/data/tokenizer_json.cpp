#include "titan/data/tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/core/error.h"
#include "titan/core/json_read.h"

namespace titan::data {

using nlohmann::json;

namespace {

// Builds a DOM like nlohmann's own parser, except that the value of
// model.vocab (when an object) and model.merges (when an array) go to flat
// vectors in `out`.
class Sax final : public nlohmann::json_sax<json> {
 public:
  explicit Sax(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t& v) override { return value(json(v)); }
  bool string(string_t& v) override {
    if (mode_ == kMerges) {
      if (depth_ == 1) {  // "a b"
        const size_t sp = v.find(' ');
        if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos) {
          bad(fmt::format("field 'model.merges[{}]' = {} must be \"a b\" (one space)", merges_index_,
                          json_excerpt(json(v))));
        } else {
          out_.merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
        }
        ++merges_index_;
      } else if (depth_ == 2) {
        pair_.push_back(std::move(v));
      } else {
        bad_merge();
      }
      return true;
    }
    return value(json(std::move(v)));
  }

  bool start_object(std::size_t) override {
    nest();
    if (mode_ != kDom) {
      ++depth_;
      if (mode_ == kVocab) bad_vocab();
      if (mode_ == kMerges) bad_merge();
      return true;
    }
    if (at_model_member("vocab")) {
      mode_ = kVocab;
      depth_ = 1;
      out_.has_vocab = true;
      return true;
    }
    return container(json::object());
  }
  bool end_object() override {
    --nesting_;
    if (mode_ != kDom) {
      if (--depth_ == 0) mode_ = kDom;
      return true;
    }
    pop();
    return true;
  }
  bool start_array(std::size_t) override {
    nest();
    if (mode_ != kDom) {
      ++depth_;
      if (mode_ == kVocab) bad_vocab();
      if (mode_ == kMerges && depth_ == 2) pair_.clear();
      if (mode_ == kMerges && depth_ > 2) bad_merge();
      return true;
    }
    if (at_model_member("merges")) {
      mode_ = kMerges;
      depth_ = 1;
      out_.has_merges = true;
      return true;
    }
    return container(json::array());
  }
  bool end_array() override {
    --nesting_;
    if (mode_ != kDom) {
      if (mode_ == kMerges && depth_ == 2) {
        if (pair_.size() == 2)
          out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
        else
          bad_merge();
        ++merges_index_;
      }
      if (--depth_ == 0) mode_ = kDom;
      return true;
    }
    pop();
    return true;
  }
  bool key(string_t& k) override {
    if (mode_ == kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (mode_ == kMerges) return true;
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    parse_error_ = e.what();
    return false;
  }

  const std::string& parse_error_message() const { return parse_error_; }

 private:
  enum Mode { kDom, kVocab, kMerges };

  // The DOM is copied and dumped later, which recurses once per level: bound it.
  void nest() {
    if (++nesting_ > kJsonMaxDepth) fail("JSON nested deeper than {} levels", kJsonMaxDepth);
  }

  bool value(json&& v) {
    if (mode_ == kVocab) {
      if (depth_ == 1 && v.is_number_integer())
        out_.vocab.emplace_back(std::move(vocab_key_), v.get<int64_t>());
      else
        bad_vocab();
      return true;
    }
    if (mode_ == kMerges) {
      bad_merge();
      if (depth_ == 1) ++merges_index_;
      return true;
    }
    place(std::move(v));
    return true;
  }
  json* place(json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool container(json&& empty) {
    const bool under_root_object = stack_.size() == 1 && stack_[0]->is_object();
    const std::string key = key_;
    stack_.push_back(place(std::move(empty)));
    path_.push_back(under_root_object ? key : std::string());
    return true;
  }
  void pop() {
    stack_.pop_back();
    path_.pop_back();
  }
  // True if the value about to start is member `name` of the top-level "model".
  bool at_model_member(const char* name) const {
    return stack_.size() == 2 && path_[1] == "model" && stack_[1]->is_object() && key_ == name;
  }
  void bad(std::string msg) {
    if (out_.error.empty()) out_.error = std::move(msg);
  }
  void bad_vocab() {
    bad(fmt::format("field 'model.vocab' entry {} must map to an integer id", json_excerpt(json(vocab_key_))));
  }
  void bad_merge() {
    bad(fmt::format("field 'model.merges[{}]' must be a pair [a, b] of strings or a string \"a b\"",
                    merges_index_));
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;
  std::vector<std::string> path_;  // key of each open container under the root object
  std::string key_, vocab_key_;
  Mode mode_ = kDom;
  int depth_ = 0;
  size_t merges_index_ = 0, nesting_ = 0;
  std::vector<std::string> pair_;
  std::string parse_error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path) {
  TITAN_CHECK(std::filesystem::is_regular_file(path), "tokenizer: no such file '{}'", path);
  std::ifstream f(path, std::ios::binary);
  TITAN_CHECK(f.good(), "tokenizer: cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  TokenizerJson out;
  Sax sax(out);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true);
  } catch (const Error& e) {
    fail("{}: bad JSON: {}", path, e.what());
  }
  // nlohmann's message ends with the last token read, which can be the whole file.
  if (!ok) fail("{}: bad JSON: {}", path, excerpt(sax.parse_error_message(), 200));
  if (!out.error.empty()) fail("{}: {}", path, out.error);
  return out;
}

}  // namespace titan::data
