#include "titan/distributed/process_group.h"

#include <cstdlib>
#include <cstring>

#include "titan/core/error.h"
#include "titan/distributed/reduction.h"
#include "titan/distributed/runtime.h"

namespace titan::distributed {

namespace {

void check_dtype(const Tensor& t, const char* op) {
  const DType d = t.dtype();
  TITAN_CHECK(d == DType::f32 || d == DType::bf16 || d == DType::i32 || d == DType::i64,
              "{}: dtype {} is not supported (f32, bf16, i32, i64)", op, dtype_name(d));
}

Shape with_dim0(const Shape& s, int64_t n0) {
  Shape out = s.empty() ? Shape{n0} : s;
  out[0] = n0;
  return out;
}

// Bytes of one dim-0 row (1 element for a 0-d tensor).
size_t row_bytes(const Tensor& t) {
  size_t n = dtype_size(t.dtype());
  for (int64_t d = 1; d < t.dim(); ++d) n *= static_cast<size_t>(t.size(d));
  return n;
}

}  // namespace

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_dtype(t, "all_reduce");
  const int n = size();
  if (n == 1 || t.numel() == 0) return;
  Tensor c = t.contiguous();
  const int64_t count = c.numel();
  const size_t es = dtype_size(c.dtype());
  // Element range of rank r's chunk: [r count / n, (r+1) count / n).
  std::vector<size_t> counts(n), offsets(n), recv_counts(n), recv_offsets(n);
  for (int r = 0; r < n; ++r) {
    const int64_t b = count * r / n, e = count * (r + 1) / n;
    counts[r] = static_cast<size_t>(e - b) * es;
    offsets[r] = static_cast<size_t>(b) * es;
  }
  const size_t mine = counts[rank()];
  std::vector<unsigned char> pieces(mine * n);
  for (int r = 0; r < n; ++r) {
    recv_counts[r] = mine;
    recv_offsets[r] = mine * r;
  }
  all_to_allv_bytes(c.data_ptr(), counts, offsets, pieces.data(), recv_counts, recv_offsets);
  std::vector<const void*> ptrs(n);
  for (int r = 0; r < n; ++r) ptrs[r] = pieces.data() + mine * r;
  std::vector<unsigned char> reduced(mine);
  reduce_pieces(c.dtype(), ptrs, static_cast<int64_t>(mine / es), reduced.data(), op);
  Tensor out = Tensor::empty(c.shape(), c.dtype());
  all_gatherv_bytes(reduced.data(), out.data_ptr(), counts);
  t.copy_(out);
}

Tensor ProcessGroup::all_gather(const Tensor& t) {
  check_dtype(t, "all_gather");
  Tensor c = t.contiguous();
  const int64_t n0 = c.dim() == 0 ? 1 : c.size(0);
  Tensor out = Tensor::empty(with_dim0(c.shape(), n0 * size()), c.dtype());
  all_gather_bytes(c.data_ptr(), c.nbytes(), out.data_ptr());
  return out;
}

Tensor ProcessGroup::all_gatherv(const Tensor& t) {
  check_dtype(t, "all_gatherv");
  TITAN_CHECK(t.dim() >= 1, "all_gatherv: needs a tensor with dim >= 1, got a 0-d tensor");
  Tensor c = t.contiguous();
  const int n = size();
  std::vector<int64_t> rows(n);
  const int64_t mine = c.size(0);
  all_gather_bytes(&mine, sizeof(int64_t), rows.data());
  const size_t rb = row_bytes(c);
  std::vector<size_t> counts(n);
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = static_cast<size_t>(rows[r]) * rb;
    total += rows[r];
  }
  Tensor out = Tensor::empty(with_dim0(c.shape(), total), c.dtype());
  all_gatherv_bytes(c.data_ptr(), out.data_ptr(), counts);
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& t, ReduceOp op) {
  check_dtype(t, "reduce_scatter");
  const int n = size();
  TITAN_CHECK(t.dim() >= 1 && t.size(0) % n == 0,
              "reduce_scatter: dim 0 of shape {} must be a multiple of the group size {}", shape_str(t.shape()),
              n);
  Tensor c = t.contiguous();
  const int64_t m = c.size(0) / n;
  Tensor pieces = all_to_all(c);  // chunk r = rank r's rows for this rank
  Tensor out = Tensor::empty(with_dim0(c.shape(), m), c.dtype());
  const size_t chunk = pieces.nbytes() / n;
  std::vector<const void*> ptrs(n);
  for (int r = 0; r < n; ++r) ptrs[r] = static_cast<const unsigned char*>(pieces.data_ptr()) + chunk * r;
  reduce_pieces(c.dtype(), ptrs, out.numel(), out.data_ptr(), op);
  return out;
}

Tensor ProcessGroup::all_to_all(const Tensor& t) {
  check_dtype(t, "all_to_all");
  const int n = size();
  TITAN_CHECK(t.dim() >= 1 && t.size(0) % n == 0,
              "all_to_all: dim 0 of shape {} must be a multiple of the group size {}", shape_str(t.shape()), n);
  Tensor c = t.contiguous();
  Tensor out = Tensor::empty(c.shape(), c.dtype());
  const size_t chunk = c.nbytes() / n;
  std::vector<size_t> counts(n, chunk), offsets(n);
  for (int r = 0; r < n; ++r) offsets[r] = chunk * r;
  all_to_allv_bytes(c.data_ptr(), counts, offsets, out.data_ptr(), counts, offsets);
  return out;
}

