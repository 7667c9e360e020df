#!/usr/bin/env bash
# Runs every libFuzzer target of build-fuzz (tests/fuzz/*_fuzz.cpp) for FUZZ_SECONDS
# each (default 600), one after another, starting from the committed seeds
# (tests/fuzz/corpus/<target>/; the grown corpus goes to build-fuzz/corpus/<target>/).
# A crash leaves its input in build-fuzz/artifacts/<target>/ and fails the run.
# Prints, and writes to build-fuzz/fuzz-summary.txt, one line per target:
# executions, coverage (libFuzzer's "cov": edges) and features ("ft").
# libFuzzer's random seed is fixed (FUZZ_SEED, default 1), so a run can be repeated, and
# a longer run from an empty corpus folder tries the inputs a shorter one with the same
# seed tries first (as far as the target itself is deterministic): CI's 60 s per target
# are covered by a 10-minute run made before the change lands.
#   FUZZ_SECONDS=60 scripts/fuzz.sh [target ...]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUZZ_BUILD:-build-fuzz}
SECONDS_PER=${FUZZ_SECONDS:-600}
SEED=${FUZZ_SEED:-1}
# FUZZ_RUNS=N: stop a target after N executions (FUZZ_SECONDS stays the time cap). With
# the fixed seed this tries a fixed prefix of inputs whatever the machine's speed, e.g.
# a few times the executions CI's 60 s reach, on a loaded machine.
RUNS_ARG=()
[ -n "${FUZZ_RUNS:-}" ] && RUNS_ARG=(-runs="$FUZZ_RUNS")
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" _fuzz.cpp)"); done
fi
summary="$BUILD/fuzz-summary.txt"
: > "$summary"
failed=0
for t in "${targets[@]}"; do
  exe="$BUILD/${t}_fuzz"
  [ -x "$exe" ] || { echo "error: $exe not built (make fuzz builds it)"; exit 2; }
  corpus="$BUILD/corpus/$t"
  art="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$art"
  log="$BUILD/fuzz-$t.log"
  # -rss_limit_mb: the inputs are small; 2 GB catches runaway allocations.
  # -max_len: large enough for the tokenizer.json seed (40 kB).
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    nice "$exe" "$corpus" tests/fuzz/corpus/"$t" -max_total_time="$SECONDS_PER" "${RUNS_ARG[@]}" -seed="$SEED" -rss_limit_mb=2048 \
      -max_len=65536 -timeout=30 -artifact_prefix="$art/" -print_final_stats=1 > "$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  line="$t: rc=$rc execs=${execs:-?} ${cov:-cov: ?} seconds=$SECONDS_PER corpus=$(ls "$corpus" | wc -l)"
  echo "$line" | tee -a "$summary"
  if [ $rc -ne 0 ]; then
    failed=1
    grep -m5 -E 'ERROR|runtime error|fuzz property|deadly|Test unit written' "$log" || true
  fi
done
exit $failed
