// Blocked, packed SIMD GEMM (per ISA). The public entry points and their contract are
// in titan/kernels/cpu/gemm.h; this file holds the microkernel and the loop nest.
//
// Arithmetic (the batch-invariance contract, DESIGN.md §1.2): every C[m][n] is
//   c = (accumulate ? C[m][n] : +0.0f);  for k = 0..K-1: c = fma(A[m][k], B[k][n], c)
// one exactly-rounded FMA per k, k ascending, the whole chain in one register lane.
// K is cut into KC chunks; between chunks the fp32 partial is stored to C and loaded
// back, which changes no bit. Rows are never combined, so the result of row m cannot
// depend on M, on the row's position, on the tile it falls in, or on the thread count.
// Row tails (M % MR) run the same microkernel body instantiated for fewer rows (each
// computed lane is the same chain); column tails (N % NR) compute on zero-padded B
// columns and mask the C loads/stores. Threads split M and N blocks only.
//
// Blocking (Goto & van de Geijn, "Anatomy of High-Performance Matrix Multiplication",
// ACM TOMS 2008; BLIS loop order). Decode with at most W rows and fp32 "NT" weights
// (run_lanes) is not cut into row x column tasks: all M rows are the vector lanes; each
// weight is broadcast straight from its (N, K) row, with no packing, into kLaneCols
// accumulators (one per output column, lane m = row m); the next kLaneCols weight rows,
// one contiguous span, are prefetched in address order; threads take column chunks.
// Otherwise each task owns a range of rows x a range of columns:
//  - many rows (run_blocked; run_shared when every thread would get more than
//    kMediumRows: the B block is packed once by all threads together and the MC-row
//    blocks are claimed at run time):
//      for jc (NC cols): for pc (KC of K): pack B block (KC x NC, L3)
//        for ic (MC rows): pack A block (MC x KC, L2)
//          for jr (NR cols): for ir (MR rows): microkernel, C tile in registers
//  - few rows (more than W, or bf16 weights), decode (run_few_rows): A packed once for
//    all K; for every NR-wide weight panel, for pc (KCF = 64): pack the KCF x NR
//    micro-panel into L1 and run the few row panels on it at once, so each weight is streamed from
//    memory exactly once with no large packed copy. The panel two ahead is prefetched line by line
//    in address order meanwhile (a sequential stream the memory system serves at
//    near its read bandwidth; the 16 interleaved row streams alone got ~60 % of it);
//  - few rows with fp32 "NN" B, and medium rows (run_row_block): all rows packed per K
//    chunk, each B micro-panel used by all of them at once (NN panels read in place).
//  - weights repacked into panels (gemm_pack_panels: the packed-B layout over all of K):
//    no B packing anywhere; up to kFewRows rows, run_panel_rows streams each panel once
//    in address order (threads claim column chunks); more rows (per task) run
//    run_row_block / run_blocked reading the micro-panels in place.
// Which path runs depends on the row count, but every path computes each element
// with the same chain, so the bits do not (tests compare every path to the scalar chain).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "titan/core/thread_pool.h"
#include "titan/kernels/cpu/isa/gemm_pack.h"
#include "titan/kernels/cpu/isa/simd.h"

