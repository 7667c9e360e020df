// Generic reflection machinery (titan/config/reflect.h, field_text.h, toml_io.h)
// on a test struct that uses every supported field type and nested sections.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "titan/config/field_text.h"
#include "titan/config/reflect.h"
#include "titan/config/toml_io.h"
#include "titan/core/error.h"

namespace tc = titan::config;

namespace demo {
TITAN_CONFIG_ENUM(Color, red, green, blue)

#define DEMO_INNER_FIELDS(X)                                        \
  X(int, depth, 3, "nested depth")                                  \
  X(std::vector<double>, weights, (std::vector<double>{0.5, 1.5}), "weights")
struct Inner { TITAN_CONFIG_BODY(Inner, DEMO_INNER_FIELDS) };

#define DEMO_SECTION_FIELDS(X)                                      \
  X(bool, flag, false, "a boolean")                                 \
  X(int, small, 7, "a 32-bit integer")                              \
  X(int64_t, big, int64_t{1} << 40, "a 64-bit integer")            \
  X(double, ratio, 0.25, "a double")                                \
  X(std::string, text, "hello", "a string")                         \
  X(Color, color, Color::green, "an enum")                          \
  X(std::vector<std::string>, names, {}, "a string list")           \
  X(std::vector<int64_t>, ids, (std::vector<int64_t>{1, 2}), "an int list") \
  X(Inner, inner, {}, "an inner table")
struct Section { TITAN_CONFIG_BODY(Section, DEMO_SECTION_FIELDS) };

#define DEMO_ROOT_FIELDS(X)                                         \
  X(std::string, name, "root", "a root-level key")                  \
  X(Section, sec, {}, "a section")
struct Root { TITAN_CONFIG_BODY(Root, DEMO_ROOT_FIELDS) };
}  // namespace demo

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ConfigReflect, PathsDefaultsAndDocs) {
  demo::Root r;
  tc::FieldTable t = tc::reflect(r);
  std::vector<std::string> want{"name",      "sec.flag",  "sec.small", "sec.big",         "sec.ratio",
                                "sec.text",  "sec.color", "sec.names", "sec.ids",         "sec.inner.depth",
                                "sec.inner.weights"};
  EXPECT_EQ(tc::field_paths(t), want);
  ASSERT_EQ(t.sections.size(), 2u);
  EXPECT_EQ(t.sections[0].path, "sec");
  EXPECT_EQ(t.sections[1].path, "sec.inner");
  EXPECT_EQ(t.find("sec.inner.depth")->doc, "nested depth");
  EXPECT_EQ(t.find("sec.color")->kind, tc::FieldKind::enumeration);
  EXPECT_EQ(r.sec.big, int64_t{1} << 40);
  EXPECT_EQ(r.sec.inner.weights, (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(tc::enum_name(demo::Color::blue), "blue");
  EXPECT_EQ(tc::enum_from_name<demo::Color>("red"), demo::Color::red);
}

TEST(ConfigReflect, SetFromCommandLineText) {
  demo::Root r;
  tc::FieldTable t = tc::reflect(r);
  tc::set_field(t, "sec.flag", "true");
  tc::set_field(t, "sec.small", "-12");
  tc::set_field(t, "sec.big", "+9000000000");
  tc::set_field(t, "sec.ratio", "1e-3");
  tc::set_field(t, "sec.text", "a=b, c");
  tc::set_field(t, "sec.color", "blue");
  tc::set_field(t, "sec.names", "x, y,z");
  tc::set_field(t, "sec.ids", "[4, -5]");
  tc::set_field(t, "sec.inner.weights", "");
  tc::set_field(t, "name", "");
  EXPECT_TRUE(r.sec.flag);
  EXPECT_EQ(r.sec.small, -12);
  EXPECT_EQ(r.sec.big, 9000000000);
  EXPECT_EQ(r.sec.ratio, 1e-3);
  EXPECT_EQ(r.sec.text, "a=b, c");
  EXPECT_EQ(r.sec.color, demo::Color::blue);
  EXPECT_EQ(r.sec.names, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(r.sec.ids, (std::vector<int64_t>{4, -5}));
  EXPECT_TRUE(r.sec.inner.weights.empty());
  EXPECT_EQ(r.name, "");
}

TEST(ConfigReflect, BadCommandLineValues) {
  demo::Root r;
  tc::FieldTable t = tc::reflect(r);
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.small", "3000000000"); }),
            "bad value for 'sec.small': expected a 32-bit integer, got '3000000000'");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.big", "12abc"); }),
            "bad value for 'sec.big': expected an integer, got '12abc'");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.flag", "yes please"); }),
            "bad value for 'sec.flag': expected a boolean (true|false), got 'yes please'");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.ratio", "0.5.1"); }),
            "bad value for 'sec.ratio': expected a number, got '0.5.1'");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.color", "purple"); }),
            "bad value for 'sec.color': 'purple' is not one of: red, green, blue");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.ids", "1,,2"); }),
            "bad value for 'sec.ids': expected a comma-separated list of integers, got '1,,2'");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.names", "a,,b"); }),
            "bad value for 'sec.names': expected a comma-separated list of strings, got 'a,,b'");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.inner", "1"); }),
            "'sec.inner' is a section, not a field (set a field such as 'sec.inner.depth')");
  EXPECT_EQ(error_of([&] { tc::set_field(t, "sec.inner.dept", "1"); }),
            "unknown key 'sec.inner.dept' (did you mean 'sec.inner.depth'?)");
  // The failed sets left the values alone.
  EXPECT_EQ(r.sec.small, 7);
  EXPECT_EQ(r.sec.ids, (std::vector<int64_t>{1, 2}));
}

