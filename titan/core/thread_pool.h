// A fixed-size worker pool with *static* partitioning (DESIGN.md §1.2): task i of a
// parallel_for always runs whole on one thread, and which thread runs it never
// changes the arithmetic inside it. Kernels must make every output element the
// responsibility of exactly one task; cross-task sums are reduced by the caller in
// task-index order.
//
// All pool threads and the caller run with the same MXCSR (round-to-nearest, no
// FTZ/DAZ) so denormal handling cannot differ between threads.
#pragma once
#include <cstdint>
#include <functional>

namespace titan {

// Number of threads parallel_for uses (default: TITAN_NUM_THREADS env var, else the
// hardware concurrency divided by the ranks of this job on this machine, read from the
// launcher's OMPI_COMM_WORLD_LOCAL_SIZE, at least 1). set_num_threads(n) with n >= 1;
// throws titan::Error otherwise.
int num_threads();
void set_num_threads(int n);

// Runs fn(begin, end) over [0, n) split into at most num_threads() contiguous
// ranges: thread t gets [t*n/T, (t+1)*n/T). Runs inline when n <= 1 or T == 1 or
// when called from inside a pool task (no nested parallelism). Exceptions thrown by
// fn are rethrown in the caller (the first one by range index).
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

// Like parallel_for but with a minimum number of tasks per thread: small n runs inline.
void parallel_for_grain(int64_t n, int64_t grain,
                        const std::function<void(int64_t begin, int64_t end)>& fn);

// Sets the calling thread's MXCSR to the canonical state used by every pool thread.
void set_canonical_fp_state();

}  // namespace titan
