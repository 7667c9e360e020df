// `titan tokenize`: text on stdin -> JSON list of token ids on stdout, or with
// --decode a JSON id list -> the text (as a JSON string, like the reference tool
// ../shared/tools/qwen3_tokenize.mjs; --raw prints the text itself).
//
//   printf 'Hello world' | titan tokenize --tokenizer data/qwen3-tokenizer   -> [9707,1879]
//   echo '[9707,1879]' | titan tokenize --tokenizer data/qwen3-tokenizer --decode
//   titan tokenize --tokenizer byte --lines < file        (one JSON list per input line)
#include <fmt/core.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "titan/cli/command.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"

namespace {

struct TokenizeArgs {
  std::string tokenizer;
  bool decode = false, raw = false, lines = false, no_special = false;
};

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

std::vector<int32_t> parse_ids(const std::string& text, const char* where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    titan::fail("tokenize --decode: {} is not JSON: {}", where, e.what());
  }
  TITAN_CHECK(j.is_array(), "tokenize --decode: {} must be a JSON list of token ids", where);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    TITAN_CHECK(j[i].is_number_integer() && j[i].get<int64_t>() >= INT32_MIN && j[i].get<int64_t>() <= INT32_MAX,
                "tokenize --decode: {} element {} = {} is not an integer token id", where, i, j[i].dump());
    ids.push_back(j[i].get<int32_t>());
  }
  return ids;
}

int run_tokenize(const TokenizeArgs& a) {
  auto tok = titan::data::load_tokenizer(a.tokenizer);
  const std::string input = read_stdin();
  std::vector<std::string> items;
  if (a.lines) {
    size_t start = 0;
    while (start < input.size()) {
      size_t end = input.find('\n', start);
      if (end == std::string::npos) end = input.size();
      items.push_back(input.substr(start, end - start));
      start = end + 1;
    }
  } else {
    items.push_back(input);
  }
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (a.decode) {
      const std::string where = a.lines ? fmt::format("line {}", k + 1) : std::string("stdin");
      const std::string text = tok->decode(parse_ids(items[k], where.c_str()));
      out += a.raw ? text : nlohmann::json(text).dump();
    } else {
      out += ids_json(tok->encode(items[k], !a.no_special));
    }
    if (!(a.decode && a.raw && !a.lines)) out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

void setup_tokenize(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<TokenizeArgs>();
  app.add_option("--tokenizer", args->tokenizer,
                 "tokenizer.json, a directory holding one, a SentencePiece .model, or 'byte'")
      ->required();
  app.add_flag("--decode", args->decode, "read a JSON list of ids, print the text as a JSON string");
  app.add_flag("--raw", args->raw, "with --decode: print the text itself, not a JSON string");
  app.add_flag("--lines", args->lines,
               "one input per line ('\\n' not included): one JSON list (or text) per output line");
  app.add_flag("--no-special", args->no_special,
               "do not turn special-token text such as <|im_start|> into its id");
  run = [args] { return run_tokenize(*args); };
}

}  // namespace

TITAN_REGISTER_COMMAND(tokenize, "Tokenize UTF-8 text read from stdin (or --decode ids)", setup_tokenize);
