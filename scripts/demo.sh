#!/usr/bin/env bash
# The main job on the shipped data. Until the RL job lands (issue 5), it is the
# pretraining reference run: nanoGPT's shakespeare_char CPU configuration, trained
# from scratch by `titan train`, ending with its validation loss and a sample.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/titan info
./build/titan train --recipe shakespeare_char --job.dump_folder=outputs/shakespeare_char "$@"
echo "metrics: outputs/shakespeare_char/metrics.jsonl, config: outputs/shakespeare_char/config.toml"