Tensor ProcessGroup::all_to_allv(const Tensor& t, const std::vector<int64_t>& send_rows,
                                 std::vector<int64_t> recv_rows) {
  check_dtype(t, "all_to_allv");
  const int n = size();
  TITAN_CHECK(t.dim() >= 1, "all_to_allv: needs a tensor with dim >= 1");
  TITAN_CHECK(static_cast<int>(send_rows.size()) == n, "all_to_allv: {} send counts for a group of {}",
              send_rows.size(), n);
  int64_t sum = 0;
  for (int64_t r : send_rows) {
    TITAN_CHECK(r >= 0, "all_to_allv: negative send count {}", r);
    sum += r;
  }
  TITAN_CHECK(sum == t.size(0), "all_to_allv: send counts sum to {}, dim 0 is {}", sum, t.size(0));
  if (recv_rows.empty()) {
    // Exchange the counts first: entry j of rank i goes to rank j.
    recv_rows.assign(n, 0);
    std::vector<size_t> c8(n, sizeof(int64_t)), o8(n);
    for (int r = 0; r < n; ++r) o8[r] = sizeof(int64_t) * r;
    all_to_allv_bytes(send_rows.data(), c8, o8, recv_rows.data(), c8, o8);
  }
  TITAN_CHECK(static_cast<int>(recv_rows.size()) == n, "all_to_allv: {} receive counts for a group of {}",
              recv_rows.size(), n);
  Tensor c = t.contiguous();
  const size_t rb = row_bytes(c);
  std::vector<size_t> sc(n), so(n), rc(n), ro(n);
  size_t s_off = 0, r_off = 0;
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    sc[r] = static_cast<size_t>(send_rows[r]) * rb;
    so[r] = s_off;
    s_off += sc[r];
    rc[r] = static_cast<size_t>(recv_rows[r]) * rb;
    ro[r] = r_off;
    r_off += rc[r];
    total += recv_rows[r];
  }
  Tensor out = Tensor::empty(with_dim0(c.shape(), total), c.dtype());
  all_to_allv_bytes(c.data_ptr(), sc, so, out.data_ptr(), rc, ro);
  return out;
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  check_dtype(t, "broadcast");
  TITAN_CHECK(root >= 0 && root < size(), "broadcast: root {} outside the group of {}", root, size());
  if (size() == 1) return;
  Tensor c = t.contiguous();
  broadcast_bytes(c.data_ptr(), c.nbytes(), root);
  if (!c.is_same(t)) t.copy_(c);
}

void ProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_dtype(t, "send");
  TITAN_CHECK(dst >= 0 && dst < size() && dst != rank(), "send: bad destination rank {} (group of {}, rank {})",
              dst, size(), rank());
  Tensor c = t.contiguous();
  send_bytes(c.data_ptr(), c.nbytes(), dst, tag);
}

std::unique_ptr<PendingSend> ProcessGroup::isend_bytes(const void*, size_t, int dst, int) {
  fail("isend: the {} backend has no point-to-point send (to rank {})", backend(), dst);
}

void ProcessGroup::recv(Tensor& t, int src, int tag) {
  check_dtype(t, "recv");
  TITAN_CHECK(src >= 0 && src < size() && src != rank(), "recv: bad source rank {} (group of {}, rank {})", src,
              size(), rank());
  Tensor c = t.contiguous();
  recv_bytes(c.data_ptr(), c.nbytes(), src, tag);
  if (!c.is_same(t)) t.copy_(c);
}

double ProcessGroup::all_reduce_f64_sum(double v) {
  // Gathered and summed in rank order in f64 (the same bits on every rank).
  std::vector<double> all(size());
  all_gather_bytes(&v, sizeof(double), all.data());
  double s = all[0];
  for (int r = 1; r < size(); ++r) s += all[r];
  return s;
}

int64_t ProcessGroup::all_reduce_i64(int64_t v, ReduceOp op) {
  Tensor t = Tensor::from_vector(std::vector<int64_t>{v}, {1});
  all_reduce(t, op);
  return t.item<int64_t>();
}

// ---- LocalProcessGroup

void LocalProcessGroup::all_gather_bytes(const void* send, size_t bytes, void* recv) {
  if (bytes && send != recv) std::memmove(recv, send, bytes);
}
void LocalProcessGroup::all_gatherv_bytes(const void* send, void* recv, const std::vector<size_t>& counts) {
  if (counts.at(0) && send != recv) std::memmove(recv, send, counts[0]);
}
void LocalProcessGroup::all_to_allv_bytes(const void* send, const std::vector<size_t>& send_counts,
                                          const std::vector<size_t>& send_offsets, void* recv,
                                          const std::vector<size_t>& recv_counts,
                                          const std::vector<size_t>& recv_offsets) {
  TITAN_CHECK(send_counts.at(0) == recv_counts.at(0), "all_to_allv: sends {} bytes to itself, expects {}",
              send_counts[0], recv_counts[0]);
  if (send_counts[0])
    std::memmove(static_cast<unsigned char*>(recv) + recv_offsets.at(0),
                 static_cast<const unsigned char*>(send) + send_offsets.at(0), send_counts[0]);
}
void LocalProcessGroup::broadcast_bytes(void*, size_t, int root) {
  TITAN_CHECK(root == 0, "broadcast: root {} outside a group of 1", root);
}
void LocalProcessGroup::send_bytes(const void*, size_t, int dst, int) {
  fail("send: a group of one rank has no rank {} to send to", dst);
}
void LocalProcessGroup::recv_bytes(void*, size_t, int src, int) {
  fail("recv: a group of one rank has no rank {} to receive from", src);
}
std::unique_ptr<ProcessGroup> LocalProcessGroup::split(int color, int) {
  if (color < 0) return nullptr;
  return std::make_unique<LocalProcessGroup>(world_rank_);
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

std::string rank_prefix() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = std::getenv("PMIX_RANK");
  return r ? fmt::format("rank {}: ", r) : std::string();
}

}  // namespace titan::distributed