namespace titan::kernels::cpu::TITAN_ISA_NS {
using namespace simd::native;  // lane-wise: one FMA chain per element of C (simd.h)

namespace {

constexpr int NV = 2;        // vectors per C-tile row
constexpr int NR = NV * W;   // C-tile columns: 16 (AVX2), 32 (AVX-512)
#if defined(TITAN_ISA_AVX512)
constexpr int MR = 14;       // 28 zmm accumulators + 2 B + 1 broadcast of 32
constexpr int64_t MC = 14 * 16;
// KC = 512 (B micro-panel 64 KiB, past the 48 KiB L1 but streamed from L2; A block
// 448 KiB in L2): the fastest KC for the GEMMs of a `small` training step on an AVX-512
// Zen5 core (the KC x MC grid is in docs/benchmarks-history.md, Training).
constexpr int64_t KC = 512;
#else
constexpr int MR = 6;        // 12 ymm accumulators + 2 B + 1 broadcast of 16
// KC = 512 (B micro-panel 32 KiB, A block 144 KiB in L2) halves the reloads of the C
// tile between K chunks; on the Zen3 machine it measured 0.95x (1 thread) / 0.93x
// (2 threads) of OpenBLAS on average vs 0.91x / 0.86x with KC = 256, MC = 144.
constexpr int64_t MC = 6 * 12;
constexpr int64_t KC = 512;
#endif
constexpr int64_t NC = 2048;  // B block KC x NC: 2-4 MiB, in L3
constexpr int64_t kFewRows = 4 * MR;  // up to this many rows: the streaming (decode) path
constexpr int64_t kMediumRows = 2 * MC;  // up to this many: run_row_block (A chunk in L2)
// Decode path (few rows): K chunk of the streamed weights (short, so that packing, which
// waits on memory, and the FMAs alternate finely), and how many NR-wide weight panels
// ahead the task prefetches, in address order (one sequential stream per thread).
constexpr int64_t KCF = 64;
constexpr int64_t kPrefetchPanels = 2;
// Rows-in-lanes decode path: output columns per accumulator group (8 chains of
// latency 4 keep both FMA pipes busy), and the K step between prefetch slices.
constexpr int kLaneCols = 8;
constexpr int64_t kLaneKStep = 16;
constexpr int64_t kLaneChunk = 64;  // columns per work chunk of run_lanes / run_panel_rows
// Decode with repacked weights: K rows of a weight panel per microkernel call (16 KiB
// of an AVX2 panel, in L1 for the next row panel; 32 KiB on AVX-512, untuned).
constexpr int64_t kPanelKC = 256;
static_assert(kLaneChunk % NR == 0, "run_panel_rows: column chunks must start on a panel");
// ... and how far ahead of its reads the first row panel prefetches the weight stream
// (bytes; at M = 8 on the Zen3 machine the stream ran ~10 % slower without it), and the
// other row panels (12 KiB: +10-12 % at M = 8, 12 and 24 on the qwen3_0.6b layer set vs
// no prefetch there, docs/benchmarks-history.md; 8, 16 and 20 KiB gained less).
constexpr int64_t kPanelAhead = 4096;
constexpr int64_t kPanelAheadRest = 3 * kPanelAhead;

// kPanelF32: fp32 weights (N, K) repacked by gemm_pack_panels: panel j = columns
// [j * NR, j * NR + NR) as K rows of NR floats (zero past N), panels back to back; every
// micro-panel is then read in place, in address order.
enum BKind : int { kNtF32 = 0, kNnF32 = 1, kNtBf16 = 2, kNnBf16 = 3, kPanelF32 = 4 };

// Lanes of vector j that hold real columns when the tile has nv valid columns.
inline int lanes(int nv, int j) { return std::clamp(nv - j * W, 0, W); }

// C tile (ROWS x NR) += A panel (ROWS x kc, packed [k][MR]) * B panel (kc x NR, row
// stride bs floats). load_c = false starts every chain at +0.0f. nv < NR masks C.
// PF: with each B row, the B row pf_bytes further on is prefetched into L1 (a B stream
// read once, in address order: the repacked-weight decode path).
template <int ROWS, bool PF>
[[gnu::always_inline]] inline void microkernel_body(int64_t kc, const float* __restrict a,
                                                    const float* __restrict b, int64_t bs,
                                                    float* __restrict c, int64_t ldc, int nv,
                                                    bool load_c, int64_t pf_bytes) {
  vf acc[ROWS][NV];
  if (!load_c) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = zero();
  } else if (nv == NR) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = load(c + r * ldc + j * W);
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = load_n(c + r * ldc + j * W, lanes(nv, j));
  }
#pragma GCC unroll 4  // immediate offsets for a and b: ~10 % faster on Zen3 (same ops per chain)
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (PF)
      for (int l = 0; l < NR * 4 / 64; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(b) + pf_bytes + l * 64, _MM_HINT_T0);
    vf bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = load(b + j * W);
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
      const vf ar = set1(a[r]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = fmadd(ar, bv[j], acc[r][j]);
    }
    a += MR;
    b += bs;
  }
  if (nv == NR) {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) store(c + r * ldc + j * W, acc[r][j]);
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j)
        if (lanes(nv, j) > 0) store_n(c + r * ldc + j * W, acc[r][j], lanes(nv, j));
  }
}

template <int ROWS>
void microkernel(int64_t kc, const float* __restrict a, const float* __restrict b, int64_t bs,
                 float* __restrict c, int64_t ldc, int nv, bool load_c) {
  microkernel_body<ROWS, false>(kc, a, b, bs, c, ldc, nv, load_c, 0);
}
template <int ROWS>
void microkernel_pf(int64_t kc, const float* __restrict a, const float* __restrict b, int64_t bs,
                    float* __restrict c, int64_t ldc, int nv, bool load_c, int64_t pf_bytes) {
  microkernel_body<ROWS, true>(kc, a, b, bs, c, ldc, nv, load_c, pf_bytes);
}

using MicroFn = void (*)(int64_t, const float*, const float*, int64_t, float*, int64_t, int, bool);
using MicroPfFn = void (*)(int64_t, const float*, const float*, int64_t, float*, int64_t, int, bool,
                           int64_t);
template <size_t... I>
constexpr auto make_table(std::index_sequence<I...>) {
  return std::array<MicroFn, sizeof...(I)>{&microkernel<static_cast<int>(I) + 1>...};
}
template <size_t... I>
constexpr auto make_pf_table(std::index_sequence<I...>) {
  return std::array<MicroPfFn, sizeof...(I)>{&microkernel_pf<static_cast<int>(I) + 1>...};
}
constexpr auto kMicro = make_table(std::make_index_sequence<MR>{});  // kMicro[rows - 1]
constexpr auto kMicroPf = make_pf_table(std::make_index_sequence<MR>{});

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
// A growable 64-byte aligned float buffer (16 floats of slack past the end: the A
// packer may store a few lanes beyond the last panel).
struct Buffer {
  std::unique_ptr<float, FreeDeleter> p;
  size_t size = 0;
  float* get(size_t n) {
    if (n > size) {
      p.reset(static_cast<float*>(std::aligned_alloc(64, (sizeof(float) * (n + 16) + 63) / 64 * 64)));
      size = n;
    }
    return p.get();
  }
};
// Per-thread packing buffers: A block, B micro-panel, B block.
struct Buffers {
  Buffer a, b, bblock;
};
Buffers& thread_buffers() {
  thread_local Buffers buf;
  return buf;
}

