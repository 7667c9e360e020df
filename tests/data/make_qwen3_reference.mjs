#!/usr/bin/env node
// Writes the texts behind tests/data/qwen3_reference.jsonl: a fixed, seeded draw
// from the shipped data (Shakespeare passages, GSM8K questions and answers, MBPP
// text and code, HumanEval prompts) plus tricky Unicode (NFD accents, CJK, emoji,
// numbers, whitespace runs, contractions, special tokens) and seeded random
// strings. The ids come from the reference tokenizer, not from this script:
//
//   npm install --prefix /tmp/lenml @lenml/tokenizers
//   node tests/data/make_qwen3_reference.mjs ../shared > /tmp/qwen3_texts.jsonl
//   LENML_NODE_MODULES=/tmp/lenml/node_modules \
//     node ../shared/tools/qwen3_tokenize.mjs --jsonl < /tmp/qwen3_texts.jsonl \
//     > tests/data/qwen3_reference.jsonl
//
// Output: one {"text": ...} per line. Deterministic (its own PRNG, no Date/Math.random).
import { readFileSync } from "node:fs";
import { join } from "node:path";

const shared = process.argv[2] ?? "../shared";
const data = (p) => readFileSync(join(shared, "data", p), "utf8");

// mulberry32: a small seeded PRNG.
let seed = 0x7174656e;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const randint = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
const pick = (arr) => arr[randint(0, arr.length - 1)];

const texts = [];

// Shakespeare: 100 passages of 20..2000 characters at random offsets.
const shakes = data("tinyshakespeare/input.txt");
for (let i = 0; i < 100; ++i) {
  const len = randint(20, 2000);
  const start = randint(0, shakes.length - len);
  texts.push(shakes.slice(start, start + len));
}

const jsonl = (p) => data(p).split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const gsm = jsonl("gsm8k/test.jsonl");
for (let i = 0; i < 60; ++i) texts.push(pick(gsm).question);
for (let i = 0; i < 20; ++i) texts.push(pick(gsm).answer);
const mbpp = jsonl("mbpp/mbpp.jsonl");
for (let i = 0; i < 25; ++i) texts.push(pick(mbpp).text);
for (let i = 0; i < 40; ++i) texts.push(pick(mbpp).code); // \r\n line ends
const he = jsonl("humaneval/HumanEval.jsonl");
for (let i = 0; i < 40; ++i) texts.push(pick(he).prompt);
for (let i = 0; i < 10; ++i) {
  const h = pick(he);
  texts.push(h.prompt + h.canonical_solution);
}

