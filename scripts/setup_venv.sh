#!/usr/bin/env bash
# Creates the PyPI virtual environment that holds the test oracles and peers
# (never anything titan needs at run time): torch 2.13.0 CPU, transformers,
# safetensors, tokenizers, flash-linear-attention, openai, tensorboard.
# Usage: scripts/setup_venv.sh [VENV_DIR]   (default: .venv; TITAN_VENV overrides)
# Idempotent: a venv whose stamp matches the requirement list is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${TITAN_VENV:-.venv}}"
reqs="scripts/venv-requirements.txt"
stamp="$venv/.titan-requirements"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$reqs" "$stamp"; then
  exit 0
fi
py=""
for c in python3.11 python3; do
  if command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { echo "error: no python3 to create $venv" >&2; exit 2; }
echo "setting up the oracle venv in $venv (torch 2.13.0 CPU, transformers, ...)"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
# torch first and pinned: an unpinned torch (or one pulled in by another package)
# would be a CUDA build of several GB.
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q -r "$reqs"
cp "$reqs" "$stamp"
