// OpenAI request parsing and response bodies (openai_protocol.h).
#include "titan/serve/openai_protocol.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "titan/core/error.h"
#include "titan/data/tokenizer.h"

namespace titan::serve {

using nlohmann::json;

namespace {

const char* type_word(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

// A field that may be absent or null (treated alike, as OpenAI does).
const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& v, const char* name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    throw bad(name, fmt::format("'{}' must be an integer, got {}", name, type_word(v)));
  int64_t x;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw bad(name, fmt::format("'{}' = {} is out of range [{}, {}]", name, u, lo, hi));
    x = static_cast<int64_t>(u);
  } else {
    x = v.get<int64_t>();
  }
  if (x < lo || x > hi) throw bad(name, fmt::format("'{}' = {} is out of range [{}, {}]", name, x, lo, hi));
  return x;
}

double get_number(const json& v, const char* name, double lo, double hi, bool lo_open = false) {
  if (!v.is_number()) throw bad(name, fmt::format("'{}' must be a number, got {}", name, type_word(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
    throw bad(name, fmt::format("'{}' = {} is out of range {}{}, {}]", name, x, lo_open ? "(" : "[", lo, hi));
  return x;
}

bool get_bool(const json& v, const char* name) {
  if (!v.is_boolean()) throw bad(name, fmt::format("'{}' must be a boolean, got {}", name, type_word(v)));
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& name) {
  if (!v.is_string()) throw bad(name, fmt::format("'{}' must be a string, got {}", name, type_word(v)));
  return v.get<std::string>();
}

std::vector<int32_t> encode_text(const ServedModel& m, const std::string& text, const std::string& param) {
  std::vector<int32_t> ids;
  if (m.bos_id >= 0) ids.push_back(m.bos_id);
  try {
    m.tokenizer->encode_append(text, true, ids);
  } catch (const Error& e) {
    throw bad(param, fmt::format("'{}' cannot be tokenized: {}", param, e.what()));
  }
  return ids;
}

std::vector<int32_t> token_list(const json& v, const ServedModel& m, const std::string& param) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m.vocab_size)
      throw bad(param, fmt::format("'{}[{}]' must be a token id in [0, {})", param, i, m.vocab_size));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

// "prompt": a string, a list of strings, a list of token ids or a list of lists of ids.
std::vector<std::vector<int32_t>> parse_prompts(const json& p, const ServedModel& m, const ServeLimits& lim) {
  std::vector<std::vector<int32_t>> out;
  if (p.is_string()) {
    out.push_back(encode_text(m, p.get<std::string>(), "prompt"));
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    out.push_back(token_list(p, m, "prompt"));
  } else if (p.is_array() && !p.empty()) {
    if (static_cast<int64_t>(p.size()) > lim.max_prompts)
      throw bad("prompt", fmt::format("'prompt' holds {} prompts, the limit is {}", p.size(), lim.max_prompts));
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string name = fmt::format("prompt[{}]", i);
      if (p[i].is_string()) out.push_back(encode_text(m, p[i].get<std::string>(), name));
      else if (p[i].is_array() && !p[i].empty()) out.push_back(token_list(p[i], m, name));
      else throw bad("prompt", fmt::format("'{}' must be a string or a non-empty list of token ids", name));
    }
  } else {
    throw bad("prompt", fmt::format("'prompt' must be a string, a list of strings or a list of token ids, got {}",
                                    p.is_array() ? "an empty list" : type_word(p)));
  }
  return out;
}

// "content": a string or a list of {"type": "text", "text": ...} parts.
std::string message_content(const json& c, size_t i) {
  const std::string name = fmt::format("messages[{}].content", i);
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad(name, fmt::format("'{}' must be a string or a list of text parts", name));
  std::string out;
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    const std::string pn = fmt::format("{}[{}]", name, k);
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw bad(name, fmt::format("'{}' must be {{\"type\": \"text\", \"text\": string}} (only text is supported)", pn));
    out += part["text"].get<std::string>();
  }
  return out;
}

std::vector<int32_t> parse_messages(const json& msgs, const json& body, const ServedModel& m) {
  if (!msgs.is_array() || msgs.empty())
    throw bad("messages", fmt::format("'messages' must be a non-empty list, got {}",
                                      msgs.is_array() ? "an empty list" : type_word(msgs)));
  std::vector<data::ChatMessage> chat;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& mj = msgs[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!mj.is_object()) throw bad("messages", fmt::format("'{}' must be an object, got {}", name, type_word(mj)));
    for (const auto& [k, v] : mj.items())
      if (k != "role" && k != "content" && k != "name" && k != "reasoning_content")
        throw bad(name + "." + k, fmt::format("'{}.{}' is not supported", name, k));
    const json* role = field(mj, "role");
    if (!role) throw bad(name + ".role", fmt::format("'{}.role' is required", name));
    data::ChatMessage cm;
    cm.role = get_string(*role, name + ".role");
    if (cm.role == "developer") cm.role = "system";
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      throw bad(name + ".role",
                fmt::format("'{}.role' = '{}' (expected system, developer, user, assistant or tool)", name, cm.role));
    const json* content = field(mj, "content");
    if (!content) throw bad(name + ".content", fmt::format("'{}.content' is required", name));
    cm.content = message_content(*content, i);
    if (const json* r = field(mj, "reasoning_content")) cm.reasoning_content = get_string(*r, name + ".reasoning_content");
    chat.push_back(std::move(cm));
  }
  data::ChatTemplateOptions opt;
  opt.add_generation_prompt = true;
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const auto& [k, v] : kw->items()) {
      if (k != "enable_thinking")
        throw bad("chat_template_kwargs." + k, fmt::format("'chat_template_kwargs.{}' is not supported", k));
      opt.enable_thinking = get_bool(v, "chat_template_kwargs.enable_thinking");
    }
  }
  std::string text;
  try {
    text = m.tokenizer->apply_chat_template(chat, opt);
  } catch (const Error& e) {
    throw bad("messages", e.what());
  }
  std::vector<int32_t> ids;
  if (m.bos_id >= 0) ids.push_back(m.bos_id);
  try {
    m.tokenizer->encode_append(text, true, ids);
  } catch (const Error& e) {
    throw bad("messages", fmt::format("'messages' cannot be tokenized: {}", e.what()));
  }
  return ids;
}

