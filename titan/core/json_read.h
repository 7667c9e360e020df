// Reading untrusted JSON (config.json, safetensors headers and indexes, JSONL
// lines): an iterative parse with a nesting bound, and short excerpts for error
// messages.
//
// nlohmann::json parses iteratively, but copying, comparing and dumping a value
// recurse once per nesting level, so a document nested 100k deep (`[[[[...]]]]`)
// overflows the stack in any of them. parse_json refuses such documents before a
// DOM exists: every value it returns is at most `max_depth` containers deep.
#pragma once
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace titan {

// Deepest container nesting parse_json accepts by default. The deepest file titan
// reads (tokenizer.json's pre_tokenizer/normalizer sequences) nests < 10 deep.
inline constexpr size_t kJsonMaxDepth = 64;

struct JsonLimits {
  size_t max_depth = kJsonMaxDepth;  // containers; the root object or array is depth 1
  // Refuse an object that repeats a key ("duplicate key 'x'"); off: the last one
  // wins, as in Python's json module and nlohmann.
  bool reject_duplicate_keys = false;
};

// Parses `text` (one JSON value, strict: nothing but whitespace after it). Throws
// titan::Error "<where>: malformed JSON: <nlohmann's reason, cut short>", "<where>:
// JSON nested deeper than N levels at byte B" or "<where>: duplicate key 'k'".
nlohmann::json parse_json(std::string_view text, const std::string& where, const JsonLimits& limits = {});

// Streams the members of a top-level JSON object: `member(key, value)` is called
// once per member, in file order, and the object itself is never built (memory
// stays that of one member). Same errors as parse_json, plus "<where>: expected a
// JSON object" when the root is not one. With reject_duplicate_keys, duplicate
// top-level keys are the caller's to detect (the keys are not kept here).
void parse_json_members(std::string_view text, const std::string& where, const JsonLimits& limits,
                        const std::function<void(std::string&& key, nlohmann::json&& value)>& member);

// At most `max_chars` bytes of `s` for an error message (cut at a UTF-8 character
// boundary, then "... (N bytes)"); control characters are shown as '?'.
std::string excerpt(std::string_view s, size_t max_chars = 40);

// excerpt() of v.dump(). Safe for any value parse_json returned (bounded depth);
// a value nested deeper than 2 x kJsonMaxDepth is shown as "<nested too deep>".
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 40);

}  // namespace titan
