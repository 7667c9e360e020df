#!/usr/bin/env bash
# Checkpoint blocking benchmark: the trainer's blocking time per save, async vs sync, at
# 1, 2 and 4 FSDP ranks (or pipeline stages: --layout pp) on the `small` model
# (bench/checkpoint_bench.py; results in docs/benchmarks.md, section "Checkpoint blocking").
#   bench/checkpoint_bench.sh [BUILD_DIR] [--steps N] [--interval N] [--ranks 1,2,4] [--layout fsdp|pp] [--folder DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
ninja -C "$BUILD" titan_cli >/dev/null
exec /usr/bin/python3 bench/checkpoint_bench.py "$BUILD" "$@"
