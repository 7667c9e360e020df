#!/usr/bin/env bash
# titan's generator (bench/engine_bench.cpp) vs llama.cpp (bench/llamacpp/bench.mjs, the
# prebuilt CPU binary of node-llama-cpp) on the llama3 `small` shapes, f32 weights (DTYPE=bf16:
# bf16 on both sides), 2 threads,
# measured alternately in one run (llama.cpp, titan, llama.cpp, titan, ... per case), and
# judged against the generator's targets. Results: docs/benchmarks.md, "Generator".
#
#   bench/generator_vs_llamacpp.sh                  # BUILD=build ROUNDS=2
#   BUILD=build-llama ROUNDS=3 bench/generator_vs_llamacpp.sh
#
# Environment:
#   BUILD    titan build folder (default build); engine_bench is built there with ninja
#   ROUNDS   alternations per case (default 2)
#   FLAVOR   small (default), 100m or qwen3_0.6b: the shapes on both sides (titan:
#            ENGINE_BENCH_MODEL llama3:small / llama3:100m / qwen3:qwen3_0.6b; llama.cpp:
#            make_gguf.py --flavor). KV_MIB: titan's KV pool (default 256; 1024 for qwen3_0.6b)
#   DTYPE    f32 (default) or bf16: titan's weights and compute (ENGINE_BENCH_DTYPE: bf16
#            compute with bf16 weight panels; the tied LM head stays f32) and the GGUF's 2-D
#            weights. GGUF_DTYPE overrides the GGUF's alone (f32, f16 or bf16)
#   GGUF     the llama.cpp model (default $BUILD/llamacpp/titan_$FLAVOR.gguf for f32,
#            titan_${FLAVOR}_$GGUF_DTYPE.gguf otherwise; made by bench/make_gguf.py if missing)
#   PRIO     scheduling prefix for both sides (default "nice -n -10" when root, else empty):
#            on this shared 2-core VM other processes preempt one of the two compute
#            threads; ggml's spinning barrier then stalls (llama.cpp at 2 threads fell to
#            1 tok/s at load 5). Do NOT use SCHED_FIFO (chrt -f) for llama.cpp: its spinning
#            threads at real-time priority livelocked with node's own threads (B = 64 ran
#            for 11 minutes and starved the machine). Every run has a 300 s timeout.
#   CASES    subset of "prefill512 decode1 decode8 decode64" (default all four)
#   KV       llama.cpp KV cache type f16 (llama.cpp's default) or f32 (titan's); default f16
#   OUT      folder for the raw JSON of every run (default $BUILD/llamacpp/runs)
#   SUMMARY_ONLY=1  run nothing: print the table from the JSON already in OUT
# A run that fails or hits the 300 s timeout is reported and skipped (no JSON, no row).
# Cases: Prefill512, Decode/1, Decode/8, Decode/64 (titan: every BM_Decode/B/* variant that
# engine_bench has, "logits lp" = logprobs_from_hidden false, "titan::logprobs" = true;
# llama.cpp: llama_decode only, and wall per step including its sampler and the node
# bindings). Targets are judged against llama_decode only (what llama-bench reports).
# See bench/llamacpp/bench.mjs for the llama.cpp side.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-2}
CASES=${CASES:-prefill512 decode1 decode8 decode64}
KV=${KV:-f16}
FLAVOR=${FLAVOR:-small}
case "$FLAVOR" in
  small | 100m) ENGINE_BENCH_MODEL=llama3:$FLAVOR ;;
  qwen3_0.6b) ENGINE_BENCH_MODEL=qwen3:$FLAVOR ;;
  *) echo "generator_vs_llamacpp.sh: FLAVOR must be small, 100m or qwen3_0.6b, got '$FLAVOR'" >&2; exit 2 ;;
