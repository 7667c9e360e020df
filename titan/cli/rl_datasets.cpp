// Makes the RL-task training datasets (training.dataset = rl_task_sft, rl/sft_data.h)
// known to `titan train`: the trainer finds them in its document-source registry
// (train/document_sources.h), which the rl module fills.
#include "titan/rl/sft_data.h"

namespace {
const bool registered = [] {
  titan::rl::register_sft_datasets();
  return true;
}();
}  // namespace