const std::set<std::string>& known_fields(Endpoint e) {
  static const std::set<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "logprobs", "stop", "seed",
      "user", "presence_penalty", "frequency_penalty", "logit_bias",
      // vLLM's extensions
      "top_k", "min_p", "ignore_eos", "stop_token_ids", "include_stop_str_in_output", "return_tokens_as_token_ids"};
  static const std::set<std::string> completions = [] {
    auto s = common;
    s.insert({"prompt", "echo", "best_of", "suffix"});
    return s;
  }();
  static const std::set<std::string> chat = [] {
    auto s = common;
    s.insert({"messages", "top_logprobs", "max_completion_tokens", "chat_template_kwargs"});
    return s;
  }();
  return e == Endpoint::chat ? chat : completions;
}

// Fields OpenAI defines whose only value titan implements is the neutral one.
void refuse_non_neutral(const json& j) {
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (const json* v = field(j, k); v && get_number(*v, k, -2.0, 2.0) != 0.0)
      throw bad(k, fmt::format("'{}' is not supported (only 0)", k));
  if (const json* v = field(j, "logit_bias"); v && !(v->is_object() && v->empty()))
    throw bad("logit_bias", "'logit_bias' is not supported (only {})");
  if (const json* v = field(j, "echo"); v && get_bool(*v, "echo"))
    throw bad("echo", "'echo' is not supported (only false)");
  if (const json* v = field(j, "suffix"); v) throw bad("suffix", "'suffix' is not supported");
}

// A token's text, or "token_id:<id>" (vLLM's return_tokens_as_token_ids).
std::string token_text(const ApiRequest& req, const data::Tokenizer& tok, int32_t id) {
  if (req.tokens_as_ids) return fmt::format("token_id:{}", id);
  return tok.decode(std::span<const int32_t>(&id, 1));
}

json token_logprob_entry_chat(const ApiRequest& req, const data::Tokenizer& tok, int32_t id, float lp) {
  const std::string s = token_text(req, tok, id);
  std::vector<int> bytes;
  for (unsigned char ch : s) bytes.push_back(ch);
  return {{"token", s}, {"logprob", lp}, {"bytes", bytes}};
}