struct Problem {
  int64_t M, N, K;
  const float* A;
  int64_t lda;
  bool a_trans;  // A stored (K, M)
  const void* B;
  int64_t ldb;
  int b_kind;
  float* C;
  int64_t ldc;
  bool accumulate;
};

// Packs columns [n0, n0 + nv) x k in [k0, k0 + kc) of op(B) into dst (kc x NR).
void pack_b(const Problem& p, float* dst, int64_t n0, int nv, int64_t k0, int64_t kc) {
  using namespace gemm_pack;
  switch (p.b_kind) {
    case kNtF32:
      pack_b_nt<NR>(dst, static_cast<const float*>(p.B) + n0 * p.ldb + k0, p.ldb, nv, kc);
      break;
    case kNnF32:
      pack_b_nn<NR>(dst, static_cast<const float*>(p.B) + k0 * p.ldb + n0, p.ldb, nv, kc);
      break;
    case kNtBf16:
      pack_b_nt<NR>(dst, static_cast<const uint16_t*>(p.B) + n0 * p.ldb + k0, p.ldb, nv, kc);
      break;
    default:
      pack_b_nn<NR>(dst, static_cast<const uint16_t*>(p.B) + k0 * p.ldb + n0, p.ldb, nv, kc);
      break;
  }
}

void pack_a(const Problem& p, float* dst, int64_t m0, int64_t mc, int64_t k0, int64_t kc) {
  if (p.a_trans)
    gemm_pack::pack_a_trans<MR>(dst, p.A + k0 * p.lda + m0, p.lda, mc, kc);
  else
    gemm_pack::pack_a_rowmajor<MR>(dst, p.A + m0 * p.lda + k0, p.lda, mc, kc);
}

// Issues prefetches for the rows x NR tile of C at c (it is loaded next).
inline void prefetch_c(const float* c, int64_t ldc, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + NR - 1), _MM_HINT_T0);
  }
}

// Memory to prefetch while a kernel runs, in slices: `runs` runs of `run_lines`
// consecutive 64-byte lines, `stride` bytes apart, from `base` (the next packed
// micro-panel: one run; the next weight rows of an NT panel or lane group: one run per
// row, so the gaps of a padded ldb are skipped). Empty (runs = 0) by default.
struct Ahead {
  const char* base = nullptr;
  int64_t stride = 0, runs = 0, run_lines = 0;
  int64_t lines() const { return runs * run_lines; }
};

// Walks an Ahead in address order, n lines per call (no division per line).
struct AheadCursor {
  Ahead a;
  int64_t r = 0, c = 0;
  template <int Hint>
  void next(int64_t n) {
    for (; n > 0 && r < a.runs; --n) {
      _mm_prefetch(a.base + r * a.stride + c * 64, static_cast<_mm_hint>(Hint));
      if (++c == a.run_lines) {
        c = 0;
        ++r;
      }
    }
  }
};

// kPanelF32: the micro-panel of columns [jr, jr + NR) (jr a multiple of NR), K rows
// [pc, ...): NR-float rows, stride NR.
inline const float* panel_at(const Problem& p, int64_t jr, int64_t pc) {
  return static_cast<const float*>(p.B) + jr * p.K + pc * NR;
}
// Bytes from a kPanelF32 micro-panel to the same K rows of the next panel (the in-kernel
// prefetch distance of row_panels).
inline int64_t panel_stride_bytes(const Problem& p) {
  return p.K * NR * int64_t{sizeof(float)};
}
// kc rows of a micro-panel (NR floats each, contiguous) at b, as an Ahead (one run):
// the next packed micro-panel of the B block, or the next panel of repacked weights.
inline Ahead micro_panel_ahead(const float* b, int64_t kc) {
  return Ahead{reinterpret_cast<const char*>(b), 0, 1,
               (kc * NR * static_cast<int64_t>(sizeof(float)) + 63) / 64};
}

