// SFT data from an RL task: the task's demonstrations (TaskSpec::demonstration: the
// environment run with the reference replies) as masked training documents, so a
// model can be trained to solve the task before RL (recipe alphabet_sort_sft).
//
// One document per assistant turn t of a demonstration:
//   tokens = render_prompt_ids(turn t's context: the conversation before it, since the
//            last context reset)   (rollouter.h: the exact
//            prompt the rollouter gives the generator for that turn)
//          + encode(reply t) + <|im_end|>
//   mask   = 0 on the prompt, 1 on the reply and its <|im_end|>
// so the loss is on the assistant's tokens only (data/masked_documents.h turns the
// mask into targets: prompt positions predict nothing, except the last prompt token,
// which predicts the reply's first token) and the model learns to end its turn.
//
// With SftOptions::whole_conversation, one document per demonstration instead: the
// chat template's render of the whole conversation (add_generation_prompt off), mask 1
// on every assistant reply and its <|im_end|> and 0 elsewhere (the standard
// assistant-only loss, at a fraction of the per-turn documents' tokens). The replies
// before the last user message are rendered as the template renders history (Qwen3:
// without the empty <think></think> block that a turn's own generation prompt has), so
// only the last reply sees exactly its rollout prompt. It needs an environment that
// never resets the context (a titan::Error otherwise).
//
// training.dataset = "rl_task_sft" (register_sft_datasets) builds the train split
// from task.train and the validation split from task.validation of
// make_task(training.task, training.task_config). The task_config key
// "sft_documents" is the dataset's, not the task's (removed before make_task):
// "per_turn" (the default) or "conversation" (SftOptions::whole_conversation).
#pragma once
#include <cstdint>

#include "titan/data/masked_documents.h"
#include "titan/data/tokenizer.h"
#include "titan/rl/tasks.h"

namespace titan::rl {

struct SftOptions {
  bool enable_thinking = false;  // as RolloutConfig::enable_thinking of the later rollouts
  int64_t max_samples = 0;       // use the first n samples of the source; 0 = all
  bool whole_conversation = false;  // one document per demonstration (see above)
};

// Throws titan::Error when a demonstration does not complete (naming the sample) or
// the tokenizer has no <|im_start|>/<|im_end|>.
data::MaskedDocuments sft_documents(const TaskSpec& task, const SampleSource& src, const data::Tokenizer& tok,
                                    const SftOptions& options = {});

// Registers the training.dataset kind "rl_task_sft" with the trainer
// (train/document_sources.h). Idempotent. Reads training.task (a task name) and
// training.task_config (a JSON object, "" = {}); titan::Error naming the field when
// they are missing or malformed.
void register_sft_datasets();

}  // namespace titan::rl
