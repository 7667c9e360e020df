// The trainer's checkpoint state (titan/train/trainer.cpp builds it,
// trainer_checkpoint.cpp saves and resumes with it). Private to titan/train.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "titan/checkpoint/distributed_checkpoint.h"
#include "titan/train/trainer.h"

namespace titan::train {

struct Trainer::Ckpt {
  std::unique_ptr<DistributedCheckpointManager> mgr;
  std::string folder;
  // The metrics row of the step being saved: stored in the checkpoint, so that a kill
  // after the checkpoint is published but before the row reaches metrics.jsonl loses
  // nothing (try_resume writes it back).
  nlohmann::json row;
};

}  // namespace titan::train