// Runs the row panels of an (mc x kc) packed A block against one B micro-panel,
// prefetching meanwhile so that the next micro-panel does not wait on memory: either
// `ahead` into L2, a slice of lines before each row panel (packed B blocks, which sit
// in L2/L3), or, with pf_bytes != 0, from inside the first row panel's kernel (the
// NR-float B row pf_bytes further on, with every B row): repacked weights, read from
// memory. From M = 64 rows up, bursts of prefetch slices before each row panel stall
// on the memory misses while the FMA pipes idle; prefetching inside the kernel hides
// them (docs/benchmarks-history.md, Generator). For packed training blocks the two
// ways run at the same speed.
inline void row_panels(const Problem& p, const float* ap, int64_t mc, int64_t kc, const float* bp,
                       int64_t bs, int64_t m0, int64_t jr, int nv, bool load_c, Ahead ahead = {},
                       int64_t pf_bytes = 0) {
  const int64_t calls = (mc + MR - 1) / MR, per_call = (ahead.lines() + calls - 1) / calls;
  AheadCursor pf{ahead};
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, mc - ir));
    float* c = p.C + (m0 + ir) * p.ldc + jr;
    if (ir + MR < mc) prefetch_c(c + MR * p.ldc, p.ldc, std::min<int64_t>(MR, mc - ir - MR));
    pf.next<_MM_HINT_T1>(per_call);
    if (ir == 0 && pf_bytes != 0)
      kMicroPf[rows - 1](kc, ap + ir * kc, bp, bs, c, p.ldc, nv, load_c, pf_bytes);
    else
      kMicro[rows - 1](kc, ap + ir * kc, bp, bs, c, p.ldc, nv, load_c);
  }
}

// kLaneCols-or-fewer (G) output columns [n, n + G) of at most W rows, all of K, with
// the rows in the vector lanes: acc[g] lane m = C[m][n + g], each step
// acc[g] = fma(A[m][k], B[n + g][k], acc[g]) for k ascending, the weight broadcast from
// its NT row (w + g * ldb + k). at: A packed [k][W], lanes >= rows zero. Meanwhile
// `ahead` is prefetched into L1, a slice per K step.
template <int G>
void lane_group(int64_t K, const float* __restrict at, const float* __restrict w, int64_t ldb,
                float* __restrict c, int64_t ldc, int rows, bool load_c, Ahead ahead) {
  alignas(64) float t[G][W];
  vf acc[G];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    if (load_c) {
      for (int m = 0; m < W; ++m) t[g][m] = m < rows ? c[m * ldc + g] : 0.0f;
      acc[g] = load(t[g]);
    } else {
      acc[g] = zero();
    }
  }
  const int64_t steps = (K + kLaneKStep - 1) / kLaneKStep;
  const int64_t per_step = (ahead.lines() + steps - 1) / steps;
  AheadCursor pf{ahead};
  for (int64_t k0 = 0; k0 < K; k0 += kLaneKStep) {
    pf.next<_MM_HINT_T0>(per_step);
    if (k0 + kLaneKStep <= K) {
#pragma GCC unroll 16
      for (int64_t k = k0; k < k0 + kLaneKStep; ++k) {
        const vf av = load(at + k * W);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) acc[g] = fmadd(av, set1(w[g * ldb + k]), acc[g]);
      }
    } else {
      for (int64_t k = k0; k < K; ++k) {
        const vf av = load(at + k * W);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) acc[g] = fmadd(av, set1(w[g * ldb + k]), acc[g]);
      }
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) store(t[g], acc[g]);
  for (int m = 0; m < rows; ++m)
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) c[m * ldc + g] = t[g][m];
}

// Packs rows [m0, m0 + rows) of A (rows <= W) into at[k * W + m]; lanes >= rows are
// zero. Every lane is written once.
void pack_lanes(const Problem& p, float* at, int64_t m0, int rows) {
  for (int64_t k = 0; k < p.K; ++k, at += W)
    for (int m = 0; m < W; ++m)
      at[m] = m >= rows ? 0.0f : p.a_trans ? p.A[k * p.lda + m0 + m] : p.A[(m0 + m) * p.lda + k];
}

// Columns [n0, n1) of all M (<= W) rows, fp32 NT weights read in place, each weight
// once, from the lane-packed A `at`; while a group runs, the next group's span is
// prefetched if it ends by column pf_end (the caller's next chunk, usually). Column
// tails run one column per group.
void lane_columns(const Problem& p, const float* at, int64_t n0, int64_t n1, int64_t pf_end) {
  const int rows = static_cast<int>(p.M);
  const float* B = static_cast<const float*>(p.B);
  const int64_t esz = sizeof(float), row_lines = (p.K * esz + 63) / 64;
  int64_t n = n0;
  for (; n + kLaneCols <= n1; n += kLaneCols) {
    Ahead next;  // the next group's kLaneCols weight rows (K floats each), if it is full
    if (n + 2 * kLaneCols <= pf_end)
      next = Ahead{reinterpret_cast<const char*>(B + (n + kLaneCols) * p.ldb), p.ldb * esz, kLaneCols, row_lines};
    lane_group<kLaneCols>(p.K, at, B + n * p.ldb, p.ldb, p.C + n, p.ldc, rows, p.accumulate, next);
  }
  for (; n < n1; ++n)
    lane_group<1>(p.K, at, B + n * p.ldb, p.ldb, p.C + n, p.ldc, rows, p.accumulate, Ahead{});
}

using gemm_pack::claim_chunks;

