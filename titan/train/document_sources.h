// Document sources: training.dataset kinds that produce masked documents (a per-token
// loss mask, data/masked_documents.h) instead of a token stream, e.g. SFT data built
// from an RL task's demonstrations ("rl_task_sft", registered by the rl module:
// rl::register_sft_datasets(), which the titan CLI calls at start-up).
//
// The trainer looks training.dataset up here first; a registered kind replaces the
// text/jsonl stream pipeline: documents packed whole into rows (positions restart at
// every document, no attention across documents), the loss on masked tokens only.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/config/job_config.h"
#include "titan/data/dataset.h"
#include "titan/data/masked_documents.h"
#include "titan/data/tokenizer.h"

namespace titan::train {

// Builds the documents of one split for a job with the job's tokenizer. Throws
// titan::Error naming the config field for bad settings.
using DocumentSourceFn =
    std::function<data::MaskedDocuments(const config::JobConfig&, const data::Tokenizer&, data::Split)>;

// Registers (or replaces) the source for training.dataset = kind. Thread-safe.
void register_document_source(const std::string& kind, DocumentSourceFn fn);
// The source of kind, or an empty function when none is registered.
DocumentSourceFn find_document_source(std::string_view kind);
std::vector<std::string> document_source_kinds();

}  // namespace titan::train
