// Fuzz target: tokenizer.json (BpeTokenizer) and encode/decode with it.
// Input: the tokenizer.json bytes, then optionally a 0x00 byte and a text to encode
// (without one, a fixed multi-script sample is encoded).
// Properties (tokenizer.h's contract): encode gives ids in [0, vocab_size()) and
// decode always returns valid UTF-8. (decode(encode(text)) == text is not asserted:
// a normalizer may change the text.)
#include <cstring>

#include "tests/fuzz/fuzz_util.h"
#include "titan/data/tokenizer.h"
#include "titan/data/utf8.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = fuzz::as_text(data, size);
  const size_t cut = in.find('\0');
  const std::string_view json = in.substr(0, cut);
  const std::string text = cut == std::string_view::npos
                               ? std::string("Hello, world! 123 ÀÉÎõü 你好 🙂 <|im_start|>user\n  tabs\tend<|endoftext|>")
                               : std::string(in.substr(cut + 1));
  const std::string path = fuzz::write_scratch("tokenizer.json", json);
  fuzz::expect_ok_or_error([&] {
    const auto tok = data::load_tokenizer(path);
    const int32_t v = tok->vocab_size();
    for (bool special : {true, false}) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(text, special);
      } catch (const Error&) {
        continue;  // invalid UTF-8 text
      }
      for (int32_t id : ids) TITAN_FUZZ_ASSERT(id >= 0 && id < v);
      const std::string back = tok->decode(ids);
      TITAN_FUZZ_ASSERT(data::utf8_is_valid(back));
    }
    for (int32_t id = 0; id < std::min(v, 300); ++id) {
      const std::vector<int32_t> one{id};
      TITAN_FUZZ_ASSERT(data::utf8_is_valid(tok->decode(one)));
      (void)tok->id_to_token(id);
    }
  });
  return 0;
}
