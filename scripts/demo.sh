#!/usr/bin/env bash
# The main job. For now: a short demonstration of the batch-invariant kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/titan info
