#include "titan/config/resolve.h"

#include <cstdlib>
#include <filesystem>

#include "titan/config/field_text.h"
#include "titan/config/recipes.h"
#include "titan/config/toml_io.h"
#include "titan/config/transforms.h"
#include "titan/core/error.h"

namespace titan::config {

namespace {
std::string_view strip_dashes(std::string_view s) {
  if (s.substr(0, 2) == "--") s.remove_prefix(2);
  return s;
}
}  // namespace

void apply_override(JobConfig& c, std::string_view text) {
  std::string_view s = strip_dashes(text);
  size_t eq = s.find('=');
  TITAN_CHECK(eq != std::string_view::npos && eq > 0, "override '{}' must look like section.field=value", text);
  set_field(reflect(c), s.substr(0, eq), s.substr(eq + 1));
}

std::vector<std::string> overrides_from_args(const std::vector<std::string>& args) {
  JobConfig probe;
  const FieldTable table = reflect(probe);
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    TITAN_CHECK(a.size() > 2 && a.compare(0, 2, "--") == 0,
                "unexpected argument '{}' (overrides look like --section.field=value)", a);
    std::string_view key = std::string_view(a).substr(2);
    if (key.find('=') != std::string_view::npos) {
      out.emplace_back(key);
      continue;
    }
    const FieldRef* f = table.find(key);
    if (!f) set_field(table, key, "");  // throws: unknown key or section, with a suggestion
    const bool has_next = i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0;
    if (f->kind == FieldKind::boolean) {
      const bool next_is_bool = has_next && (args[i + 1] == "true" || args[i + 1] == "false" ||
                                             args[i + 1] == "1" || args[i + 1] == "0");
      out.push_back(std::string(key) + "=" + (next_is_bool ? args[++i] : std::string("true")));
      continue;
    }
    TITAN_CHECK(has_next, "override '{}' needs a value ({} expected)", a, describe_field_type(*f));
    out.push_back(std::string(key) + "=" + args[++i]);
  }
  return out;
}

JobConfig resolve_config(const std::string& recipe, const std::optional<std::string>& toml_path,
                         const std::vector<std::string>& overrides) {
  JobConfig c = make_recipe(recipe);
  if (toml_path) apply_toml_file(c, *toml_path);
  for (const auto& o : overrides) {
    // model.flavor records the preset the shape fields came from; it builds nothing, so a
    // command line that sets it to another name would record a model that is not built.
    const std::string flavor = c.model.flavor;
    apply_override(c, o);
    TITAN_CHECK(c.model.flavor == flavor,
                "model.flavor='{}': the flavor names the preset this recipe's shape fields came from ('{}') and "
                "selects no model; choose a preset with --recipe (titan train --list-recipes) or set the shape "
                "fields (model.dim, model.n_layers, ...)", c.model.flavor, flavor);
  }
  apply_transforms(c);
  validate(c);
  return c;
}

std::string config_to_toml(const JobConfig& c) {
  return to_toml(c,
                 "titan.cpp job config, resolved (recipe, then TOML, then command line, then transforms).\n"
                 "Every field is listed; run it again with: titan train --config <this file>");
}

std::string save_config(const JobConfig& c) {
  TITAN_CHECK(!c.job.dump_folder.empty(), "save_config: job.dump_folder is empty");
  std::string path = (std::filesystem::path(c.job.dump_folder) / "config.toml").string();
  write_file_atomic(path, config_to_toml(c));
  return path;
}

std::string shared_data_dir() {
  if (const char* d = std::getenv("TITAN_DATA"); d && *d) return d;
  if (const char* s = std::getenv("TITAN_SHARED"); s && *s) return std::string(s) + "/data";
#ifdef TITAN_SOURCE_DIR
  return std::string(TITAN_SOURCE_DIR) + "/data";
#else
  return "data";
#endif
}

std::string resolve_data_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).is_absolute()) return path;
  std::error_code ec;
  if (fs::exists(path, ec)) return path;
#ifdef TITAN_SOURCE_DIR
  // Files that ship in the repository (recipes/*.json), from any working directory.
  if (const fs::path in_repo = fs::path(TITAN_SOURCE_DIR) / path; fs::exists(in_repo, ec))
    return in_repo.lexically_normal().string();
#endif
  return (fs::path(shared_data_dir()) / path).lexically_normal().string();
}

}  // namespace titan::config