esac
DTYPE=${DTYPE:-f32}
case "$DTYPE" in
  f32) unset ENGINE_BENCH_DTYPE ;;
  bf16) export ENGINE_BENCH_DTYPE=bf16 ;;
  *) echo "generator_vs_llamacpp.sh: DTYPE must be f32 or bf16, got '$DTYPE'" >&2; exit 2 ;;
esac
GGUF_DTYPE=${GGUF_DTYPE:-$DTYPE}
case "$GGUF_DTYPE" in
  f32 | f16 | bf16) ;;
  *) echo "generator_vs_llamacpp.sh: GGUF_DTYPE must be f32, f16 or bf16, got '$GGUF_DTYPE'" >&2; exit 2 ;;
esac
export ENGINE_BENCH_MODEL ENGINE_BENCH_KV_MIB=${KV_MIB:-256}
if [[ "$GGUF_DTYPE" == f32 ]]; then
  GGUF=${GGUF:-$BUILD/llamacpp/titan_$FLAVOR.gguf}
else
  GGUF=${GGUF:-$BUILD/llamacpp/titan_${FLAVOR}_$GGUF_DTYPE.gguf}
fi
OUT=${OUT:-$BUILD/llamacpp/runs}
if [[ -z "${PRIO+x}" ]]; then
  if [[ $(id -u) == 0 ]]; then PRIO="nice -n -10"; else PRIO=""; fi
fi

