// TOML reading and writing of reflected config structs (toml++), and atomic file
// writes. A printed config lists every field with its doc as a trailing comment;
// reading it back into a default-constructed struct gives an equal struct.
#pragma once
#include <string>
#include <string_view>

#include "titan/config/reflect.h"

namespace titan::config {

// Every section as a [table] preceded by its doc, every field as
// `key = value  # doc`. `header` (may be multi-line) is emitted as comment lines.
std::string format_toml(const FieldTable& table, std::string_view header = {});

// Sets the fields named in TOML document `text` (tables = sections, dotted keys
// allowed). Fields not mentioned keep their values. `source` names the document in
// errors, which are one line "source:line: ...": unknown key or section (with the
// nearest valid one), a value of the wrong TOML type, a bad enum name, or a TOML
// syntax error. An integer is accepted for a double field.
void apply_toml_text(const FieldTable& table, std::string_view text, const std::string& source);

// apply_toml_text on the contents of file `path`; throws titan::Error if it cannot
// be read.
void apply_toml_file(const FieldTable& table, const std::string& path);

// Writes `content` to `path` so that a crash leaves either the old file or the new
// one: write `path`.tmp.<pid>, flush, fsync, rename over `path`, fsync the
// directory. Creates missing parent directories. Throws titan::Error on failure.
void write_file_atomic(const std::string& path, std::string_view content);

// Typed conveniences over any TITAN_CONFIG_BODY struct.
template <ConfigStruct C>
std::string to_toml(const C& c, std::string_view header = {}) {
  return format_toml(reflect(const_cast<C&>(c)), header);  // read-only use
}
template <ConfigStruct C>
void apply_toml_text(C& c, std::string_view text, const std::string& source) {
  apply_toml_text(reflect(c), text, source);
}
template <ConfigStruct C>
void apply_toml_file(C& c, const std::string& path) {
  apply_toml_file(reflect(c), path);
}

}  // namespace titan::config
