#!/usr/bin/env bash
# Peer numbers for docs/benchmarks.md "Tokenizer": the npm reference tokenizer
# (@lenml/tokenizers, what ../shared/tools/qwen3_tokenize.mjs runs) and, when
# installed, Hugging Face tokenizers' Node binding (Rust), encoding the same
# text single-threaded; then checks that `titan tokenize` gives the same ids.
#   npm install --prefix /tmp/lenml @lenml/tokenizers
#   npm install --prefix /tmp/hftok tokenizers          (optional)
#   LENML_NODE_MODULES=/tmp/lenml/node_modules HF_TOKENIZERS_NODE_MODULES=/tmp/hftok/node_modules \
#     bench/tokenizer_reference.sh build [text-file]
set -euo pipefail
build=${1:-build}
data=${TITAN_DATA:-${TITAN_SHARED:+$TITAN_SHARED/data}}
data=${data:-$(cd "$(dirname "$0")/.." && pwd)/data}
text=${2:-$data/tinyshakespeare/input.txt}
tok=$data/qwen3-tokenizer
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

RAYON_NUM_THREADS=1 node - "$tok" "$text" "$out" <<'JS'
const [tokDir, textPath, out] = process.argv.slice(2);
const { readFileSync, writeFileSync } = require("fs");
const { join, resolve } = require("path");
const { createRequire } = require("module");
const text = readFileSync(textPath, "utf8");
const bytes = Buffer.byteLength(text);
// Process CPU time (user + system, all threads) in ms: wall time is unreliable on a busy machine.
const cpu_ms = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e3; };
const rate = (ms) => `${ms.toFixed(0)} ms CPU, ${(bytes / 1e6 / (ms / 1e3)).toFixed(2)} MB/s`;
const time = (f) => { const t = cpu_ms(); const r = f(); return [r, cpu_ms() - t]; };
(async () => {
  const nm = process.env.LENML_NODE_MODULES;
  if (nm) {
    const { TokenizerLoader } = createRequire(join(resolve(nm), "..", "noop.js"))("@lenml/tokenizers");
    const tok = TokenizerLoader.fromPreTrained({
      tokenizerJSON: JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8")),
      tokenizerConfig: JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8")),
    });
    const enc = () => Array.from(tok.encode(text, { add_special_tokens: false }), Number);
    const [ids, cold] = time(enc);
    const [, warm] = time(enc);
    console.log(`@lenml/tokenizers: ${bytes} bytes -> ${ids.length} tokens; first call ${rate(cold)}; second call ${rate(warm)}`);
    writeFileSync(join(out, "lenml.json"), JSON.stringify(ids) + "\n");
  }
  const hf = process.env.HF_TOKENIZERS_NODE_MODULES;
  if (hf) {
    const { Tokenizer } = createRequire(join(resolve(hf), "..", "noop.js"))("tokenizers");
    const tok = Tokenizer.fromFile(join(tokDir, "tokenizer.json"));
    const enc = async () => Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
    let t = cpu_ms();
    const ids = await enc();
    const cold = cpu_ms() - t;
    t = cpu_ms();
    await enc();
    const warm = cpu_ms() - t;
    console.log(`HF tokenizers (Rust, Node binding): ${bytes} bytes -> ${ids.length} tokens; first call ${rate(cold)}; second call ${rate(warm)}`);
    writeFileSync(join(out, "hf.json"), JSON.stringify(ids) + "\n");
    // HF is faster on many short inputs than on one long one: also the text cut
    // into paragraphs, encoded as one batch (RAYON_NUM_THREADS=1 keeps it on one core).
    const paras = text.split(/(?<=\n\n)/);
    t = cpu_ms();
    await tok.encodeBatch(paras, { addSpecialTokens: false });
    const batch = cpu_ms() - t;
    console.log(`HF tokenizers, ${paras.length} paragraphs in one encodeBatch: ${rate(batch)}`);
  }
})();
JS

"$build/titan" tokenize --tokenizer "$tok" < "$text" > "$out/titan.json"
for ref in lenml hf; do
  [ -f "$out/$ref.json" ] || continue
  if cmp -s "$out/$ref.json" "$out/titan.json"; then echo "titan ids == $ref ids"; else echo "titan ids != $ref ids"; exit 1; fi
done
