// Start-up and shut-down of the distributed runtime (the world group is created
// lazily by world(), process_group.h).
#pragma once
#include <string>

namespace titan::distributed {

// True between MPI_Init_thread (done by world() when launched by mpirun) and MPI_Finalize.
bool mpi_initialized();

// Ends the distributed runtime at the end of main and returns rc: MPI_Finalize when
// rc == 0 (or the world has one rank); for rc != 0 in a world of several ranks it
// calls MPI_Abort(rc) instead, so ranks blocked in a collective for this one stop too
// (mpirun then exits non-zero). A rank of an MPI job that fails before MPI started
// (a config error) starts it first, so every rank's error is printed before the job
// ends. Without MPI it only returns rc.
int finish(int rc);

// Flushes stdio and ends the whole job now with exit code rc (MPI_Abort under MPI).
[[noreturn]] void abort_job(int rc);

// "rank R: " in a job started by an MPI launcher (R from OMPI_COMM_WORLD_RANK or
// PMIX_RANK, read without starting MPI), else "": the prefix of console errors.
std::string rank_prefix();

}  // namespace titan::distributed