if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$BUILD" -j2 engine_bench >/dev/null
mkdir -p "$(dirname "$GGUF")" "$OUT"
[[ "${SUMMARY_ONLY:-0}" == 1 ]] && CASES="" || rm -f "$OUT"/*.json
[[ -f "$GGUF" ]] || /usr/bin/python3 bench/make_gguf.py "$GGUF" --flavor "$FLAVOR" --dtype "$GGUF_DTYPE"
if [[ ! -d bench/llamacpp/node_modules/@node-llama-cpp/linux-x64 ]]; then
  # .npmrc: omit=optional (no CUDA/Vulkan packages) and ignore-scripts=true (no postinstall
  # download/compile); the prebuilt CPU binaries come with @node-llama-cpp/linux-x64.
  # `npm install` (not `npm ci`): npm leaves the other platforms' optional packages out of
  # the lock file and `npm ci` then refuses it; `npm install` follows the lock unchanged.
  (cd bench/llamacpp && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund)
fi

declare -A FILTER=(
  [prefill512]='BM_Prefill512'
  [decode1]='BM_Decode/1/'
  [decode8]='BM_Decode/8/'
  [decode64]='BM_Decode/64/'
)
echo "titan weights: $DTYPE; GGUF: $GGUF ($GGUF_DTYPE)"
echo "prio: ${PRIO:-none}; machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for case in $CASES; do
  for ((r = 1; r <= ROUNDS; ++r)); do
    echo "[$(date -u +%T)] $case round $r: llama.cpp (load $(cut -d' ' -f1 /proc/loadavg))"
    timeout 300 $PRIO node bench/llamacpp/bench.mjs --model "$GGUF" --cases "$case" --threads 2 --kv "$KV" \
      >"$OUT/llama_${case}_$r.json" 2>"$OUT/llama_${case}_$r.log" ||
      { echo "  llama.cpp $case round $r failed or timed out (exit $?): skipped"; rm -f "$OUT/llama_${case}_$r.json"; }
    echo "[$(date -u +%T)] $case round $r: titan (load $(cut -d' ' -f1 /proc/loadavg))"
    timeout 300 $PRIO "$BUILD/bench/engine_bench" --benchmark_filter="${FILTER[$case]}" \
      --benchmark_out="$OUT/titan_${case}_$r.json" --benchmark_out_format=json \
      >"$OUT/titan_${case}_$r.log" 2>&1 ||
      { echo "  titan $case round $r failed or timed out (exit $?): skipped"; rm -f "$OUT/titan_${case}_$r.json"; }
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$OUT" "$ROUNDS" <<'EOF'
import glob, json, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median

def titan(case, prefix):
    v = []
    for f in sorted(glob.glob(f"{out}/titan_{case}_*.json")):
        for b in json.load(open(f))["benchmarks"]:
            if b["name"].startswith(prefix):
                v.append(b["tok/s"])
    return v

def llama(case, key):
    v, d = [], None
    for f in sorted(glob.glob(f"{out}/llama_{case}_*.json")):
        d = json.load(open(f))
        v.append(d["cases"][case][key])
    return v, d

# engine_bench's BM_Decode/B/F: F = 0 logprobs from the sampling logits ("logits lp"),
# F = 1 titan::logprobs on the hidden rows (one more LM-head pass); same bits.
rows = [  # (label, case, titan prefix, llama key, target ratio)
    ("prefill 512", "prefill512", "BM_Prefill512", "tok/s", 1.4),
    ("decode B=1, logits lp", "decode1", "BM_Decode/1/0/", "decode_only_tok/s", 0.95),
    ("decode B=1, titan::logprobs", "decode1", "BM_Decode/1/1/", "decode_only_tok/s", 0.95),
    ("decode B=8, logits lp", "decode8", "BM_Decode/8/0/", "decode_only_tok/s", 1.5),
    ("decode B=8, titan::logprobs", "decode8", "BM_Decode/8/1/", "decode_only_tok/s", 1.5),
    ("decode B=64, logits lp", "decode64", "BM_Decode/64/0/", "decode_only_tok/s", None),
    ("decode B=64, titan::logprobs", "decode64", "BM_Decode/64/1/", "decode_only_tok/s", None),
]
info = None
print()
print("| case | titan tok/s | llama.cpp tok/s (llama_decode) | ratio | llama.cpp tok/s (wall, sampler + bindings) | ratio vs wall | target | status |")
print("|---|---|---|---|---|---|---|---|")
for label, case, prefix, key, target in rows:
    t = titan(case, prefix)
    l, info = llama(case, key)
    lw, _ = llama(case, "tok/s")
    if not t or not l:
        continue
    ratio, ratio_w = med(t) / med(l), med(t) / med(lw)
    fmt = lambda xs: f"{med(xs):.1f} ({', '.join(f'{x:.0f}' for x in xs)})"
    st = "" if target is None else ("met" if ratio >= target else "not met")
    tg = "" if target is None else f">= {target}x"
    print(f"| {label} | {fmt(t)} | {fmt(l)} | {ratio:.2f}x | {fmt(lw)} | {ratio_w:.2f}x | {tg} | {st} |")
print()
print("Medians over the rounds (each round's value in parentheses); prefill: llama.cpp wall ="
      " llama_decode of the 512-token ubatch + one sample; 'llama_decode' column = the same.")
if info:
    print(f"llama.cpp: node-llama-cpp {info['node_llama_cpp']}, {info['llama_cpp']['repo']} "
          f"{info['llama_cpp']['release']} ({info['build_type']}), backend {info['cpu_backend']}, "
          f"gpu={info['gpu']}, threads {info['threads']}, KV cache {info['kv_cache']}")
    print(f"system_info: {info['system_info']}")
for case in ("prefill512", "decode1", "decode8", "decode64"):
    files = sorted(glob.glob(f"{out}/llama_{case}_*.json"))
    if files:
        c = json.load(open(files[-1]))["cases"][case]
        if case == "prefill512":
            print(f"llama.cpp prefill512 (last round): wall {c['wall_ms']} ms, {c['llama_perf'][0]}")
            continue
        print(f"llama.cpp {case} (last round): step {c['step_ms']} ms, llama_decode {c['decode_step_ms']} ms,"
              f" one sampler call {c['sample_call_ms']} ms, tokens per llama_decode {c['tokens_per_decode']};"
              f" llama_perf: {max(c['llama_perf'], key=lambda l: int(l.split('/')[1].split()[0]))}")
EOF
