#include "titan/rl/sft_data.h"

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/rl/rollouter.h"
#include "titan/train/document_sources.h"

namespace titan::rl {

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
  const TaskSpec task = make_task(t.task, cfg);
  const auto& src = split == data::Split::train ? task.train : task.validation;
  TITAN_CHECK(src != nullptr && src->size() > 0, "training.task={}: the task has no {} samples", t.task,
              data::to_string(split));
  return sft_documents(task, *src, tok);
}

}  // namespace

void register_sft_datasets() { train::register_document_source("rl_task_sft", rl_task_sft); }

}  // namespace titan::rl