// Decode, M <= W with fp32 NT weights, on T threads: A is lane-packed once (by the
// caller; the workers only read it); the threads claim chunks of kLaneChunk columns.
void run_lanes(const Problem& p, int64_t T) {
  float* at = thread_buffers().a.get(static_cast<size_t>(p.K * W));
  pack_lanes(p, at, 0, static_cast<int>(p.M));
  claim_chunks(T, (p.N + kLaneChunk - 1) / kLaneChunk, [&](int64_t c) {
    lane_columns(p, at, c * kLaneChunk, std::min(p.N, (c + 1) * kLaneChunk), p.N);
  });
}

// Few rows: mc rows cut into `panels` balanced row panels (8 rows: 4 + 4, not 6 + 2, so
// every panel has enough chains to keep both FMA pipes busy); panel i holds rows
// [panel_row(mc, panels, i), panel_row(mc, panels, i + 1)). The packer and the kernel
// calls both use this one split.
inline int64_t panel_row(int64_t mc, int64_t panels, int64_t i) { return mc * i / panels; }

// A rows [m0, m0 + mc) packed for all of K into `panels` balanced row panels, laid out
// [K chunk of kchunk][row panel][kc][MR]. Returns the buffer (thread_buffers().a).
float* pack_a_chunks(const Problem& p, int64_t m0, int64_t mc, int64_t panels, int64_t kchunk) {
  float* abuf = thread_buffers().a.get(static_cast<size_t>(panels * MR * p.K));
  for (int64_t pc = 0; pc < p.K; pc += kchunk) {
    const int64_t kc = std::min(kchunk, p.K - pc);
    for (int64_t i = 0; i < panels; ++i)  // in order: a panel's store slack lands in the next
      pack_a(p, abuf + pc * panels * MR + i * kc * MR, m0 + panel_row(mc, panels, i),
             panel_row(mc, panels, i + 1) - panel_row(mc, panels, i), pc, kc);
  }
  return abuf;
}

// Decode with repacked (kPanelF32) weights, M <= kFewRows: A packed once by the caller
// (the workers only read it); each K x NR weight panel is contiguous, so it is read
// once from memory in address order, kPanelKC rows at a time (the chunk stays in L1
// for the other row panels); threads claim kLaneChunk columns at a time. No packing of
// B: one sequential stream per thread (at M = 1 it ran at the machine's plain read
// bandwidth, 1.3-1.7x the NT lanes path, docs/benchmarks-history.md).
void run_panel_rows(const Problem& p, int64_t T) {
  const int64_t mc = p.M, panels = (mc + MR - 1) / MR;
  const float* abuf = pack_a_chunks(p, 0, mc, panels, kPanelKC);
  auto prow = [&](int64_t i) { return panel_row(mc, panels, i); };
  const uintptr_t b_end = reinterpret_cast<uintptr_t>(panel_at(p, (p.N + NR - 1) / NR * NR, 0));
  claim_chunks(T, (p.N + kLaneChunk - 1) / kLaneChunk, [&](int64_t chunk) {
    const int64_t n1 = std::min(p.N, (chunk + 1) * kLaneChunk);
    for (int64_t jr = chunk * kLaneChunk; jr < n1; jr += NR) {
      const int nv = static_cast<int>(std::min<int64_t>(NR, n1 - jr));
      for (int64_t pc = 0; pc < p.K; pc += kPanelKC) {
        const int64_t kc = std::min(kPanelKC, p.K - pc);
        const float* ap = abuf + pc * panels * MR;
        const bool load_c = p.accumulate || pc > 0;
        const float* bp = panel_at(p, jr, pc);
        // The first row panel streams the chunk from memory, prefetching kPanelAhead
        // bytes ahead; the others find it in L1 and keep the stream going, prefetching
        // kPanelAheadRest bytes ahead (past what the first one asked for). Only within B.
        const uintptr_t chunk_end = reinterpret_cast<uintptr_t>(bp) + kc * NR * sizeof(float);
        for (int64_t i = 0; i < panels; ++i) {
          float* c = p.C + prow(i) * p.ldc + jr;
          const int rows = static_cast<int>(prow(i + 1) - prow(i));
          const int64_t ahead = i == 0 ? kPanelAhead : kPanelAheadRest;
          if (chunk_end + ahead <= b_end)
            kMicroPf[rows - 1](kc, ap + i * kc * MR, bp, NR, c, p.ldc, nv, load_c, ahead);
          else
            kMicro[rows - 1](kc, ap + i * kc * MR, bp, NR, c, p.ldc, nv, load_c);
        }
      }
    }
  });
}

