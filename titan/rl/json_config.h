// Reading a task's JSON config object into typed fields, with errors that name the
// config and the key (wrong type, unknown key). Used by the task configs'
// from_json.
//
//   JsonConfigReader r(j, "gsm8k config");
//   r.read("seed", cfg.seed);      // absent: keeps the default
//   r.finish();                    // titan::Error listing unknown keys
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "titan/core/error.h"

namespace titan::rl {

class JsonConfigReader {
 public:
  // j must be an object or null (= empty); titan::Error otherwise.
  JsonConfigReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    TITAN_CHECK(j_.is_null() || j_.is_object(), "{}: expected a JSON object, got {}", what_, j_.type_name());
  }

  template <class T>
  void read(const char* key, T& out) {
    seen_.insert(key);
    if (j_.is_null() || !j_.contains(key)) return;
    const nlohmann::json& v = j_[key];
    if constexpr (std::is_same_v<T, bool>) {
      TITAN_CHECK(v.is_boolean(), "{}: '{}' must be a boolean, got {}", what_, key, v.dump());
    } else if constexpr (std::is_integral_v<T>) {
      TITAN_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", what_, key, v.dump());
      if constexpr (std::is_unsigned_v<T>)
        TITAN_CHECK(v.is_number_unsigned() || v.get<int64_t>() >= 0, "{}: '{}' must be >= 0, got {}", what_, key,
                    v.dump());
    } else if constexpr (std::is_floating_point_v<T>) {
      TITAN_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", what_, key, v.dump());
    } else if constexpr (std::is_same_v<T, std::string>) {
      TITAN_CHECK(v.is_string(), "{}: '{}' must be a string, got {}", what_, key, v.dump());
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      bool ok = v.is_array();
      for (const nlohmann::json& e : v) ok = ok && e.is_string();
      TITAN_CHECK(ok, "{}: '{}' must be an array of strings, got {}", what_, key, v.dump());
    }
    out = v.get<T>();
  }

  // Marks key as known without reading it (it is read elsewhere).
  void skip(const char* key) { seen_.insert(key); }

  // Throws titan::Error naming the first key that no read() asked for.
  void finish() const {
    if (j_.is_null()) return;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      TITAN_CHECK(seen_.count(it.key()), "{}: unknown key '{}'", what_, it.key());
  }

 private:
  const nlohmann::json& j_;
  std::string what_;
  std::set<std::string> seen_;
};

}  // namespace titan::rl