// Hand-picked tricky cases.
const tricky = [
  "", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", "a", "é", "🦙",
  "cafe\u0301", "nai\u0308ve re\u0301sume\u0301", "A\u030Angstro\u0308m", "\u1112\u1161\u11AB\u1100\u1173\u11AF",
  "Vie\u0323\u0302t Nam", "a\u0323\u0301 a\u0301\u0323", "e\u0301\u0301\u0301", "\u0301leading combining",
  "Ω vs \u2126, Å vs \u212B", "ﬁ ligature, ＡＢＣ１２３ fullwidth", "ǅ ǈ ǋ titlecase",
  "日本語のテキストと中文，还有한국어 텍스트", "東京都渋谷区　ideographic　space", "ｶﾀｶﾅ ひらがな カタカナ",
  "中文标点：「引号」《书名》……——", "Привет, мир! Ελληνικά κείμενα.", "مرحبا بالعالم 123", "שלום עולם",
  "नमस्ते दुनिया", "สวัสดีชาวโลก", "Tiếng Việt có dấu", "Ærøskøbing Ðð Þþ ß ẞ",
  "👨‍👩‍👧‍👦 family", "🇯🇵🇺🇸🇩🇪 flags", "👍🏽👍🏿 tones", "1️⃣ #️⃣ keycaps", "❤️ ♥︎ hearts", "🦙🚀🔥💯",
  "emoji🦙inside🚀words", "1234567890", "12345678901234567890", "3.14159 2.71828", "1,000,000.00",
  "-42 +7 1e10 0x1F 0b1010", "٣٤٥ ٠١٢ Arabic-Indic", "Ⅻ ⅻ Roman", "x² y³ ½ ¼", "٫ ٬ separators",
  "a   b    c     d", "word      ", "      word", "\t\tindented\n\t\t\tmore", "line1\n\n\nline2\n",
  "trailing spaces   \n  next", "a \n b \n\n c", "mixed \t \n \r\n whitespace", "x\u00A0\u00A0y non-breaking",
  "em\u2003\u2003spaces\u2009thin", "line\u2028separator\u2029para", "zero\u200Bwidth\u200Cjoiner\u200D",
  "I'm don't won't can't", "WE'LL THEY'RE I'VE HE'D SHE'S", "you'Re it'S We'lL", "O'Neil's rock'n'roll",
  "it’s curly’s", "''s '''", "'s 't 're", "don't\n'tis 'twas",
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
  "<|im_start|><|im_end|><|endoftext|>", "<think>\nhmm\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
  "<|im_start", "im_start|>", "<|im_start|>>", "<<|im_end|>", "<|IM_START|>", "< |im_start| >",
  "text<|endoftext|>more text", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
  "fn main() { println!(\"{}\", x); }", "if (a && b || !c) { return -1; }", "x = [i**2 for i in range(10)]",
  "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Users\\name\\file.txt",
  "∀x∈ℝ: x²≥0 ∑ ∫ √ ∞ ≠ ≈", "→ ← ↑ ↓ ⇒ ⇔", "© ® ™ § ¶ † ‡", "$100 €50 £30 ¥1000 ₹500",
  "!!!???...,,,;;;", "---===+++***", "(((nested)))", "\"quoted\" 'single' `back`",
  // " \uFEFFthe" is left out: JavaScript's \s includes U+FEFF, Unicode's White_Space
  // (PCRE2, Oniguruma in HF tokenizers) does not, so the JS reference splits it
  // differently from Hugging Face; tokenizer_bpe_test.cpp checks HF's ids for it.
  "a\uFEFFb", "a\u0085b next\u0085line", "ctrl\u0001\u0002\u001F\u007Fchars", "tab\there",
  "ſ long s it'ſ", "K Kelvin \u212A", "ﬀ ﬃ ligatures", "Ⓐ ⓑ circled",
  "αβγ ΑΒΓ", "ÀÉÎÕÜ àéîõü", "ÇÑ çñ", "İstanbul ıi", "Straße STRASSE",
];
texts.push(...tricky);
// Long pieces (the heap merge path) and long whitespace runs.
texts.push("a".repeat(3000), " ".repeat(1000) + "x", "=".repeat(500), "ab".repeat(700),
  "\n".repeat(300) + "end", "9".repeat(400), "supercalifragilisticexpialidocious".repeat(20));

// NFD versions of accented text (the tokenizer must normalise them to NFC).
const accented = [
  "café naïve résumé", "Ångström Øresund", "Tiếng Việt có dấu", "Crème brûlée à la française",
  "한국어 텍스트", "São Paulo, Zürich, Kraków", "ÀÉÎÕÜ àéîõü ÇÑ çñ",
];
for (const s of accented) texts.push(s.normalize("NFD"));

// Seeded random strings over assorted scripts, marks, digits and whitespace.
const ranges = [
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x30, 0x39], [0xa0, 0xff], [0x100, 0x17f],
  [0x300, 0x36f], [0x391, 0x3c9], [0x410, 0x44f], [0x5d0, 0x5ea], [0x621, 0x64a], [0x660, 0x669],
  [0x905, 0x939], [0xe01, 0xe30], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0xff01, 0xff5e], [0x2000, 0x200a], [0x2010, 0x2027], [0x2190, 0x21ff],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5],
];
const spaces = [" ", " ", "  ", "\n", "\t", "\r\n", "   "];
for (let i = 0; i < 60; ++i) {
  const n = randint(1, 60);
  let s = "";
  for (let k = 0; k < n; ++k) {
    if (rand() < 0.15) {
      s += pick(spaces);
      continue;
    }
    const [lo, hi] = pick(ranges);
    s += String.fromCodePoint(randint(lo, hi));
  }
  if (rand() < 0.1) s += pick(["<|im_start|>", "<|im_end|>", "<think>"]);
  texts.push(s);
}

// Random words of ASCII letters, digits and punctuation with whitespace runs.
const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'.,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`";
for (let i = 0; i < 30; ++i) {
  let s = "";
  const n = randint(5, 200);
  for (let k = 0; k < n; ++k) s += rand() < 0.2 ? pick(spaces) : alpha[randint(0, alpha.length - 1)];
  texts.push(s);
}

process.stdout.write(texts.map((text) => JSON.stringify({ text })).join("\n") + "\n");
