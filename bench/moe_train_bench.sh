#!/usr/bin/env bash
# MoE training benchmark: titan.cpp vs PyTorch 2.13 + transformers' DeepseekV3ForCausalLM
# (eager MoE) on the same DeepSeek-V3-style shapes, 2 threads each (bench/moe_train_bench.py).
# Results: docs/benchmarks.md, section "MoE training".
#   bench/moe_train_bench.sh [BUILD_DIR] [--steps N] [--warmup N] [--only debugmodel|medium]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
ninja -C "$BUILD" titan_cli >/dev/null
exec /usr/bin/python3 bench/moe_train_bench.py "$BUILD" "$@"