// The logprobs object of a completion choice (tokens, token_logprobs, top_logprobs,
// text_offset) or of a chat choice ({"content": [...]}).
json logprobs_json(const ApiRequest& req, const ServedModel& m, const std::vector<int32_t>& ids,
                   const std::vector<float>& lps, const std::vector<infer::TopLogprobs>& tops, size_t text_offset0) {
  const data::Tokenizer& tok = *m.tokenizer;
  if (req.endpoint == Endpoint::chat) {
    json content = json::array();
    for (size_t i = 0; i < ids.size(); ++i) {
      json e = token_logprob_entry_chat(req, tok, ids[i], lps[i]);
      json top = json::array();
      if (i < tops.size())
        for (const auto& [tid, tlp] : tops[i]) top.push_back(token_logprob_entry_chat(req, tok, tid, tlp));
      e["top_logprobs"] = top;
      content.push_back(e);
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t off = text_offset0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string s = token_text(req, tok, ids[i]);
    tokens.push_back(s);
    token_logprobs.push_back(lps[i]);
    offsets.push_back(off);
    off += s.size();
    json t = json::object();
    if (i < tops.size())
      for (const auto& [tid, tlp] : tops[i]) t[token_text(req, tok, tid)] = tlp;
    top.push_back(t);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", req.params.logprobs > 0 ? top : json(nullptr)},
          {"text_offset", offsets}};
}

json usage_json(const ApiRequest& req, int64_t completion_tokens) {
  return {{"prompt_tokens", req.prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", req.prompt_tokens + completion_tokens}};
}

}  // namespace

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiRequest parse_request(Endpoint endpoint, const std::string& body, const ServedModel& m, const ServeLimits& lim) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()), "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, fmt::format("the request body must be a JSON object, got {}", type_word(j)));
  const auto& known = known_fields(endpoint);
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) throw bad(k, fmt::format("unrecognized request argument supplied: {}", k));
  refuse_non_neutral(j);

  const json* model = field(j, "model");
  if (!model) throw bad("model", "'model' is required");
  const std::string name = get_string(*model, "model");
  if (name != m.name)
    throw ApiError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", name, m.name), "model",
                   "model_not_found");

  ApiRequest r;
  r.endpoint = endpoint;
  infer::SamplingParams& p = r.params;
  const char* prompt_param = endpoint == Endpoint::chat ? "messages" : "prompt";
  if (endpoint == Endpoint::chat) {
    const json* msgs = field(j, "messages");
    if (!msgs) throw bad("messages", "'messages' is required");
    r.prompts.push_back(parse_messages(*msgs, j, m));
  } else {
    const json* prompt = field(j, "prompt");
    if (!prompt) throw bad("prompt", "'prompt' is required");
    r.prompts = parse_prompts(*prompt, m, lim);
  }
  const int64_t prompt_limit = lim.max_prompt_tokens > 0 ? std::min(lim.max_prompt_tokens, m.context - 1) : m.context - 1;
  int64_t longest = 0;
  for (const auto& ids : r.prompts) {
    if (ids.empty()) throw bad(prompt_param, fmt::format("'{}' is empty (no tokens)", prompt_param));
    if (static_cast<int64_t>(ids.size()) > prompt_limit)
      throw ApiError(400,
                     fmt::format("the prompt has {} tokens, the limit is {} (model context {})", ids.size(),
                                 prompt_limit, m.context),
                     prompt_param, "context_length_exceeded");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
    r.prompt_tokens += static_cast<int64_t>(ids.size());
  }

  const char* mt_name = "max_tokens";
  const json* mt = field(j, "max_tokens");
  if (endpoint == Endpoint::chat && field(j, "max_completion_tokens")) {
    mt = field(j, "max_completion_tokens");
    mt_name = "max_completion_tokens";
  }
  const int64_t room = m.context - longest;
  if (mt) {
    p.max_tokens = get_int(*mt, mt_name, 1, lim.max_tokens);
    if (p.max_tokens > room)
      throw ApiError(400,
                     fmt::format("the model's context is {} tokens; {} in the prompt + {} = {} requested", m.context,
                                 longest, mt_name, longest + p.max_tokens),
                     mt_name, "context_length_exceeded");
  } else {
    // OpenAI's defaults: 16 for completions, up to the context for chat.
    p.max_tokens = std::min<int64_t>(endpoint == Endpoint::chat ? lim.max_tokens : 16, room);
  }
  if (const json* v = field(j, "temperature")) p.temperature = get_number(*v, "temperature", 0.0, 2.0);
  if (const json* v = field(j, "top_p")) p.top_p = get_number(*v, "top_p", 0.0, 1.0, true);
  if (const json* v = field(j, "top_k")) p.top_k = static_cast<int>(get_int(*v, "top_k", -1, m.vocab_size));
  if (const json* v = field(j, "min_p")) p.min_p = get_number(*v, "min_p", 0.0, 1.0);
  if (const json* v = field(j, "n")) p.n = static_cast<int>(get_int(*v, "n", 1, lim.max_n));
  if (const json* v = field(j, "best_of"); v && get_int(*v, "best_of", 1, lim.max_n) != p.n)
    throw bad("best_of", "'best_of' is not supported (only best_of = n)");
  if (const json* v = field(j, "seed")) {
    if (!v->is_number_integer()) throw bad("seed", fmt::format("'seed' must be an integer, got {}", type_word(*v)));
    p.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      p.stop = {v->get<std::string>()};
    } else if (v->is_array()) {
      if (v->size() > 4) throw bad("stop", fmt::format("'stop' holds {} strings, at most 4 are allowed", v->size()));
      for (size_t i = 0; i < v->size(); ++i) p.stop.push_back(get_string((*v)[i], fmt::format("stop[{}]", i)));
    } else {
      throw bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", type_word(*v)));
    }
    for (const auto& s : p.stop)
      if (s.empty()) throw bad("stop", "'stop' strings must not be empty");
  }
  p.stop_token_ids = m.stop_token_ids;
  if (const json* v = field(j, "stop_token_ids")) {
    if (!v->is_array()) throw bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    auto ids = token_list(*v, m, "stop_token_ids");
    p.stop_token_ids.insert(p.stop_token_ids.end(), ids.begin(), ids.end());
  }
  if (const json* v = field(j, "ignore_eos")) p.ignore_eos = get_bool(*v, "ignore_eos");
  if (const json* v = field(j, "include_stop_str_in_output"))
    p.include_stop_str_in_output = get_bool(*v, "include_stop_str_in_output");
  if (endpoint == Endpoint::chat) {
    if (const json* v = field(j, "logprobs")) r.logprobs = get_bool(*v, "logprobs");
    if (const json* v = field(j, "top_logprobs")) {
      p.logprobs = static_cast<int>(get_int(*v, "top_logprobs", 0, 20));
      if (!r.logprobs && p.logprobs > 0) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  } else if (const json* v = field(j, "logprobs")) {
    p.logprobs = static_cast<int>(get_int(*v, "logprobs", 0, 20));
    r.logprobs = true;
  }
  if (const json* v = field(j, "return_tokens_as_token_ids"))
    r.tokens_as_ids = get_bool(*v, "return_tokens_as_token_ids");
  if (const json* v = field(j, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!r.stream) throw bad("stream_options", "'stream_options' needs 'stream': true");
    if (!v->is_object()) throw bad("stream_options", "'stream_options' must be an object");
    for (const auto& [k, x] : v->items()) {
      if (k != "include_usage") throw bad("stream_options." + k, fmt::format("'stream_options.{}' is not supported", k));
      r.include_usage = get_bool(x, "stream_options.include_usage");
    }
  }
  if (const json* v = field(j, "user")) get_string(*v, "user");
  try {
    p.validate();
  } catch (const Error& e) {
    throw bad("", e.what());
  }
  return r;
}