// Few rows (decode): A (all of K) is packed once, then every B micro-panel is
// streamed over K chunk by chunk (NR sequential row streams for NT weights), packed
// into L1 and consumed at once by the few row panels. Each weight is read once.
void run_few_rows(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const int64_t mc = m1 - m0, panels = (mc + MR - 1) / MR;
  const float* abuf = pack_a_chunks(p, m0, mc, panels, KCF);
  float* bbuf = thread_buffers().b.get(static_cast<size_t>(KCF * NR));
  auto prow = [&](int64_t i) { return panel_row(mc, panels, i); };
  const int64_t esz = (p.b_kind == kNtF32 || p.b_kind == kNnF32) ? 4 : 2;
  const bool nt = p.b_kind == kNtF32 || p.b_kind == kNtBf16;
  const int64_t chunks = (p.K + KCF - 1) / KCF;
  const int64_t panel_lines = NR * p.ldb * esz / 64, per_chunk = (panel_lines + chunks - 1) / chunks;
  for (int64_t jr = n0; jr < n1; jr += NR) {
    const int nv = static_cast<int>(std::min<int64_t>(NR, n1 - jr));
    const bool do_pf = nt && jr + kPrefetchPanels * NR < n1;  // the panel that comes 2 later
    const char* ahead = static_cast<const char*>(p.B) + (do_pf ? (jr + kPrefetchPanels * NR) * p.ldb * esz : 0);
    for (int64_t pc = 0, ci = 0; pc < p.K; pc += KCF, ++ci) {
      const int64_t kc = std::min(KCF, p.K - pc);
      if (do_pf)  // a slice of its lines per K chunk, in address order
        for (int64_t l = ci * per_chunk; l < std::min(panel_lines, (ci + 1) * per_chunk); ++l)
          _mm_prefetch(ahead + l * 64, _MM_HINT_T0);
      pack_b(p, bbuf, jr, nv, pc, kc);
      const float* ap = abuf + pc * panels * MR;
      float* c = p.C + m0 * p.ldc + jr;
      const bool load_c = p.accumulate || pc > 0;
      for (int64_t i = 0; i < panels; ++i)
        kMicro[prow(i + 1) - prow(i) - 1](kc, ap + i * kc * MR, bbuf, NR, c + prow(i) * p.ldc, p.ldc,
                                          nv, load_c);
    }
  }
}

// The K chunk [pc, pc + kc) of the NT weight rows [jr, jr + NR) (clipped to n1), as an
// Ahead for row_panels; empty for NN or bf16 weights or past n1.
Ahead next_nt_panel(const Problem& p, int64_t jr, int64_t n1, int64_t pc, int64_t kc) {
  if (p.b_kind != kNtF32 || jr >= n1) return {};
  const int64_t esz = sizeof(float);
  return Ahead{static_cast<const char*>(p.B) + (jr * p.ldb + pc) * esz, p.ldb * esz,
               std::min<int64_t>(NR, n1 - jr), (kc * esz + 63) / 64};
}

// One A block of all the task's rows per K chunk (packed once, in L2 for up to
// kMediumRows rows), then every NR-wide B micro-panel consumed by all row panels at
// once, so B is read from memory exactly once per K chunk with no KC x NC block
// written to and reread from L3 (at these M, run_blocked's B-block traffic costs as
// much as the FMAs). Used for
//  - few rows with fp32 "NN" B, and on AVX-512 medium rows with it too (nn_in_place): B
//    rows are already NR-contiguous, so full panels are read in place (no copy); the
//    column tail is packed with zero padding;
//  - medium rows (kFewRows < rows <= kMediumRows, e.g. M = 64-144 per task) with other
//    B (any B on AVX2): every micro-panel is packed into L1 right before use (it is reused by up to
//    24 row panels, so a contiguous copy is worth its cost); for NT weights the next micro-panel's
//    NR weight rows are pulled into L2 during the current one's FMAs, so packing does not wait on
//    memory while the FMA pipes sit idle.
void run_row_block(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1, bool nn_in_place) {
  Buffers& buf = thread_buffers();
  const int64_t mc = m1 - m0;
  float* abuf = buf.a.get(static_cast<size_t>(((mc + MR - 1) / MR) * MR * KC));
  float* bbuf = buf.b.get(static_cast<size_t>(KC * NR));
  for (int64_t pc = 0; pc < p.K; pc += KC) {
    const int64_t kc = std::min(KC, p.K - pc);
    const bool load_c = p.accumulate || pc > 0;
    pack_a(p, abuf, m0, mc, pc, kc);
    for (int64_t jr = n0; jr < n1; jr += NR) {
      const int nv = static_cast<int>(std::min<int64_t>(NR, n1 - jr));
      if (p.b_kind == kPanelF32) {
        row_panels(p, abuf, mc, kc, panel_at(p, jr, pc), NR, m0, jr, nv, load_c, Ahead{},
                   jr + NR < n1 ? panel_stride_bytes(p) : 0);
      } else if (nn_in_place && nv == NR) {
        row_panels(p, abuf, mc, kc, static_cast<const float*>(p.B) + pc * p.ldb + jr, p.ldb, m0, jr,
                   nv, load_c);
      } else {
        pack_b(p, bbuf, jr, nv, pc, kc);
        row_panels(p, abuf, mc, kc, bbuf, NR, m0, jr, nv, load_c, next_nt_panel(p, jr + NR, n1, pc, kc));
      }
    }
  }
}

