#include "titan/rl/sft_data.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/rl/rollouter.h"
#include "titan/train/document_sources.h"

namespace titan::rl {

namespace {

// The demonstration as one document: the chat template's render of the whole
// conversation, every assistant reply (+ <|im_end|>) in the loss. Empty ids when it has
// no assistant turn.
void conversation_document(const data::Tokenizer& tok, const Rollout& demo, bool enable_thinking, int32_t im_end,
                           std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
  const std::vector<ChatMessage>& conv = demo.messages;
  for (const int64_t start : demo.turn_context_start)
    TITAN_CHECK(start == 0, "sft_documents: sample '{}': the environment resets the context, so its turns are not "
                "one conversation (use the per-turn documents)", demo.sample.id);
  data::ChatTemplateOptions opt;
  opt.add_generation_prompt = false;
  opt.enable_thinking = enable_thinking;
  const std::string text = tok.apply_chat_template(conv, opt);
  static constexpr std::string_view kHeader = "<|im_start|>assistant\n";
  ids.clear();
  mask.clear();
  size_t done = 0;  // text[0, done) is in ids
  for (size_t a = 0; a < conv.size(); ++a) {
    if (conv[a].role != "assistant") continue;
    const size_t header = text.find(kHeader, done);
    const size_t at = header == std::string::npos ? header : text.find(conv[a].content + "<|im_end|>", header);
    TITAN_CHECK(at != std::string::npos, "sft_documents: sample '{}': message {} (assistant) is not in the chat "
                "template's render of the conversation (use the per-turn documents)", demo.sample.id, a);
    tok.encode_append(std::string_view(text).substr(done, at - done), /*parse_special=*/true, ids);
    mask.resize(ids.size(), 0);
    tok.encode_append(conv[a].content, /*parse_special=*/false, ids);
    ids.push_back(im_end);
    mask.resize(ids.size(), 1);
    done = at + conv[a].content.size() + std::string_view("<|im_end|>").size();
  }
}

}  // namespace

data::MaskedDocuments sft_documents(const TaskSpec& task, const SampleSource& src, const data::Tokenizer& tok,
                                    const SftOptions& options) {
  const int32_t im_end = tok.token_to_id("<|im_end|>");
  TITAN_CHECK(im_end >= 0, "sft_documents: the {} tokenizer has no <|im_end|> token (the chat template needs it)",
              tok.kind());
  const int64_t n = options.max_samples > 0 ? std::min(options.max_samples, src.size()) : src.size();
  data::MaskedDocuments docs;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (int64_t i = 0; i < n; ++i) {
    const Rollout demo = task.demonstration_rollout(src.get(i), &tok, options.enable_thinking);
    const std::vector<ChatMessage>& conv = demo.messages;
    if (options.whole_conversation) {
      conversation_document(tok, demo, options.enable_thinking, im_end, ids, mask);
      if (!ids.empty()) docs.add(ids, mask);
      continue;
    }
    size_t turn = 0;
    for (size_t a = 0; a < conv.size(); ++a) {
      if (conv[a].role != "assistant") continue;
      // The reply's own context (the messages since the last context reset).
      const size_t begin = turn < demo.turn_context_start.size() ? static_cast<size_t>(demo.turn_context_start[turn]) : 0;
      ++turn;
      ids = render_prompt_ids(tok, std::span<const ChatMessage>(conv.data() + begin, a - begin), options.enable_thinking);
      mask.assign(ids.size(), 0);
      tok.encode_append(conv[a].content, /*parse_special=*/false, ids);
      ids.push_back(im_end);
      mask.resize(ids.size(), 1);
      docs.add(ids, mask);
    }
  }
  TITAN_CHECK(docs.size() > 0, "sft_documents: task '{}' source '{}' gave no assistant turns ({} samples)",
              task.name, src.name(), n);
  return docs;
}

namespace {

data::MaskedDocuments rl_task_sft(const config::JobConfig& job, const data::Tokenizer& tok, data::Split split) {
  const config::TrainingConfig& t = job.training;
  TITAN_CHECK(!t.task.empty(), "training.task is empty (training.dataset=rl_task_sft needs a task name, one of {})",
              fmt::join(task_names(), ", "));
  nlohmann::json cfg = nlohmann::json::object();
  if (!t.task_config.empty()) {
    try {
      cfg = nlohmann::json::parse(t.task_config);
    } catch (const std::exception& e) {
      fail("training.task_config is not valid JSON: {}", e.what());
    }
    TITAN_CHECK(cfg.is_object(), "training.task_config must be a JSON object, got {}", cfg.type_name());
  }
  SftOptions options;
  if (cfg.contains("sft_documents")) {
    const nlohmann::json v = cfg["sft_documents"];
    TITAN_CHECK(v.is_string() && (v == "per_turn" || v == "conversation"),
                "training.task_config: sft_documents must be \"per_turn\" or \"conversation\", got {}", v.dump());
    options.whole_conversation = v == "conversation";
    cfg.erase("sft_documents");
  }
  const TaskSpec task = make_task(t.task, cfg);
  const auto& src = split == data::Split::train ? task.train : task.validation;
  TITAN_CHECK(src != nullptr && src->size() > 0, "training.task={}: the task has no {} samples", t.task,
              data::to_string(split));
  return sft_documents(task, *src, tok, options);
}

}  // namespace

void register_sft_datasets() { train::register_document_source("rl_task_sft", rl_task_sft); }

}  // namespace titan::rl
