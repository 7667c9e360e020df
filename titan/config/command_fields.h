// Which job-config fields each command reads. A field that a command does not read
// is refused when a run of that command sets it (DESIGN.md: no silent knobs): one
// line naming the field, its value and the command, instead of a run that silently
// ignores it. "Sets" means: differs from the recipe the run starts from and from the
// field's default (a recipe may carry fields for the other command, e.g.
// alphabet_sort_grpo keeps the SFT's data fields; a TOML written by --print-config
// lists every field, with its recipe's or the default value).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "titan/config/job_config.h"

namespace titan::config {

// The field paths (or "section." prefixes) that `command` ("train" | "rl") does not
// read for config `c` (some depend on c, e.g. rl.init_from makes the model shape
// come from the export). Empty for other commands.
std::vector<std::string> unused_fields(const JobConfig& c, std::string_view command);

// Throws titan::Error "training.seq_len=128 is not used by titan rl (...); remove it"
// for the first field of unused_fields(c, command) whose value differs from both
// `recipe`'s and the default JobConfig's.
// `overridden`: the keys given on the command line ("section.field"), refused when
// unused whatever their value.
void refuse_unused_fields(const JobConfig& c, const JobConfig& recipe, std::string_view command,
                          const std::vector<std::string>& overridden = {});

}  // namespace titan::config