// Packs the (kc x nc) B block at columns jc, K rows pc (nothing for repacked panels):
// NN B row by row, other B panel by panel; shared: all threads take a part of it.
void pack_b_block(const Problem& p, float* bblk, int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                  bool shared) {
  if (p.b_kind == kPanelF32) return;
  auto run = [&](int64_t n, const auto& fn) {
    if (shared)
      parallel_for(n, fn);
    else
      fn(int64_t{0}, n);
  };
  if (p.b_kind == kNnF32) {
    const float* src = static_cast<const float*>(p.B) + pc * p.ldb + jc;
    run(kc, [&](int64_t k0, int64_t k1) { gemm_pack::pack_b_nn_block<NR>(bblk, src, p.ldb, nc, kc, k0, k1); });
  } else {
    run((nc + NR - 1) / NR, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j)
        pack_b(p, bblk + j * NR * kc, jc + j * NR, static_cast<int>(std::min<int64_t>(NR, nc - j * NR)), pc, kc);
    });
  }
}

// One MC-row block: A rows [ic, ic + mc) x K chunk [pc, pc + kc) packed into abuf, then
// run against the B block's micro-panels (micro_panel(jr), jr < nc, of columns
// jc + jr), each while the next one is prefetched.
template <typename MicroPanel>
void a_block(const Problem& p, float* abuf, int64_t ic, int64_t mc, int64_t pc, int64_t kc,
             int64_t jc, int64_t nc, const MicroPanel& micro_panel) {
  pack_a(p, abuf, ic, mc, pc, kc);
  // Repacked weights come from memory: the next panel is prefetched in-kernel (row_panels).
  const bool in_kernel = p.b_kind == kPanelF32;
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const bool next = jr + NR < nc;
    row_panels(p, abuf, mc, kc, micro_panel(jr), NR, ic, jc + jr,
               static_cast<int>(std::min<int64_t>(NR, nc - jr)), p.accumulate || pc > 0,
               next && !in_kernel ? micro_panel_ahead(micro_panel(jr + NR), kc) : Ahead{},
               next && in_kernel ? panel_stride_bytes(p) : 0);
  }
}

// The B blocks of columns [n0, n1) in BLIS order (jc over NC, then pc over KC): each is
// packed into bblk (nothing for repacked panels; shared: by all threads together), then
// fn(jc, nc, pc, kc, micro_panel) runs, micro_panel(jr) being the block's micro-panel of
// columns jc + jr.
template <typename Fn>
void for_each_b_block(const Problem& p, float* bblk, int64_t n0, int64_t n1, bool shared,
                      const Fn& fn) {
  const bool in_place = p.b_kind == kPanelF32;  // repacked: micro-panels read where they lie
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = std::min(NC, n1 - jc);
    for (int64_t pc = 0; pc < p.K; pc += KC) {
      const int64_t kc = std::min(KC, p.K - pc);
      pack_b_block(p, bblk, jc, nc, pc, kc, shared);
      auto micro_panel = [&](int64_t jr) {
        return in_place ? panel_at(p, jc + jr, pc) : bblk + jr * kc;
      };
      fn(jc, nc, pc, kc, micro_panel);
    }
  }
}
// The B block buffer of the calling thread (null for repacked panels).
float* b_block_buffer(const Problem& p) {
  return p.b_kind == kPanelF32 ? nullptr
                               : thread_buffers().bblock.get(static_cast<size_t>(KC * NC));
}

// Many rows: BLIS loop order. A B block (KC x NC) is packed once per (jc, pc) and
// shared by all MC row blocks; its micro-panels stay in L1 across the row panels.
void run_blocked(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  float* abuf = thread_buffers().a.get(static_cast<size_t>(MC * KC));
  for_each_b_block(p, b_block_buffer(p), n0, n1, /*shared=*/false,
                   [&](int64_t jc, int64_t nc, int64_t pc, int64_t kc, const auto& micro_panel) {
                     for (int64_t ic = m0; ic < m1; ic += MC)
                       a_block(p, abuf, ic, std::min(MC, m1 - ic), pc, kc, jc, nc, micro_panel);
                   });
}

// Many rows on T threads (BLIS's shared B block): per (NC, KC) block, the threads pack
// the B block once together (nothing to pack for repacked panels), then claim MC-row
// chunks of A at run time (claim_chunks), each packing its own A block and running it
// against the whole B block. Every A and B element is packed once, and a thread slowed
// down by the shared machine holds the call up by at most one chunk.
void run_shared(const Problem& p, int64_t T) {
  const int64_t chunks = (p.M + MC - 1) / MC;
  for_each_b_block(p, b_block_buffer(p), 0, p.N, /*shared=*/true,
                   [&](int64_t jc, int64_t nc, int64_t pc, int64_t kc, const auto& micro_panel) {
                     claim_chunks(T, chunks, [&](int64_t c) {
                       a_block(p, thread_buffers().a.get(static_cast<size_t>(MC * KC)), c * MC,
                               std::min(MC, p.M - c * MC), pc, kc, jc, nc, micro_panel);
                     });
                   });
}

