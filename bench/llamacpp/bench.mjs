// llama.cpp peer for titan's generator benchmark (bench/engine_bench.cpp), through
// node-llama-cpp's prebuilt linux-x64 CPU binary (package.json pins the version).
//
//   cd bench/llamacpp && npm install     # .npmrc: no optional GPU packages, no install scripts
//   node bench/llamacpp/bench.mjs --model small.gguf [--cases prefill512,decode1,decode8,decode64]
//        [--threads 2] [--reps 3] [--decode-tokens 48] [--prompt 96] [--kv f16|f32] [--temperature 1]
//
// Cases (same shapes as engine_bench's BM_Prefill512 / BM_Decode):
//   prefill512  one 512-token prompt of random ids on an empty sequence (KV cleared), timed
//               until the first generated token is out (llama.cpp: one 512-token ubatch,
//               logits of the last row only, one sample). Median of --reps.
//   decodeB     B sequences in one context, each a --prompt-token random prompt; after every
//               sequence has its first token, the next --decode-tokens tokens of every
//               sequence are timed (contexts --prompt .. --prompt + decode-tokens, as in
//               engine_bench). node-llama-cpp queues the B sequences' next tokens into one
//               llama_decode call per step ("nextCycle" dispatch); the script counts the
//               decode calls and their token counts to prove it (tokens_per_decode == B).
//               Median of --reps.
// Sampling: temperature 1, top-k 0 (whole vocabulary), top-p 1, min-p 0 (the RL setting of
// engine_bench); --temperature 0 = greedy.
//
// Per case it reports wall tok/s and the time spent inside llama_decode (the addon's
// decodeBatch promise), so "js_overhead" = 1 - decode time / wall time is the bindings'
// per-step cost (batch assembly, sampling call, promise hops). llama.cpp's own
// llama_perf_context timings (captured from its log) are printed too.
// Output: one JSON line on stdout; progress and llama.cpp log lines on stderr.
import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function parseArgs(argv) {
  const a = { model: "", cases: "prefill512,decode1,decode8,decode64", threads: 2, reps: 3,
              decodeTokens: 48, prompt: 96, kv: "f16", temperature: 1, seed: 1 };
  for (let i = 2; i < argv.length; ++i) {
    const k = argv[i], v = argv[i + 1];
    const need = () => { if (v === undefined) fail(`missing value for ${k}`); ++i; return v; };
    if (k === "--model") a.model = need();
    else if (k === "--cases") a.cases = need();
    else if (k === "--threads") a.threads = Number(need());
    else if (k === "--reps") a.reps = Number(need());
    else if (k === "--decode-tokens") a.decodeTokens = Number(need());
    else if (k === "--prompt") a.prompt = Number(need());
    else if (k === "--kv") a.kv = need();
    else if (k === "--temperature") a.temperature = Number(need());
    else if (k === "--seed") a.seed = Number(need());
    else fail(`unknown argument ${k}`);
  }
  if (!a.model) fail("--model is required");
  if (!["f16", "f32"].includes(a.kv)) fail(`--kv must be f16 or f32, got ${a.kv}`);
  return a;
}

function fail(msg) {
  console.error(`bench.mjs: ${msg}`);
  process.exit(2);
}

const median = (xs) => { const s = [...xs].sort((x, y) => x - y); const n = s.length;
                         return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]); };
const now = () => Number(process.hrtime.bigint()) / 1e9;

// Deterministic random token ids in [3, vocab) (skips <unk>, <s>, </s>).
function randomTokens(n, seed, vocab) {
  let x = (seed * 2654435761 + 12345) >>> 0;
  const t = new Array(n);
  for (let i = 0; i < n; ++i) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    t[i] = 3 + (x % (vocab - 3));
  }
  return t;
}

