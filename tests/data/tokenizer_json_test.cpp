// tokenizer.json loading on small hand-made files: the GPT-2 style options
// (ByteLevel with its own regex and add_prefix_space, "a b" merges), ignore_merges,
// and the errors for malformed files (one line naming the file and field).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/data/utf8.h"

namespace titan::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The byte-level spelling of raw bytes ("Ġw" for " w").
std::string bl(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes) utf8_append(s, byte_to_unicode()[c]);
  return s;
}

// Byte tokens get id = byte value; merges build "he", "ll", "hell", "hello", " w".
json tiny_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab[bl(" w")] = 260;
  vocab[bl(" hel")] = 262;  // in the vocabulary, but no merge makes it
  json merges = json::array({"h e", "l l", "he ll", "hell o", bl(" ") + " w"});
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({json{{"id", 261}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
      {"decoder", json{{"type", "ByteLevel"}}},
      {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
}

class TokenizerJsonFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("titan_tokjson_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  void expect_load_error(const std::string& text, const std::string& needle) {
    const std::string path = write("tokenizer.json", text);
    try {
      load_tokenizer(path);
      ADD_FAILURE() << "no titan::Error, expected one containing '" << needle << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  fs::path dir_;
};

TEST_F(TokenizerJsonFile, Gpt2StyleByteLevel) {
  auto t = load_tokenizer(write("tokenizer.json", tiny_tokenizer().dump()));
  EXPECT_EQ(t->vocab_size(), 263);
  // add_prefix_space: " hello world" -> GPT-2 regex pieces " hello", " world".
  const std::vector<int32_t> ids = t->encode("hello world");
  EXPECT_EQ(ids, (std::vector<int32_t>{' ', 259, 260, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(t->decode(ids), " hello world");
  EXPECT_EQ(t->encode("hello<|endoftext|>"), (std::vector<int32_t>{' ', 259, 261}));
  // Without ignore_merges " hel" is merged from its bytes.
  EXPECT_EQ(t->encode(" hel"), (std::vector<int32_t>{' ', 256, 'l'}));
  // No tokenizer_config.json: eos from the usual names, no bos.
  EXPECT_EQ(t->eos_id(), 261);
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_THROW(t->apply_chat_template(std::vector<ChatMessage>{{"user", "hi", {}}}), Error);
}

TEST_F(TokenizerJsonFile, IgnoreMergesTakesWholeVocabularyWords) {
  json j = tiny_tokenizer();
  j["model"]["ignore_merges"] = true;
  auto t = load_tokenizer(write("tokenizer.json", j.dump()));
  EXPECT_EQ(t->encode(" hel"), (std::vector<int32_t>{262}));
  EXPECT_EQ(t->encode("hello"), (std::vector<int32_t>{' ', 259}));
}

// Llama 3 style: Split regex + ByteLevel without regex, ignore_merges, and the BOS
// from a TemplateProcessing inside a Sequence post-processor (no config file).
TEST_F(TokenizerJsonFile, Llama3StylePipeline) {
  json j = tiny_tokenizer();
  j["model"]["ignore_merges"] = true;
  j["added_tokens"].push_back(json{{"id", 263}, {"content", "<|begin_of_text|>"}, {"special", true}});
  j["pre_tokenizer"] = json{
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({json{{"type", "Split"},
                         {"pattern", json{{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                                    "\\s+(?!\\S)|\\s+"}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                    json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["post_processor"] = json{
      {"type", "Sequence"},
      {"processors", json::array({json{{"type", "ByteLevel"}},
                                  json{{"type", "TemplateProcessing"},
                                       {"single", json::array({json{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                                               json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}})}};
  auto t = load_tokenizer(write("tokenizer.json", j.dump()));
  EXPECT_EQ(t->bos_id(), 263);
  EXPECT_EQ(t->eos_id(), 261);
  // No prefix space; digits in groups of up to 3; " hel" is a vocabulary word.
  EXPECT_EQ(t->encode("hello hel 12345"), (std::vector<int32_t>{259, 262, ' ', '1', '2', '3', '4', '5'}));
}

TEST_F(TokenizerJsonFile, ConfigGivesSpecialIds) {
  write("tokenizer.json", tiny_tokenizer().dump());
  write("tokenizer_config.json",
        R"({"bos_token": {"content": "<|endoftext|>"}, "eos_token": "<|endoftext|>", "pad_token": null})");
  auto t = load_tokenizer(dir_.string());  // a directory holding tokenizer.json
  EXPECT_EQ(t->bos_id(), 261);
  EXPECT_EQ(t->eos_id(), 261);
  EXPECT_EQ(t->pad_id(), -1);
  write("tokenizer_config.json", R"({"eos_token": "<nope>"})");
  try {
    load_tokenizer(dir_.string());
    ADD_FAILURE() << "no error for an unknown eos_token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eos_token"), std::string::npos) << e.what();
  }
}

TEST_F(TokenizerJsonFile, MalformedFilesNameTheField) {
  expect_load_error(R"({"model": )", "bad JSON");
  expect_load_error("{}", "missing field 'model'");
  json j = tiny_tokenizer();
  j["model"].erase("vocab");
  expect_load_error(j.dump(), "missing field 'model.vocab'");
  j = tiny_tokenizer();
  j["model"].erase("merges");
  expect_load_error(j.dump(), "missing field 'model.merges'");
  j = tiny_tokenizer();
  j["model"]["vocab"] = json::array();
  expect_load_error(j.dump(), "field 'model.vocab' must be an object");
  j = tiny_tokenizer();
  j["model"]["vocab"]["zz"] = "x";
  expect_load_error(j.dump(), "field 'model.vocab' entry \"zz\"");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back("h zz");
  expect_load_error(j.dump(), "field 'model.merges[5]' token \"zz\" is not in model.vocab");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back(json::array({"h", "o"}));
  expect_load_error(j.dump(), "field 'model.merges[5]' result \"ho\" is not in model.vocab");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back(7);
  expect_load_error(j.dump(), "field 'model.merges[5]'");
  j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect_load_error(j.dump(), "field 'model.type'");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = json{{"type", "Whitespace"}};
  expect_load_error(j.dump(), "no ByteLevel step");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = json{{"type", "Sequence"},
                            {"pretokenizers", json::array({json{{"type", "Split"},
                                                                {"pattern", json{{"Regex", "(unclosed"}}},
                                                                {"behavior", "Isolated"}},
                                                           json{{"type", "ByteLevel"}, {"use_regex", false}}})}};
  expect_load_error(j.dump(), "pre_tokenizer.pretokenizers[0].pattern.Regex' regex does not compile");
  j = tiny_tokenizer();
  j["normalizer"] = json{{"type", "Lowercase"}};
  expect_load_error(j.dump(), "field 'normalizer.type' = 'Lowercase'");
  j = tiny_tokenizer();
  j["added_tokens"][0].erase("content");
  expect_load_error(j.dump(), "missing field 'added_tokens[0].content'");
}

TEST_F(TokenizerJsonFile, LoadTokenizerPicksTheKind) {
  EXPECT_EQ(load_tokenizer("byte")->kind(), "byte");
  EXPECT_EQ(load_tokenizer(write("tok.json", tiny_tokenizer().dump()))->kind(), "bpe");
  const std::string other = write("vocab.txt", "x");
  try {
    load_tokenizer(other);
    ADD_FAILURE() << "no error for an unknown kind";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot tell the kind"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_tokenizer(write("bad.model", "not a model")), Error);
  EXPECT_THROW(load_tokenizer((dir_ / "missing.json").string()), Error);
}

}  // namespace
}  // namespace titan::data
