// Engine::Request (internal to titan/infer): a prompt, its SamplingParams and its n
// sample sequences. Heap-allocated and never moved, so Sequence::params may point here.
#pragma once
#include <memory>
#include <vector>

#include "titan/infer/engine.h"
#include "titan/infer/sequence.h"

namespace titan::infer {

struct Engine::Request {
  int64_t id = -1;
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<std::unique_ptr<Sequence>> seqs;
  RequestMetrics metrics;
};

}  // namespace titan::infer