// Counts llama_decode calls (addon decodeBatch), their tokens and the time inside them.
function instrument(context) {
  const ctx = context._ctx;  // internal addon handle (read-only methods): proxied, never driven directly
  const st = { calls: 0, tokens: 0, decodeS: 0, sampleS: 0, samples: 0, pending: 0 };
  const wrapped = {
    addToBatch(seq, first, tokens, logitIdx) { st.pending += tokens.length; return ctx.addToBatch(seq, first, tokens, logitIdx); },
    async decodeBatch() {
      const t0 = now();
      try { return await ctx.decodeBatch(); }
      finally { st.decodeS += now() - t0; st.calls += 1; st.tokens += st.pending; st.pending = 0; }
    },
    async sampleToken(...a) {  // llama.cpp's sampler chain on one row, in a worker thread
      const t0 = now();
      try { return await ctx.sampleToken(...a); }
      finally { st.sampleS += now() - t0; st.samples += 1; }
    },
  };
  context._ctx = new Proxy(ctx, {
    get(target, prop) {
      if (Object.hasOwn(wrapped, prop)) return wrapped[prop];
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { reset() { Object.assign(st, { calls: 0, tokens: 0, decodeS: 0, sampleS: 0, samples: 0 }); }, get: () => ({ ...st }) };
}

async function main() {
  const args = parseArgs(process.argv);
  const perfLines = [];
  const infoLines = [];
  const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    maxThreads: args.threads, logLevel: LlamaLogLevel.info,
    logger(level, message) {
      const m = message.trimEnd();
      if (m.includes("llama_perf_context_print")) perfLines.push(m);
      else if (level === LlamaLogLevel.error || level === LlamaLogLevel.warn) console.error(m);
      else if (/backend|CPU :|system_info|[Ff]lash|n_ubatch|n_batch|llama_kv_cache:|n_threads|graph/.test(m)) infoLines.push(m);
    },
  });
  if (llama.gpu !== false) fail(`expected the CPU backend, got gpu=${llama.gpu}`);
  // The synthetic vocabulary (bench/make_gguf.py) does not round-trip text; the benchmark
  // feeds token ids only, so node-llama-cpp's tokenizer check warning is irrelevant.
  const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0, useMmap: true,
                                        checkTensors: false });
  const vocab = model.tokens.nTokens ?? 32000;
  // Which ggml CPU variant the dynamic backend loader picked (haswell = AVX2+FMA build).
  const cpuBackends = [...new Set(fs.readFileSync("/proc/self/maps", "utf8").split("\n")
    .map((l) => l.match(/\/(libggml-cpu[^/]*\.so)$/)?.[1]).filter(Boolean))];
  const kvType = args.kv === "f32" ? "F32" : "F16";
  const sampling = args.temperature > 0
    ? { temperature: args.temperature, topK: 0, topP: 1, minP: 0, seed: args.seed }
    : { temperature: 0 };

  const out = {
    peer: "llama.cpp", node_llama_cpp: JSON.parse(fs.readFileSync(
      new URL("./node_modules/node-llama-cpp/package.json", import.meta.url), "utf8")).version,
    llama_cpp: llama.llamaCppRelease, build_type: llama.buildType, gpu: llama.gpu,
    system_info: llama.systemInfo, cpu_backend: cpuBackends, threads: args.threads, kv_cache: kvType,
    cpu: os.cpus()[0]?.model, model: args.model, cases: {},
  };

  async function makeContext(sequences, contextSize) {
    const context = await model.createContext({
      contextSize, sequences, batchSize: 512, threads: { ideal: args.threads, min: args.threads },
      flashAttention: "auto", performanceTracking: true,
      experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
    });
    if (context.idealThreads !== args.threads) fail(`context threads ${context.idealThreads} != ${args.threads}`);
    return context;
  }

  async function timings(context) {
    perfLines.length = 0;
    await context.printTimings();  // llama_perf_context_print + reset
    return perfLines.map((l) => l.replace(/^llama_perf_context_print:\s*/, ""))
                    .filter((l) => /eval time/.test(l));
  }

  for (const name of args.cases.split(",")) {
    if (name === "prefill512") {
      const context = await makeContext(1, 1024);
      const ins = instrument(context);
      const seq = context.getSequence();
      const walls = [], decs = [];
      for (let r = 0; r <= args.reps; ++r) {  // r = 0: warm-up
        await seq.clearHistory();
        const prompt = randomTokens(512, 1000 + r, vocab);
        ins.reset();
        const t0 = now();
        for await (const tok of seq.evaluate(prompt, sampling)) { void tok; break; }
        const wall = now() - t0;
        if (r > 0) { walls.push(wall); decs.push(ins.get().decodeS); }
        if (r === 0) await timings(context);
      }
      const s = ins.get();
      out.cases.prefill512 = { "tok/s": 512 / median(walls), wall_ms: walls.map((w) => +(1e3 * w).toFixed(1)),
                               decode_ms: +(1e3 * median(decs)).toFixed(1),
                               decode_calls_last: s.calls, js_overhead: +(1 - median(decs) / median(walls)).toFixed(3),
                               llama_perf: await timings(context), flash_attention: context.flashAttention };
      await context.dispose();
    } else if (/^decode\d+$/.test(name)) {
      const B = Number(name.slice(6));
      const ctxSize = args.prompt + (args.reps + 1) * (args.decodeTokens + 8) + 64;
      const context = await makeContext(B, ctxSize);
      const ins = instrument(context);
      const seqs = Array.from({ length: B }, () => context.getSequence());
      const iters = seqs.map((s, i) => s.evaluate(randomTokens(args.prompt, 10 + i, vocab),
                                                  { ...sampling, seed: args.seed + i })[Symbol.asyncIterator]());
      // All sequences step together: one next() per sequence per step, so node-llama-cpp
      // queues B single-token evaluations in one cycle and decodes them as one batch.
      const step = () => Promise.all(iters.map((it) => it.next()));
      await step();  // prompts prefilled, first token of each sequence out
      await timings(context);
      const walls = [], decs = [], samps = [], tpd = [];
      for (let r = 0; r < args.reps; ++r) {
        ins.reset();
        const t0 = now();
        for (let k = 0; k < args.decodeTokens; ++k) await step();
        walls.push(now() - t0);
        const s = ins.get();
        decs.push(s.decodeS);
        samps.push(s.sampleS / s.samples);
        tpd.push(s.tokens / s.calls);
      }
      const wall = median(walls);
      const ms = (x) => +(1e3 * x).toFixed(2);
      // decode_step_ms: inside llama_decode; sample_call_ms: one sampler call (B of them per
      // step, run concurrently in libuv workers); the rest of step_ms is the bindings' hops.
      out.cases[name] = { "tok/s": (B * args.decodeTokens) / wall, step_ms: ms(wall / args.decodeTokens),
                          decode_step_ms: ms(median(decs) / args.decodeTokens),
                          "decode_only_tok/s": (B * args.decodeTokens) / median(decs),
                          sample_call_ms: ms(median(samps)),
                          tokens_per_decode: Math.min(...tpd), js_overhead: +(1 - median(decs) / wall).toFixed(3),
                          walls_s: walls.map((w) => +w.toFixed(3)), llama_perf: await timings(context),
                          flash_attention: context.flashAttention };
      for (const it of iters) await it.return?.();
      await context.dispose();
    } else {
      fail(`unknown case ${name}`);
    }
    console.error(`bench.mjs: ${name}: ${JSON.stringify(out.cases[name])}`);
  }
  out.llama_log = [...new Set(infoLines)].slice(0, 40);
  process.stdout.write(JSON.stringify(out) + "\n");
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => { console.error(e?.stack ?? String(e)); process.exit(1); });
