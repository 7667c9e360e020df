#!/usr/bin/env bash
# Writes tests/data/qwen3_decode_reference.jsonl: id lists (partial UTF-8
# sequences, special tokens, seeded random ids) and the text the reference
# tokenizer decodes them to ({"ids": [...], "text": "..."} per line).
#   npm install --prefix /tmp/lenml @lenml/tokenizers
#   LENML_NODE_MODULES=/tmp/lenml/node_modules tests/data/make_qwen3_decode_reference.sh ../shared \
#     > tests/data/qwen3_decode_reference.jsonl
set -euo pipefail
shared=${1:-../shared}
node -e '
let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const lists = [
  [11162], [11162, 99], [11162, 99, 247], [99, 247], [255], [126], [128, 129], [151644, 11162],
  [11162, 151645], [9707, 1879], [151644, 872, 198, 151645], [145836], [136, 145836], [1879, 99, 1879],
];
// ids 0..255 are mostly single bytes: random runs of them make invalid UTF-8.
for (let i = 0; i < 20; ++i) {
  const n = 1 + Math.floor(rand() * 12);
  lists.push(Array.from({ length: n }, () => Math.floor(rand() * 256)));
}
for (let i = 0; i < 20; ++i) {
  const n = 1 + Math.floor(rand() * 20);
  lists.push(Array.from({ length: n }, () => Math.floor(rand() * 151669)));
}
for (const l of lists) console.log(JSON.stringify(l));
' | while read -r ids; do
  text=$(printf '%s' "$ids" | node "$shared/tools/qwen3_tokenize.mjs" --decode)
  printf '{"ids":%s,"text":%s}\n' "$ids" "$text"
done
