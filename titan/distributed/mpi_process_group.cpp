// The MPI backend of ProcessGroup (OpenMPI): byte transport only; every reduction is
// ours (process_group.h). Errors are returned (MPI_ERRORS_RETURN) and thrown as
// titan::Error naming the world rank and the call.
// The C API only (no deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "titan/core/error.h"
#include "titan/distributed/process_group.h"
#include "titan/distributed/runtime.h"
#include "titan/distributed/watchdog.h"

namespace titan::distributed {

namespace {

int g_world_rank = 0;

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("rank {}: {} failed: {}", g_world_rank, call, std::string(msg, len));
}

int to_int(size_t bytes, const char* call) {
  TITAN_CHECK(bytes <= static_cast<size_t>(INT_MAX),
              "rank {}: {}: a message of {} bytes exceeds MPI's int count (2^31 - 1); split the tensor",
              g_world_rank, call, bytes);
  return static_cast<int>(bytes);
}

std::vector<int> to_ints(const std::vector<size_t>& v, const char* call) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_int(v[i], call);
  return out;
}

class MpiPendingSend final : public PendingSend {
 public:
  MPI_Request req = MPI_REQUEST_NULL;
  void wait() override {
    if (req == MPI_REQUEST_NULL) return;
    CollectiveScope scope("isend");
    check_mpi(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  ~MpiPendingSend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (req != MPI_REQUEST_NULL && !finalized) MPI_Request_free(&req);
  }
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  explicit MpiProcessGroup(MPI_Comm comm) : comm_(comm) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  ~MpiProcessGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  int world_rank() const override { return g_world_rank; }

  void all_gather_bytes(const void* send, size_t bytes, void* recv) override {
    CollectiveScope scope("all_gather");
    const int n = to_int(bytes, "MPI_Allgather");
    check_mpi(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_), "MPI_Allgather");
  }
  void all_gatherv_bytes(const void* send, void* recv, const std::vector<size_t>& counts) override {
    CollectiveScope scope("all_gatherv");
    std::vector<int> c = to_ints(counts, "MPI_Allgatherv"), d(size_);
    size_t off = 0;
    for (int r = 0; r < size_; ++r) {
      d[r] = to_int(off, "MPI_Allgatherv");
      off += counts[r];
    }
    check_mpi(MPI_Allgatherv(send, c[rank_], MPI_BYTE, recv, c.data(), d.data(), MPI_BYTE, comm_),
              "MPI_Allgatherv");
  }
  void all_to_allv_bytes(const void* send, const std::vector<size_t>& send_counts,
                         const std::vector<size_t>& send_offsets, void* recv,
                         const std::vector<size_t>& recv_counts,
                         const std::vector<size_t>& recv_offsets) override {
    CollectiveScope scope("all_to_allv");
    std::vector<int> sc = to_ints(send_counts, "MPI_Alltoallv"), so = to_ints(send_offsets, "MPI_Alltoallv"),
                     rc = to_ints(recv_counts, "MPI_Alltoallv"), ro = to_ints(recv_offsets, "MPI_Alltoallv");
    check_mpi(MPI_Alltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(), MPI_BYTE, comm_),
              "MPI_Alltoallv");
  }
  void broadcast_bytes(void* buf, size_t bytes, int root) override {
    CollectiveScope scope("broadcast");
    check_mpi(MPI_Bcast(buf, to_int(bytes, "MPI_Bcast"), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void send_bytes(const void* buf, size_t bytes, int dst, int tag) override {
    CollectiveScope scope("send");
    check_mpi(MPI_Send(buf, to_int(bytes, "MPI_Send"), MPI_BYTE, dst, tag, comm_), "MPI_Send");
  }
  std::unique_ptr<PendingSend> isend_bytes(const void* buf, size_t bytes, int dst, int tag) override {
    auto p = std::make_unique<MpiPendingSend>();
    check_mpi(MPI_Isend(buf, to_int(bytes, "MPI_Isend"), MPI_BYTE, dst, tag, comm_, &p->req), "MPI_Isend");
    return p;
  }
  void recv_bytes(void* buf, size_t bytes, int src, int tag) override {
    CollectiveScope scope("recv");
    MPI_Status st;
    check_mpi(MPI_Recv(buf, to_int(bytes, "MPI_Recv"), MPI_BYTE, src, tag, comm_, &st), "MPI_Recv");
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    TITAN_CHECK(static_cast<size_t>(got) == bytes, "rank {}: recv from rank {}: got {} bytes, expected {}",
                g_world_rank, src, got, bytes);
  }
  void barrier() override {
    CollectiveScope scope("barrier");
    check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  }
  std::unique_ptr<ProcessGroup> split(int color, int key) override {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiProcessGroup>(out);
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

bool mpi_initialized_now() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

std::once_flag g_once;
std::shared_ptr<ProcessGroup> g_world;
// A copy of MPI_COMM_WORLD used only by finish() on the error path.
MPI_Comm g_exit_comm = MPI_COMM_NULL;
// How long a failing rank waits in finish() for the other ranks to fail too.
constexpr auto kExitGrace = std::chrono::seconds(3);

void init_world() {
  if (!launched_by_mpi()) {
    g_world = std::make_shared<LocalProcessGroup>();
    return;
  }
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
  TITAN_CHECK(provided >= MPI_THREAD_SERIALIZED,
              "rank {}: the MPI library gives thread level {}, MPI_THREAD_SERIALIZED needed", g_world_rank,
              provided);
  g_world = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_comm), "MPI_Comm_dup");
  start_watchdog(g_world_rank);
  // A program that returns from main without finish() (tests) still finalizes.
  std::atexit([] {
    if (!mpi_initialized_now()) return;
    stop_watchdog();
    MPI_Finalize();
  });
}

}  // namespace

std::shared_ptr<ProcessGroup> world() {
  std::call_once(g_once, init_world);
  return g_world;
}

bool mpi_initialized() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

int finish(int rc) {
  // An error raised before MPI started (e.g. the config's) on a rank of an MPI job:
  // start it now, so that the barrier below lets every rank print its own error
  // before the launcher ends the job on the first non-zero exit.
  if (!mpi_initialized() && rc != 0 && launched_by_mpi()) {
    try {
      world();
    } catch (const std::exception&) {  // no MPI: the rank only returns rc
    }
  }
  if (!mpi_initialized()) return rc;
  stop_watchdog();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rc != 0 && size > 1) {
    // A failing rank ends the whole job: the others may wait in a collective for it.
    // First it waits, at most kExitGrace, on a barrier of a communicator nothing else
    // uses: when every rank fails (a bad layout is refused on all of them) they all
    // reach it, so MPI_Abort kills none before it has printed its own error. A rank
    // blocked elsewhere never joins, and the abort ends it after the grace.
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(g_exit_comm, &req) == MPI_SUCCESS) {
      const auto deadline = std::chrono::steady_clock::now() + kExitGrace;
      int done = 0;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    MPI_Abort(MPI_COMM_WORLD, rc);
  }
  g_world.reset();
  MPI_Finalize();
  return rc;
}

void abort_job(int rc) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, rc);
  std::_Exit(rc);
}

}  // namespace titan::distributed
