// Small reflection for config structs: every field has a type, a default and a
// one-line doc, declared once in an X-macro list. Generic code (TOML printing and
// parsing, dotted-path overrides, "did you mean" suggestions) works on the flat
// FieldTable that reflect() builds from any struct declared this way.
//
// Declaring a section (adding a field is one line in the list):
//
//   #define TITAN_TRAINING_FIELDS(X)  <- each line of the list ends in a backslash
//     X(int64_t, steps, 1000, "number of optimizer steps")
//     X(std::vector<int64_t>, milestones, (std::vector<int64_t>{10, 20}), "...")
//   struct TrainingConfig { TITAN_CONFIG_BODY(TrainingConfig, TITAN_TRAINING_FIELDS) };
//
// X(type, name, default, doc): a default that contains a comma must be wrapped in
// parentheses. A member whose type is itself a config struct becomes a nested
// section (TOML table); its X() default is usually {} and its doc is the section's.
//
// Field types: bool, int, int64_t, double, std::string, enums declared with
// TITAN_CONFIG_ENUM, std::vector<std::string>, std::vector<int64_t>,
// std::vector<double>. Anything else fails to compile with a static_assert.
#pragma once
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace titan::config {

enum class FieldKind : uint8_t { boolean, i32, i64, f64, string, enumeration, string_list, i64_list, f64_list };

// Type-erased access to one enum type's names and values. Enum values are the
// indices 0..n-1 into names() (TITAN_CONFIG_ENUM guarantees this).
struct EnumOps {
  const std::vector<std::string>& (*names)();
  int (*get)(const void* field);
  void (*set)(void* field, int index);
};

// One leaf field of a reflected root. `ptr` points at the member inside the root
// that reflect() was called on; it is valid as long as that root lives.
struct FieldRef {
  std::string path;  // dotted, e.g. "training.steps"
  std::string_view doc;
  FieldKind kind;
  void* ptr;
  const EnumOps* enum_ops = nullptr;  // FieldKind::enumeration only
};

// A nested struct (a TOML table), e.g. "training".
struct SectionRef {
  std::string path;
  std::string_view doc;
};

// All sections and leaf fields of a root, in declaration order (depth first).
struct FieldTable {
  std::vector<SectionRef> sections;
  std::vector<FieldRef> fields;
  const FieldRef* find(std::string_view path) const;          // nullptr if absent
  const SectionRef* find_section(std::string_view path) const;  // nullptr if absent
};

namespace detail {
// "a, b, c" (the stringized enumerator list) -> {"a", "b", "c"}.
std::vector<std::string> split_enum_names(std::string_view list);
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

// An enum declared with TITAN_CONFIG_ENUM (found by ADL through titan_enum_names).
template <class E>
concept ConfigEnum = std::is_enum_v<E> && requires(E e) {
  { titan_enum_names(e) } -> std::same_as<const std::vector<std::string>&>;
};

// A struct declared with TITAN_CONFIG_BODY.
template <class T>
concept ConfigStruct = std::is_class_v<T> && requires(T& t) { t.titan_config_struct_tag(); };

// Index of `name` in `names`; throws titan::Error "bad value for '<what>': '<name>'
// is not one of: a, b, c" when absent.
int enum_index(const std::vector<std::string>& names, std::string_view name, std::string_view what);

// The string name of an enum value, e.g. enum_name(DecayType::cosine) == "cosine".
template <ConfigEnum E>
const std::string& enum_name(E e) {
  return titan_enum_names(e).at(static_cast<size_t>(e));
}
// The enum value named `name`; throws titan::Error listing the valid names.
template <ConfigEnum E>
E enum_from_name(std::string_view name, std::string_view what = "enum") {
  return static_cast<E>(enum_index(titan_enum_names(E{}), name, what));
}

namespace detail {
template <class T>
constexpr FieldKind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return FieldKind::boolean;
  else if constexpr (std::is_same_v<T, int>) return FieldKind::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return FieldKind::i64;
  else if constexpr (std::is_same_v<T, double>) return FieldKind::f64;
  else if constexpr (std::is_same_v<T, std::string>) return FieldKind::string;
  else if constexpr (ConfigEnum<T>) return FieldKind::enumeration;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return FieldKind::string_list;
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return FieldKind::i64_list;
  else if constexpr (std::is_same_v<T, std::vector<double>>) return FieldKind::f64_list;
  else static_assert(always_false<T>, "unsupported config field type (see titan/config/reflect.h)");
}

template <ConfigEnum E>
const EnumOps* enum_ops_for() {
  static const EnumOps ops{
      +[]() -> const std::vector<std::string>& { return titan_enum_names(E{}); },
      +[](const void* p) { return static_cast<int>(*static_cast<const E*>(p)); },
      +[](void* p, int i) { *static_cast<E*>(p) = static_cast<E>(i); }};
  return &ops;
}

struct TableBuilder {
  FieldTable* table;
  std::string prefix;
  template <class T>
  void operator()(const char* name, T& member, const char* doc) {
    std::string path = prefix.empty() ? std::string(name) : prefix + "." + name;
    if constexpr (ConfigStruct<T>) {
      table->sections.push_back({path, doc});
      member.visit_fields(TableBuilder{table, path});
    } else {
      const EnumOps* ops = nullptr;
      if constexpr (ConfigEnum<T>) ops = enum_ops_for<T>();
      table->fields.push_back({std::move(path), doc, kind_of<T>(), &member, ops});
    }
  }
};
}  // namespace detail

// The flat table of `root`'s sections and fields; pointers refer into `root`.
template <ConfigStruct C>
FieldTable reflect(C& root) {
  FieldTable t;
  root.visit_fields(detail::TableBuilder{&t, ""});
  return t;
}

}  // namespace titan::config

// enum class Name : int { a, b, c } plus its names {"a", "b", "c"}. Enumerators
// must not have explicit values (names are indexed by value).
#define TITAN_CONFIG_ENUM(Name, ...)                                                  \
  enum class Name : int { __VA_ARGS__ };                                             \
  inline const std::vector<std::string>& titan_enum_names(Name) {                    \
    static const std::vector<std::string> names =                                    \
        ::titan::config::detail::split_enum_names(#__VA_ARGS__);                     \
    return names;                                                                    \
  }

#define TITAN_CONFIG_MEMBER_(type, name, default_, doc) type name = default_;
#define TITAN_CONFIG_VISIT_(type, name, default_, doc) v(#name, name, doc);

// The members (with defaults), visit_fields(v) calling v(name, member, doc) for
// each, and defaulted ==.
#define TITAN_CONFIG_BODY(Self, FIELDS)                   \
  FIELDS(TITAN_CONFIG_MEMBER_)                            \
  template <class V>                                      \
  void visit_fields(V&& v) {                              \
    FIELDS(TITAN_CONFIG_VISIT_)                           \
  }                                                       \
  void titan_config_struct_tag() {}                       \
  bool operator==(const Self&) const = default;
