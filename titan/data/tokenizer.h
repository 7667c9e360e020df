// Tokenizers: text <-> token ids.
//
//   auto tok = titan::data::load_tokenizer("data/qwen3-tokenizer");
//   std::vector<int32_t> ids = tok->encode("Hello world");   // {9707, 1879}
//   std::string text = tok->decode(ids);                      // "Hello world"
//
// Kinds, picked by load_tokenizer from the path:
//   - "byte": 256 byte ids + <|bos|> <|eos|> <|pad|> at 256..258 (ByteTokenizer);
//   - "byte_chat": "byte" + <|im_start|> <|im_end|> <think> </think> at 259..262, for
//     the chat template; eos = <|im_end|> (ByteTokenizer(true));
//   - a Hugging Face tokenizer.json with a byte-level BPE model, as Qwen3, Llama3
//     and GPT-2 use it (BpeTokenizer);
//   - a SentencePiece .model file (SentencePieceTokenizer, via libsentencepiece).
//
// Common contract:
//   - encode() takes valid UTF-8 (titan::Error naming the byte offset otherwise).
//     Added/special tokens written in the text (e.g. "<|im_start|>") are matched
//     whole, leftmost-longest, before normalisation and splitting, as Hugging Face
//     tokenizers does; encode(text, /*parse_special=*/false) matches only the
//     non-special added tokens (HF's split_special_tokens=True). No BOS/EOS is
//     added: prepend bos_id() yourself where the model wants one.
//   - decode() always returns valid UTF-8. Byte sequences that are not valid UTF-8
//     become U+FFFD, one per maximal invalid subpart (Rust from_utf8_lossy /
//     WHATWG TextDecoder, which the HF reference does). An id outside
//     [0, vocab_size()) is a titan::Error naming the id and its position.
//     Special tokens are decoded to their text.
//   - Tokenizers are immutable after loading; encode/decode are thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

// A token added on top of the model vocabulary (HF "added_tokens"), matched whole
// in the input text. special=true marks control tokens (<|im_start|>, <|bos|>).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;
  bool lstrip = false;  // swallow whitespace on the left when matched
  bool rstrip = false;  // swallow whitespace on the right when matched
};

// One chat message. role: "system", "user", "assistant" or "tool".
// reasoning_content (assistant only): the thinking text; when absent it is taken
// from a "<think>...</think>" prefix of content, as Qwen3's template does.
struct ChatMessage {
  std::string role;
  std::string content;
  std::optional<std::string> reasoning_content;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = false;  // append "<|im_start|>assistant\n"
  bool enable_thinking = true;         // false: the prompt also gets an empty <think></think>
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "byte", "byte_chat", "bpe" or "sentencepiece".
  virtual std::string_view kind() const = 0;

  // Text -> ids (see the contract above). Throws titan::Error on invalid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const {
    std::vector<int32_t> ids;
    encode_append(text, parse_special, ids);
    return ids;
  }
  // Appends the ids of text to out (same rules as encode).
  virtual void encode_append(std::string_view text, bool parse_special,
                             std::vector<int32_t>& out) const = 0;

  // Ids -> valid UTF-8 text. Throws titan::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // Number of ids, added tokens included (the largest id + 1).
  virtual int32_t vocab_size() const = 0;

  // -1 when the tokenizer has no such token.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }

  // The id of a token given in the vocabulary's own spelling (byte-level BPE:
  // "Ġworld"; SentencePiece: "▁world"; byte: a single byte or a special), or -1.
  virtual int32_t token_to_id(std::string_view token) const = 0;
  // The vocabulary spelling of id. Throws titan::Error for an unknown id.
  virtual std::string id_to_token(int32_t id) const = 0;

  // Added tokens (special and not), in id order.
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // True if id is an added token with special=true (or a SentencePiece control id).
  virtual bool is_special(int32_t id) const;

  // Renders messages with the Qwen3 (ChatML) chat template for plain messages (no
  // tools list): "<|im_start|>{role}\n{content}<|im_end|>\n" per message, the
  // <think> handling of assistant turns after the last user query, and the
  // generation prompt. Source: chat_template in Qwen3's tokenizer_config.json.
  // Needs <|im_start|> and <|im_end|> in the vocabulary (titan::Error otherwise,
  // and for an unknown role).
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  const ChatTemplateOptions& options = {}) const;

 protected:
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
  std::vector<AddedToken> added_;  // sorted by id
};

// Loads a tokenizer. path is one of:
//   "byte" / "byte_chat"          -> ByteTokenizer (built in, no file)
//   a tokenizer.json (any *.json) -> BpeTokenizer (reads tokenizer_config.json
//                                    beside it, if present, for bos/eos/pad)
//   a directory                   -> its tokenizer.json, else its tokenizer.model, else
//                                    its titan_tokenizer.txt (first line: "byte" or
//                                    "byte_chat"; written by the HF export of a model
//                                    trained with a built-in tokenizer)
//   a *.model file                -> SentencePieceTokenizer
// Throws titan::Error naming the path (missing file, unknown kind) or the file and
// field (malformed tokenizer.json).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// True for the names of the built-in tokenizers ("byte", "byte_chat"): no file, so
// not a data path to resolve.
bool is_builtin_tokenizer(std::string_view path);
// The file naming a built-in tokenizer inside a model directory (see load_tokenizer).
inline constexpr const char* kBuiltinTokenizerFile = "titan_tokenizer.txt";

}  // namespace titan::data
