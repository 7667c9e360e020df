#!/usr/bin/env bash
# Distributed training benchmark: `titan train` on perf-anchors.md's "small" model
# (41.6M params, seq 512, 8 rows per step) on 1, 2 and 4 ranks: FSDP, TP, FSDP + TP.
# Per layout: tokens/s, peak resident memory per rank, parameter + optimizer memory per
# rank (and its ratio to 1 rank's), communication time and bytes per step, the share of
# step time inside collectives, and FSDP's bytes on the wire against the theoretical
# 2 (N-1)/N × parameter bytes. Results: docs/benchmarks.md, section "Distributed training".
#   bench/distributed_bench.sh [BUILD_DIR] [--steps N] [--warmup-steps N] [--only LAYOUT,...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
ninja -C "$BUILD" titan_cli >/dev/null
exec /usr/bin/python3 bench/distributed_bench.py "$BUILD" "$@"