// Medium rows with fp32 "NN" B (the dX and dW products of small training shapes): read
// the full micro-panels in place instead of copying each one first. On the Zen5
// machine (AVX-512, 48 KiB L1) reading in place is slightly faster for the training
// shapes (docs/benchmarks-history.md, Training). AVX2 (Zen3, 32 KiB L1) keeps the
// copy past 2 * MR rows. Up to this many rows per task NN B is read in place:
constexpr int64_t kNnInPlaceRows = W == 16 ? kMediumRows : 2 * MR;

// Computes C[m0:m1, n0:n1]; n0 is a multiple of NR.
void run_task(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (p.b_kind == kNnF32 && m1 - m0 <= kNnInPlaceRows)
    return run_row_block(p, m0, m1, n0, n1, /*nn_in_place=*/true);
  if (p.b_kind != kNnF32 && p.b_kind != kPanelF32 && m1 - m0 <= kFewRows)
    return run_few_rows(p, m0, m1, n0, n1);
  if (m1 - m0 <= kMediumRows) return run_row_block(p, m0, m1, n0, n1, /*nn_in_place=*/false);
  run_blocked(p, m0, m1, n0, n1);
}

}  // namespace

// C(M, N) = op_a(A) · op_b(B) [+ C]; see titan/kernels/cpu/gemm.h. Arguments are
// validated by the caller. b_kind: 0 NT f32, 1 NN f32, 2 NT bf16, 3 NN bf16, 4 panels.
void gemm_run(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool a_trans,
              const void* B, int64_t ldb, int b_kind, float* C, int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0f);
    return;
  }
  const Problem p{M, N, K, A, lda, a_trans, B, ldb, b_kind, C, ldc, accumulate};
  const int64_t T = (M * N * K < (int64_t{1} << 18)) ? 1 : num_threads();
  if (b_kind == kNtF32 && M <= W) return run_lanes(p, T);
  if (b_kind == kPanelF32 && M <= kFewRows) return run_panel_rows(p, T);
  // Enough rows for run_blocked on every thread: one shared B block, rows claimed.
  if (T > 1 && (M + MR - 1) / MR / T * MR > kMediumRows) return run_shared(p, T);
  // Task grid: mt row chunks x nt column chunks (MR / NR aligned). The split only
  // decides who computes an element, never how, so any grid gives the same bits.
  // Splitting the columns makes every thread pack all of A (M x K); splitting the rows
  // makes every thread read (or pack) all of B (K x N): split whichever duplicates less
  // (the columns only if there is a panel of them for every thread).
  // Against the earlier rule (columns whenever there were >= 4 T panels of them), on
  // the Zen5 machine: `small` steps -1.4 to -1.7 % (3 rounds; the dW products of
  // 512 x 512 and 512 x 1536 and the LM head's dhidden, M = 524 x N = 512, gain 5-10 %),
  // shakespeare_char -1 to -2 % (4 rounds), generator decode and prefill unchanged.
  const int64_t m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
  int64_t mt = 1, nt = 1;
  if (T > 1) {
    if ((N > M && n_panels >= T) || m_panels < T)
      nt = std::min(T, n_panels);
    else
      mt = std::min(T, m_panels);
  }
  auto task = [&](int64_t t) {
    const int64_t ti = t % mt, tj = t / mt;
    const int64_t m0 = std::min(M, m_panels * ti / mt * MR), m1 = std::min(M, m_panels * (ti + 1) / mt * MR);
    const int64_t n0 = std::min(N, n_panels * tj / nt * NR), n1 = std::min(N, n_panels * (tj + 1) / nt * NR);
    if (m0 < m1 && n0 < n1) run_task(p, m0, m1, n0, n1);
  };
  if (mt * nt == 1) {
    task(0);
    return;
  }
  parallel_for(mt * nt, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) task(t);
  });
}

int64_t gemm_panel_width() { return NR; }

// dst[j * K * NR + k * NR + c] = W[j * NR + c][k] (0 for j * NR + c >= N): the layout
// kPanelF32 reads (see BKind).
void gemm_pack_panels(int64_t N, int64_t K, const float* Wt, int64_t ldw, float* dst) {
  const int64_t panels = (N + NR - 1) / NR;
  parallel_for(panels, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int nv = static_cast<int>(std::min<int64_t>(NR, N - j * NR));
      gemm_pack::pack_b_nt<NR>(dst + j * K * NR, Wt + j * NR * ldw, ldw, nv, K);
    }
  });
}

// The same layout from B (K, N) row-major: dst[j * K * NR + k * NR + c] = B[k][j * NR + c]
// (0 for j * NR + c >= N); threads take ranges of k, each B row is read once.
void gemm_pack_panels_nn(int64_t K, int64_t N, const float* B, int64_t ldb, float* dst) {
  parallel_for(K, [&](int64_t k0, int64_t k1) {
    gemm_pack::pack_b_nn_block<NR>(dst, B, ldb, N, K, k0, k1);
  });
}

}  // namespace titan::kernels::cpu::TITAN_ISA_NS
