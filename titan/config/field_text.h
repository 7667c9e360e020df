// Text forms of reflected config fields: parsing command-line values, formatting
// TOML literals, setting a field by dotted path, and "did you mean" suggestions.
//
// Command-line value syntax per field type:
//   bool           true | false | 1 | 0
//   int, int64     decimal integer, optional sign ("100", "-1"); int is range-checked
//   double         decimal or exponent form, inf, nan ("1e-3", "0.5")
//   string         taken verbatim
//   enum           one of the enum's names, exactly ("cosine")
//   lists          comma-separated, optional [ ] around ("a,b", "[1, 2]", "" = empty)
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "titan/config/reflect.h"

namespace titan::config {

// What a field accepts, for messages: "an integer", "a boolean (true|false)",
// "one of: cosine, linear, wsd, constant", "a comma-separated list of numbers", ...
std::string describe_field_type(const FieldRef& f);

// The field's current value as a TOML literal: 100, 0.001, 1.0, "text", ["a", "b"].
// Doubles use the shortest text that reads back to the same bits.
std::string format_toml_value(const FieldRef& f);

// A TOML basic string literal with escapes: "a\"b\n".
std::string toml_quote(std::string_view s);

// Parses `text` with the command-line syntax above and stores it in the field.
// Throws titan::Error "bad value for '<path>': expected <type>, got '<text>'".
void parse_field_value(const FieldRef& f, std::string_view text);

// Sets the field at dotted `path` from command-line text. Throws titan::Error for
// an unknown path (with the nearest valid key), a section path, or a bad value.
void set_field(const FieldTable& table, std::string_view path, std::string_view text);

// "unknown key 'training.step' (did you mean 'training.steps'?)".
std::string unknown_key_message(const FieldTable& table, std::string_view key);
// "unknown section 'trainig' (did you mean 'training'?)".
std::string unknown_section_message(const FieldTable& table, std::string_view key);

// Levenshtein distance (insert, delete, substitute each cost 1), bytewise.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `key` by edit distance (first one on ties). A key
// without a dot is also compared with each candidate's last component (+1), so
// "steps" suggests "training.steps". Empty when no candidate is within
// max(2, |key| / 2) edits (an unrelated name gets no suggestion).
std::string nearest_key(const std::vector<std::string>& candidates, std::string_view key);

// All leaf field paths of `table`, in declaration order.
std::vector<std::string> field_paths(const FieldTable& table);

}  // namespace titan::config
