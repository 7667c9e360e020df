#!/usr/bin/env bash
# Training benchmark: titan.cpp vs PyTorch (same model, batch and optimizer, 2 threads)
# for the shakespeare_char recipe and perf-anchors.md's "small" model (41.6M params,
# seq 512, batch 8), plus titan.cpp with activation checkpointing full vs none.
# Results: docs/benchmarks.md, section "Training".
#   bench/train_bench.sh [BUILD_DIR] [--small-steps N] [--shakespeare-steps N] [--warmup-steps N] [--rounds R]
#                        [--peer-openblas-core CORE] [--only small|shakespeare_char]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
ninja -C "$BUILD" titan_cli >/dev/null
exec /usr/bin/python3 bench/train_bench.py "$BUILD" "$@"