TEST(ConfigReflect, EditDistanceAndNearest) {
  EXPECT_EQ(tc::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(tc::edit_distance("", "abc"), 3u);
  EXPECT_EQ(tc::edit_distance("flaw", "lawn"), 2u);
  EXPECT_EQ(tc::edit_distance("same", "same"), 0u);
  std::vector<std::string> keys{"training.steps", "training.seq_len", "validation.steps", "optimizer.lr"};
  EXPECT_EQ(tc::nearest_key(keys, "training.step"), "training.steps");
  EXPECT_EQ(tc::nearest_key(keys, "trainig.seq_len"), "training.seq_len");
  EXPECT_EQ(tc::nearest_key(keys, "lr"), "optimizer.lr");  // bare key matches a leaf
  EXPECT_EQ(tc::nearest_key({}, "x"), "");
  EXPECT_EQ(tc::nearest_key(keys, "zzzz"), "");  // nothing similar
}

TEST(ConfigReflect, TomlRoundTripOfEveryType) {
  demo::Root r;
  r.name = "quote\" backslash\\ newline\n tab\t ctrl\x01 unicode \xc3\xbc";
  r.sec.flag = true;
  r.sec.small = std::numeric_limits<int>::min();
  r.sec.big = std::numeric_limits<int64_t>::max();
  r.sec.ratio = 1.0 / 3.0;
  r.sec.text = "";
  r.sec.color = demo::Color::red;
  r.sec.names = {"a", "b c", "d,e"};
  r.sec.ids = {};
  r.sec.inner.depth = -1;
  r.sec.inner.weights = {0.1, 1.0, 5e-324, 1e300, -2.5, std::numeric_limits<double>::infinity()};
  std::string text = tc::to_toml(r, "header line");
  demo::Root back;
  back.sec.ids = {9};
  tc::apply_toml_text(back, text, "roundtrip.toml");
  EXPECT_TRUE(back == r) << text;
  EXPECT_NE(text.find("# header line\n"), std::string::npos);
  EXPECT_NE(text.find("[sec.inner]\n"), std::string::npos);
  EXPECT_NE(text.find("# a double"), std::string::npos);
}

TEST(ConfigReflect, TomlValuesAndErrors) {
  demo::Root r;
  // Dotted keys, an integer for a double field, partial update.
  tc::apply_toml_text(r, "name = \"n\"\n[sec]\nratio = 2\ninner.depth = 4\nids = [7]\n", "a.toml");
  EXPECT_EQ(r.name, "n");
  EXPECT_EQ(r.sec.inner.depth, 4);
  EXPECT_EQ(r.sec.ratio, 2.0);
  EXPECT_EQ(r.sec.ids, (std::vector<int64_t>{7}));
  EXPECT_EQ(r.sec.small, 7);
  EXPECT_EQ(error_of([&] { tc::apply_toml_text(r, "[sec]\nsmall = 1.5\n", "b.toml"); }),
            "b.toml:2: bad value for 'sec.small': expected a 32-bit integer, got a float");
  EXPECT_EQ(error_of([&] { tc::apply_toml_text(r, "[sec]\n\nids = [1, \"2\"]\n", "c.toml"); }),
            "c.toml:3: bad value for 'sec.ids': expected a comma-separated list of integers, got a string");
  EXPECT_EQ(error_of([&] { tc::apply_toml_text(r, "[sec]\ncolor = \"pink\"\n", "d.toml"); }),
            "d.toml:2: bad value for 'sec.color': 'pink' is not one of: red, green, blue");
  EXPECT_EQ(error_of([&] { tc::apply_toml_text(r, "[sec]\nsmall = 3000000000\n", "e.toml"); }),
            "e.toml:2: bad value for 'sec.small': 3000000000 does not fit in 32 bits");
  EXPECT_EQ(error_of([&] { tc::apply_toml_text(r, "sec = 3\n", "f.toml"); }),
            "f.toml:1: 'sec' is a section; expected a table, got an integer");
  EXPECT_EQ(error_of([&] { tc::apply_toml_text(r, "[sec.iner]\ndepth = 1\n", "g.toml"); }),
            "g.toml:1: unknown section 'sec.iner' (did you mean 'sec.inner'?)");
}

}  // namespace
