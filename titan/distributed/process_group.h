// ProcessGroup: the collectives of a set of ranks, behind one interface so that the
// backend (MPI now, NCCL later) can change without touching the callers (DESIGN.md §8).
//
// Backends implement only data movement on bytes (gather, all-to-all, broadcast,
// point-to-point, barrier, split). Every arithmetic combination over ranks — the sum
// of all_reduce and reduce_scatter — is formed by this library, not by the backend:
// the pieces of all ranks are exchanged, and each output element is
//
//     out = ((piece[0] + piece[1]) + piece[2]) + ... + piece[size-1]
//
// in rank order of the group (titan/distributed/reduction.h, the one place that
// fixes the order). The bits therefore do not depend on the backend's algorithm,
// on the message sizes, or on which rank computes the element; every rank ends with
// the same bits. f32 sums in f32; bf16 pieces are widened to f32, summed in the same
// order and rounded once (RNE); i32/i64 sums wrap like the C++ unsigned sum.
//
// Collectives are blocking and must be called by every rank of the group in the same
// order with matching shapes and dtypes (as MPI requires); a mismatch that is
// detectable locally (shape divisibility, dtype) throws titan::Error before any
// communication. Tensors are read contiguously; outputs are fresh contiguous tensors
// unless stated "in place".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::distributed {

enum class ReduceOp { sum, max, min };

// A send in flight (ProcessGroup::isend_bytes). wait() returns once the buffer may be
// reused. Destroying the handle first detaches the send (MPI_Request_free): it then
// completes on its own, and its buffer must stay valid until it has.
class PendingSend {
 public:
  virtual ~PendingSend() = default;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi" | "local" (a world of one).
  virtual std::string backend() const = 0;
  // Rank of this process in the world group (for messages naming a rank).
  virtual int world_rank() const = 0;

  // ---- byte transport (backends implement these)
  // recv holds size() × bytes; rank r's send lands at recv + r × bytes.
  virtual void all_gather_bytes(const void* send, size_t bytes, void* recv) = 0;
  // Rank r sends counts[r] bytes; they land at recv + (counts[0] + ... + counts[r-1]).
  virtual void all_gatherv_bytes(const void* send, void* recv, const std::vector<size_t>& counts) = 0;
  // Rank r sends send_counts[j] bytes (at send_offsets[j]) to rank j, and receives
  // recv_counts[j] bytes from rank j at recv_offsets[j].
  virtual void all_to_allv_bytes(const void* send, const std::vector<size_t>& send_counts,
                                 const std::vector<size_t>& send_offsets, void* recv,
                                 const std::vector<size_t>& recv_counts,
                                 const std::vector<size_t>& recv_offsets) = 0;
  virtual void broadcast_bytes(void* buf, size_t bytes, int root) = 0;
  virtual void send_bytes(const void* buf, size_t bytes, int dst, int tag) = 0;
  virtual void recv_bytes(void* buf, size_t bytes, int src, int tag) = 0;
  // A send that returns at once (MPI_Isend): `buf` must stay valid and unchanged until
  // the handle's wait(). Pipeline schedules need it: two ranks that each send before
  // receiving would block each other with send_bytes. Messages of one (src, dst, tag)
  // arrive in the order they were started. The default throws titan::Error (a backend
  // without point-to-point).
  virtual std::unique_ptr<PendingSend> isend_bytes(const void* buf, size_t bytes, int dst, int tag);
  virtual void barrier() = 0;
  // Collective over this group: ranks with the same color form a new group, ordered
  // by (key, rank). A color < 0 returns nullptr for that rank (MPI_UNDEFINED).
  virtual std::unique_ptr<ProcessGroup> split(int color, int key) = 0;

  // ---- tensor collectives (f32, bf16, i32, i64; built on the transport above)
  // In place: every rank gets the reduction of all ranks' t (same shape and dtype on
  // every rank). The sum is in rank order (header comment). Communication: one
  // reduce-scatter (all-to-all of size() chunks) plus one all-gather of the chunks.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  // [n0, ...] on every rank -> [size() × n0, ...], rank r's rows at [r n0, (r+1) n0).
  Tensor all_gather(const Tensor& t);
  // Like all_gather with a dim-0 length that may differ per rank (the other dims equal).
  Tensor all_gatherv(const Tensor& t);
  // [size() × m, ...] on every rank -> [m, ...]: rank r gets rows [r m, (r+1) m) reduced
  // over ranks in rank order. Throws if dim 0 is not a multiple of size().
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // [size() × m, ...] -> [size() × m, ...]: chunk j of rank i becomes chunk i of rank j.
  Tensor all_to_all(const Tensor& t);
  // t's dim 0 is split into send_rows[j] rows for rank j (sum = t.shape(0)); returns the
  // rows received, rank 0's first. recv_rows (size() entries) is what each rank sends
  // here; pass it, or an empty vector to have it exchanged first.
  Tensor all_to_allv(const Tensor& t, const std::vector<int64_t>& send_rows,
                     std::vector<int64_t> recv_rows = {});
  // In place: every rank gets root's t (same shape and dtype on every rank).
  void broadcast(Tensor& t, int root);
  // Point-to-point; recv fills t in place (shape and dtype must match the sender's).
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(Tensor& t, int src, int tag = 0);
  // Scalar conveniences (reduced like all_reduce).
  double all_reduce_f64_sum(double v);
  int64_t all_reduce_i64(int64_t v, ReduceOp op = ReduceOp::sum);
};

// A group of one rank (rank 0 of 1): collectives copy. Needs no MPI start-up.
class LocalProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  int world_rank() const override { return world_rank_; }
  explicit LocalProcessGroup(int world_rank = 0) : world_rank_(world_rank) {}

  void all_gather_bytes(const void* send, size_t bytes, void* recv) override;
  void all_gatherv_bytes(const void* send, void* recv, const std::vector<size_t>& counts) override;
  void all_to_allv_bytes(const void* send, const std::vector<size_t>& send_counts,
                         const std::vector<size_t>& send_offsets, void* recv,
                         const std::vector<size_t>& recv_counts,
                         const std::vector<size_t>& recv_offsets) override;
  void broadcast_bytes(void*, size_t, int root) override;
  void send_bytes(const void*, size_t, int dst, int tag) override;
  void recv_bytes(void*, size_t, int src, int tag) override;
  void barrier() override {}
  std::unique_ptr<ProcessGroup> split(int color, int key) override;

 private:
  int world_rank_ = 0;
};

// True when this process was started by an MPI launcher (mpirun/mpiexec/srun with
// PMIx: OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment).
bool launched_by_mpi();

// The world group of this process, created on first call: MPI (MPI_Init_thread with
// MPI_THREAD_SERIALIZED, MPI_COMM_WORLD) when launched_by_mpi(), else a
// LocalProcessGroup. MPI is finalized at exit. Errors of the MPI library are
// returned, not fatal, and reach the caller as titan::Error naming the rank and the
// call. Thread safety: collectives of one process must not run concurrently.
std::shared_ptr<ProcessGroup> world();

}  // namespace titan::distributed
