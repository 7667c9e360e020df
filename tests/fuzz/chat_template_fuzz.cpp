// Fuzz target: the chat-template renderer (Tokenizer::apply_chat_template, Qwen3
// ChatML) with the byte_chat tokenizer. A tool-call parser, when it lands, gets a
// target of its own here.
// Input: byte 0 = options (bit 0 add_generation_prompt, bit 1 enable_thinking),
// then messages separated by 0x1e, each "role 0x1f content [0x1f reasoning]".
// Property: the rendered prompt encodes (it is valid UTF-8 when the message texts
// are) and decodes back to itself: byte_chat is lossless.
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "titan/data/tokenizer.h"
#include "titan/data/utf8.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const auto tok = data::load_tokenizer("byte_chat");
  data::ChatTemplateOptions opt;
  opt.add_generation_prompt = data[0] & 1;
  opt.enable_thinking = data[0] & 2;
  const std::string_view in = fuzz::as_text(data + 1, size - 1);
  std::vector<data::ChatMessage> msgs;
  for (size_t pos = 0; pos < in.size() && msgs.size() < 256;) {
    size_t end = in.find('\x1e', pos);
    if (end == std::string_view::npos) end = in.size();
    const std::string_view m = in.substr(pos, end - pos);
    pos = end + 1;
    data::ChatMessage msg;
    const size_t a = m.find('\x1f');
    msg.role = std::string(m.substr(0, a));
    if (a != std::string_view::npos) {
      const size_t b = m.find('\x1f', a + 1);
      msg.content = std::string(m.substr(a + 1, b == std::string_view::npos ? std::string_view::npos : b - a - 1));
      if (b != std::string_view::npos) msg.reasoning_content = std::string(m.substr(b + 1));
    }
    msgs.push_back(std::move(msg));
  }
  fuzz::expect_ok_or_error([&] {
    const std::string prompt = tok->apply_chat_template(msgs, opt);
    if (!data::utf8_is_valid(prompt)) return;
    const std::vector<int32_t> ids = tok->encode(prompt);
    TITAN_FUZZ_ASSERT(tok->decode(ids) == prompt);
  });
  return 0;
}
