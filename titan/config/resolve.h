// The entry point the train / RL commands call: recipe -> TOML file -> command-line
// overrides -> model transforms -> validate (later steps win). Also: turning
// command-line arguments into overrides, printing and saving the resolved config,
// and locating input data.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/config/job_config.h"

namespace titan::config {

// The resolved config of `recipe`, then the TOML file (if given), then each
// override "section.field=value" (a leading "--" is allowed) in order, then
// model.transforms, then validate(). Throws titan::Error with one line naming the
// recipe, key (and file:line for TOML) and, for unknown names, the nearest valid one.
JobConfig resolve_config(const std::string& recipe, const std::optional<std::string>& toml_path,
                         const std::vector<std::string>& overrides);

// Applies one "section.field=value" override (leading "--" allowed) with the
// command-line value syntax of titan/config/field_text.h.
void apply_override(JobConfig& c, std::string_view override_text);

// Command-line arguments -> overrides for resolve_config. Accepts
// "--a.b=v", "--a.b v" and, for boolean fields, a bare "--a.b" (= true). A value
// beginning with "--" must use the "=" form. Throws titan::Error for an argument
// that is not an override or names an unknown key.
std::vector<std::string> overrides_from_args(const std::vector<std::string>& args);

// The config as TOML with every field's doc, preceded by a comment header; reading
// it back with resolve_config(any recipe, file, {}) gives the same config.
std::string config_to_toml(const JobConfig& c);

// Writes config_to_toml(c) atomically to <job.dump_folder>/config.toml (creating
// the folder) and returns that path. Throws titan::Error on I/O failure.
std::string save_config(const JobConfig& c);

// The data directory: $TITAN_DATA, else $TITAN_SHARED/data, else the repository's
// own copy, <source dir>/data (tinyshakespeare, qwen3-tokenizer, stories260k, gsm8k,
// mbpp, humaneval; data/README.md names their sources and licenses).
std::string shared_data_dir();

// Input data path lookup: empty and absolute paths are returned as is; a relative
// path that exists from the current directory is returned as is; then one that exists
// in the source tree (the shipped recipes/*.json, in builds that know their source dir);
// otherwise it is taken relative to shared_data_dir() (whether or not that file exists).
std::string resolve_data_path(const std::string& path);

}  // namespace titan::config