json response_body(const ApiRequest& req, const ServedModel& m, const std::string& id, int64_t created,
                   const std::vector<ChoiceResult>& choices, int64_t completion_tokens) {
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json lp = req.logprobs ? logprobs_json(req, m, c.token_ids, c.logprobs, c.top_logprobs, 0) : json(nullptr);
    if (req.endpoint == Endpoint::chat)
      cs.push_back({{"index", i},
                    {"message", {{"role", "assistant"}, {"content", c.text}}},
                    {"logprobs", lp},
                    {"finish_reason", c.finish_reason}});
    else
      cs.push_back({{"index", i}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
  }
  return {{"id", id},
          {"object", req.endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", m.name},
          {"choices", cs},
          {"usage", usage_json(req, completion_tokens)}};
}

json stream_chunk(const ApiRequest& req, const ServedModel& m, const std::string& id, int64_t created, int index,
                  bool first, const std::string& text, const std::vector<int32_t>& token_ids,
                  const std::vector<float>& logprobs, const std::vector<infer::TopLogprobs>& top_logprobs,
                  const std::string& finish_reason) {
  json lp = req.logprobs ? logprobs_json(req, m, token_ids, logprobs, top_logprobs, 0) : json(nullptr);
  json fr = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  json choice;
  if (req.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice = {{"index", index}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", fr}};
  } else {
    choice = {{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", fr}};
  }
  json out = {{"id", id},
              {"object", req.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", m.name},
              {"choices", json::array({choice})}};
  if (req.include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk(const ApiRequest& req, const ServedModel& m, const std::string& id, int64_t created,
                 int64_t completion_tokens) {
  return {{"id", id},
          {"object", req.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", m.name},
          {"choices", json::array()},
          {"usage", usage_json(req, completion_tokens)}};
}

}  // namespace titan::serve
