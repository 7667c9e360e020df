// ProcessGroup collectives, DeviceMesh groups and DTensor placements. Run as one
// process (a world of one, no MPI start-up) and under mpirun -np 2 / -np 4 (ctest
// label mpi): every rank runs every test in the same order.
//
// Oracles: each rank regenerates every rank's input (Philox, keyed by the rank) and
// forms the expected result with a plain loop — the sum left to right in rank order,
// in f32 (bf16: widened, summed in f32, rounded once) — compared by memcmp. Inputs mix
// magnitudes (1e8 next to 1) so that another summation order gives other bits; the
// OrderMatters test checks that it does.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "titan/core/error.h"
#include "titan/distributed/device_mesh.h"
#include "titan/distributed/dtensor.h"
#include "titan/distributed/parallel_dims.h"
#include "titan/distributed/process_group.h"
#include "titan/distributed/runtime.h"

namespace td = titan::distributed;
using titan::DType;
using titan::Tensor;

namespace {

td::ProcessGroup& W() { return *td::world(); }

// Rank r's input: values of widely different magnitudes.
Tensor input_of(int r, int64_t n, DType dt = DType::f32) {
  Tensor u = Tensor::randn({n}, /*seed=*/1000 + r);
  std::vector<float> v = u.to_vector<float>();
  for (int64_t i = 0; i < n; ++i)
    if (i % 3 == 0) v[i] *= 1e8f;
  return Tensor::from_vector(v, {n}).to(dt);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const titan::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ProcessGroup, WorldWithoutLauncherIsLocal) {
  if (td::launched_by_mpi()) {
    EXPECT_EQ(W().backend(), "mpi");
    EXPECT_TRUE(td::mpi_initialized());
  } else {
    EXPECT_EQ(W().backend(), "local");
    EXPECT_EQ(W().size(), 1);
    EXPECT_FALSE(td::mpi_initialized()) << "a process not started by mpirun must not call MPI_Init";
  }
}

TEST(ProcessGroup, AllReduceSumIsLeftToRightInRankOrder) {
  const int n = W().size(), me = W().rank();
  for (int64_t len : {1, 7, 1000, 40001}) {
    Tensor t = input_of(me, len);
    W().all_reduce(t);
    std::vector<float> want = input_of(0, len).to_vector<float>();
    for (int r = 1; r < n; ++r) {
      std::vector<float> p = input_of(r, len).to_vector<float>();
      for (int64_t i = 0; i < len; ++i) want[i] = want[i] + p[i];
    }
    EXPECT_TRUE(same_bits(t, Tensor::from_vector(want, {len}))) << "len " << len;
  }
}

TEST(ProcessGroup, OrderMatters) {
  // The inputs above do depend on the order: the right-to-left sum differs somewhere.
  const int n = W().size();
  if (n == 1) GTEST_SKIP() << "one rank: one order";
  const int64_t len = 1000;
  std::vector<float> l2r = input_of(0, len).to_vector<float>(), r2l = input_of(n - 1, len).to_vector<float>();
  for (int r = 1; r < n; ++r) {
    std::vector<float> p = input_of(r, len).to_vector<float>(), q = input_of(n - 1 - r, len).to_vector<float>();
    for (int64_t i = 0; i < len; ++i) {
      l2r[i] += p[i];
      r2l[i] += q[i];
    }
  }
  if (n == 2) GTEST_SKIP() << "two ranks: a + b == b + a";
  EXPECT_NE(std::memcmp(l2r.data(), r2l.data(), len * 4), 0);
}

TEST(ProcessGroup, AllReduceBf16WidenedSummedRoundedOnce) {
  const int n = W().size(), me = W().rank();
  const int64_t len = 513;
  Tensor t = input_of(me, len, DType::bf16);
  W().all_reduce(t);
  std::vector<float> acc(len, 0.0f);
  for (int r = 0; r < n; ++r) {
    std::vector<float> p = input_of(r, len, DType::bf16).to_vector<float>();
    for (int64_t i = 0; i < len; ++i) acc[i] = r == 0 ? p[i] : acc[i] + p[i];
  }
  EXPECT_TRUE(same_bits(t, Tensor::from_vector(acc, {len}).to(DType::bf16)));
}

TEST(ProcessGroup, AllReduceIntegersMaxMin) {
  const int n = W().size(), me = W().rank();
  Tensor a = Tensor::from_vector(std::vector<int64_t>{me + 1, int64_t{1} << 40, -me}, {3});
  W().all_reduce(a);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{n * (n + 1) / 2, n * (int64_t{1} << 40), -n * (n - 1) / 2}));
  Tensor b = Tensor::from_vector(std::vector<int32_t>{me, -me}, {2});
  W().all_reduce(b, td::ReduceOp::max);
  EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{n - 1, 0}));
  Tensor c = Tensor::from_vector(std::vector<float>{float(me), -float(me)}, {2});
  W().all_reduce(c, td::ReduceOp::min);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0.0f, -float(n - 1)}));
  EXPECT_EQ(W().all_reduce_i64(me + 1), n * (n + 1) / 2);
  EXPECT_EQ(W().all_reduce_f64_sum(0.5), 0.5 * n);
}

TEST(ProcessGroup, AllGatherAndV) {
  const int n = W().size(), me = W().rank();
  Tensor t = Tensor::full({2, 3}, me, DType::i32);
  Tensor g = W().all_gather(t);
  ASSERT_EQ(g.shape(), (titan::Shape{2 * n, 3}));
  std::vector<int32_t> v = g.to_vector<int32_t>();
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(v[r * 6 + i], r);
  // Rank r sends r + 1 rows (bf16).
  Tensor u = Tensor::full({me + 1, 2}, me, DType::bf16);
  Tensor gv = W().all_gatherv(u);
  ASSERT_EQ(gv.shape(), (titan::Shape{n * (n + 1) / 2, 2}));
  std::vector<float> w = gv.to_vector<float>();
  int64_t row = 0;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k <= r; ++k, ++row) EXPECT_EQ(w[row * 2], float(r)) << row;
}

TEST(ProcessGroup, ReduceScatterIsTheChunkOfAllReduce) {
  const int n = W().size(), me = W().rank();
  const int64_t m = 37;
  Tensor t = input_of(me, m * n);
  Tensor rs = W().reduce_scatter(t);
  Tensor ar = t.clone();
  W().all_reduce(ar);
  EXPECT_TRUE(same_bits(rs, ar.narrow(0, me * m, m)));
  if (n > 1) {
    EXPECT_NE(error_of([&] { W().reduce_scatter(Tensor::zeros({n * m + 1})); }), "");
  }
}

TEST(ProcessGroup, AllToAllAndV) {
  const int n = W().size(), me = W().rank();
  // Chunk j of rank i holds 100 i + j.
  std::vector<int64_t> v(n);
  for (int j = 0; j < n; ++j) v[j] = 100 * me + j;
  Tensor out = W().all_to_all(Tensor::from_vector(v, {n}));
  for (int i = 0; i < n; ++i) EXPECT_EQ(out.to_vector<int64_t>()[i], 100 * i + me);
  // Rank i sends j + 1 rows to rank j, each row [i, j].
  std::vector<int64_t> send_rows(n), data;
  for (int j = 0; j < n; ++j) {
    send_rows[j] = j + 1;
    for (int k = 0; k <= j; ++k) data.insert(data.end(), {me, j});
  }
  Tensor got = W().all_to_allv(Tensor::from_vector(data, {static_cast<int64_t>(data.size() / 2), 2}), send_rows);
  ASSERT_EQ(got.shape(), (titan::Shape{int64_t(n) * (me + 1), 2}));
  std::vector<int64_t> g = got.to_vector<int64_t>();
  for (int64_t row = 0; row < got.size(0); ++row) {
    EXPECT_EQ(g[row * 2], row / (me + 1));
    EXPECT_EQ(g[row * 2 + 1], me);
  }
}

TEST(ProcessGroup, BroadcastSendRecvBarrier) {
  const int n = W().size(), me = W().rank();
  Tensor t = Tensor::full({4}, me == n - 1 ? 7.5 : -1.0);
  W().broadcast(t, n - 1);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4, 7.5f));
  if (n > 1) {
    // A ring: even ranks send first, odd ranks receive first.
    Tensor mine = Tensor::full({3}, me, DType::i64), got = Tensor::zeros({3}, DType::i64);
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    if (me % 2 == 0) {
      W().send(mine, next, 5);
      W().recv(got, prev, 5);
    } else {
      W().recv(got, prev, 5);
      W().send(mine, next, 5);
    }
    EXPECT_EQ(got.to_vector<int64_t>(), std::vector<int64_t>(3, prev));
  } else {
    EXPECT_NE(error_of([&] { W().send(t, 1); }), "");
  }
  W().barrier();
}

TEST(ProcessGroup, IsendLetsEveryRankSendBeforeReceiving) {
  // Every rank sends 4 MiB around a ring before receiving: with blocking sends of that
  // size (MPI's rendezvous protocol) every rank would wait for a receive that no rank
  // posts. Messages of one tag arrive in the order they were started.
  const int n = W().size(), me = W().rank();
  if (n == 1) {
    EXPECT_NE(error_of([&] { W().isend_bytes(nullptr, 0, 1, 0); }), "");
    return;
  }
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const int64_t elems = 1 << 20;
  Tensor a = input_of(me, elems), b = input_of(me + n, elems);
  auto s1 = W().isend_bytes(a.data_ptr(), a.nbytes(), next, 9);
  auto s2 = W().isend_bytes(b.data_ptr(), b.nbytes(), next, 9);
  Tensor got_a = Tensor::empty({elems}), got_b = Tensor::empty({elems});
  W().recv(got_a, prev, 9);
  W().recv(got_b, prev, 9);
  s1->wait();
  s2->wait();
  EXPECT_TRUE(same_bits(got_a, input_of(prev, elems)));
  EXPECT_TRUE(same_bits(got_b, input_of(prev + n, elems)));
  W().barrier();
}

TEST(DeviceMesh, CoordinatesAndGroupsFollowTorchTitanOrder) {
  const int n = W().size();
  std::vector<td::MeshShape> shapes;
  td::MeshShape s1;
  s1.dp_shard = n;
  shapes.push_back(s1);
  if (n == 4) {
    td::MeshShape hsdp;
    hsdp.dp_replicate = 2;
    hsdp.dp_shard = 2;
    shapes.push_back(hsdp);
    td::MeshShape three;
    three.pp = 2;
    three.tp = 2;
    shapes.push_back(three);
  }
  for (const td::MeshShape& s : shapes) {
    td::DeviceMesh mesh(td::world(), s);
    const int me = W().rank();
    // rank = (((pp R + r) S + s) C + c) T + t
    int r = 0;
    for (int d = 0; d < td::kNumMeshDims; ++d) r = r * s.size(td::MeshDim(d)) + mesh.coord(td::MeshDim(d));
    EXPECT_EQ(r, me) << s.str();
    for (int d = 0; d < td::kNumMeshDims; ++d) {
      const td::MeshDim dim = td::MeshDim(d);
      td::ProcessGroup& g = mesh.group(dim);
      ASSERT_EQ(g.size(), s.size(dim)) << s.str() << " " << td::mesh_dim_name(dim);
      EXPECT_EQ(g.rank(), mesh.coord(dim));
      // The members are the world ranks with my coordinates except along dim, in order.
      Tensor who = g.all_gather(Tensor::from_vector(std::vector<int64_t>{me}, {1}));
      for (int k = 0; k < g.size(); ++k) {
        std::array<int, td::kNumMeshDims> c{};
        for (int e = 0; e < td::kNumMeshDims; ++e) c[e] = mesh.coord(td::MeshDim(e));
        c[d] = k;
        EXPECT_EQ(who.to_vector<int64_t>()[k], mesh.rank_of(c));
      }
    }
    EXPECT_EQ(mesh.dp_size(), s.dp_replicate * s.dp_shard);
    EXPECT_EQ(mesh.dp_rank(), mesh.coord(td::MeshDim::dp_replicate) * s.dp_shard + mesh.coord(td::MeshDim::dp_shard));
  }
}

TEST(DeviceMesh, ExpertParallelGroupIsCarvedFromDpShard) {
  const int n = W().size();
  if (n < 4) GTEST_SKIP() << "needs 4 ranks";
  td::MeshShape s;
  s.dp_shard = 4;
  s.ep = 2;
  td::DeviceMesh mesh(td::world(), s);
  // dp_shard = mod_ep (2) × in_ep (2), in_ep the inner factor: ep groups {0,1} and {2,3}.
  Tensor who = mesh.ep().all_gather(Tensor::from_vector(std::vector<int64_t>{W().rank()}, {1}));
  const int64_t base = W().rank() / 2 * 2;
  EXPECT_EQ(who.to_vector<int64_t>(), (std::vector<int64_t>{base, base + 1}));
}

TEST(DeviceMesh, BadShapesAreOneLineErrors) {
  td::MeshShape s;
  s.dp_shard = W().size() + 1;
  EXPECT_EQ(error_of([&] { td::DeviceMesh m(td::world(), s); }),
            fmt::format("device mesh pp=1 dp_replicate=1 dp_shard={} cp=1 tp=1: the product of the degrees is {}, "
                        "but the world has {} ranks",
                        W().size() + 1, W().size() + 1, W().size()));
}

TEST(DTensor, ShardRangeIsTorchChunk) {
  // torch.chunk(torch.arange(5), 4) -> sizes 2, 2, 1; DTensor gives the 4th rank 0 rows.
  std::vector<std::pair<int64_t, int64_t>> want{{0, 2}, {2, 2}, {4, 1}, {5, 0}};
  for (int i = 0; i < 4; ++i) {
    td::ShardRange r = td::shard_range(5, 4, i);
    EXPECT_EQ(std::make_pair(r.offset, r.length), want[i]) << i;
  }
  EXPECT_EQ(td::shard_range(8, 2, 1).offset, 4);
}

TEST(DTensor, FullTensorAndRedistributeOverEveryPlacement) {
  const int n = W().size();
  td::MeshShape s;
  s.dp_shard = n;
  td::DeviceMesh mesh(td::world(), s);
  const std::vector<td::MeshDim> dims{td::MeshDim::dp_shard};
  for (titan::Shape shape : {titan::Shape{5, 3}, titan::Shape{8, 6}, titan::Shape{3, 7}}) {
    Tensor full = Tensor::randn(shape, 7);
    const std::vector<td::Placement> all{td::Placement::Shard(0), td::Placement::Shard(1), td::Placement::Replicate(),
                                         td::Placement::Partial()};
    for (const td::Placement& from : all) {
      td::DTensor d = td::DTensor::distribute(full, mesh, dims, {from});
      EXPECT_TRUE(same_bits(d.full_tensor(), full)) << d.str();
      for (const td::Placement& to : all) {
        td::DTensor e = d.redistribute({to});
        EXPECT_EQ(e.placements()[0], to);
        EXPECT_TRUE(same_bits(e.local(), td::DTensor::distribute(full, mesh, dims, {to}).local()))
            << from.str() << " -> " << to.str() << " " << titan::shape_str(shape);
      }
    }
  }
}

TEST(DTensor, PartialSumsInRankOrder) {
  const int n = W().size(), me = W().rank();
  td::MeshShape s;
  s.dp_shard = n;
  td::DeviceMesh mesh(td::world(), s);
  const int64_t len = 8 * n;
  td::DTensor p(input_of(me, len), {len}, mesh, {td::MeshDim::dp_shard}, {td::Placement::Partial()});
  std::vector<float> want = input_of(0, len).to_vector<float>();
  for (int r = 1; r < n; ++r) {
    std::vector<float> q = input_of(r, len).to_vector<float>();
    for (int64_t i = 0; i < len; ++i) want[i] = want[i] + q[i];
  }
  Tensor w = Tensor::from_vector(want, {len});
  EXPECT_TRUE(same_bits(p.full_tensor(), w));
  // Partial -> Shard(0): the reduce-scatter path gives the same bits.
  EXPECT_TRUE(same_bits(p.redistribute({td::Placement::Shard(0)}).local(), w.narrow(0, me * 8, 8)));
}

TEST(DTensor, TwoMeshDimsNest) {
  const int n = W().size();
  if (n != 4) GTEST_SKIP() << "needs 4 ranks";
  td::MeshShape s;
  s.dp_replicate = 2;
  s.dp_shard = 2;
  td::DeviceMesh mesh(td::world(), s);
  Tensor full = Tensor::arange(0, 24, 1, DType::i64).view({8, 3});
  td::DTensor d = td::DTensor::distribute(full, mesh, {td::MeshDim::dp_replicate, td::MeshDim::dp_shard},
                                          {td::Placement::Shard(0), td::Placement::Shard(0)});
  // Rows split over dp_replicate first, then over dp_shard: world rank k holds rows [2k, 2k+2).
  EXPECT_TRUE(same_bits(d.local(), full.narrow(0, 2 * W().rank(), 2)));
  EXPECT_TRUE(same_bits(d.full_tensor(), full));
  td::DTensor e = d.redistribute({td::Placement::Shard(0), td::Placement::Replicate()});
  EXPECT_TRUE(same_bits(e.local(), full.narrow(0, 4 * mesh.coord(td::MeshDim::dp_replicate), 4)));
}

TEST(ParallelDims, BadLayoutsAreOneLineErrors) {
  titan::config::JobConfig job;
  job.training.seq_len = 64;
  td::ModelDims m{4, 8, 4, 96, 256};
  EXPECT_EQ(td::resolve_parallel_dims(job, 4, m).dp_shard, 4);  // -1 = the rest of the world
  job.parallelism.tensor_parallel_degree = 2;
  EXPECT_EQ(td::resolve_parallel_dims(job, 4, m).dp_shard, 2);
  job.parallelism.data_parallel_shard_degree = 4;
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 4, m); }),
            "parallelism: pipeline_parallel_degree (1) × data_parallel_replicate_degree (1) × "
            "data_parallel_shard_degree (4) × context_parallel_degree (1) × tensor_parallel_degree (2) = 8, but the "
            "world has 4 ranks (mpirun -np)");
  job.parallelism.data_parallel_shard_degree = -1;
  job.parallelism.tensor_parallel_degree = 8;
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 8, m); }),
            "parallelism.tensor_parallel_degree=8 does not divide the model's key/value heads (4)");
  job.parallelism.tensor_parallel_degree = 3;
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 3, {4, 3, 3, 96, 256}); }),
            "parallelism.tensor_parallel_degree=3 does not divide the model's vocabulary size (256)");
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 3, {4, 3, 3, 100, 255}); }),
            "parallelism.tensor_parallel_degree=3 does not divide the model's FFN hidden width (100)");
  job.parallelism.tensor_parallel_degree = 1;
  job.parallelism.pipeline_parallel_degree = 8;
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 8, m); }),
            "parallelism.pipeline_parallel_degree=8 is more stages than the model's 4 layers");
  job.parallelism.pipeline_parallel_degree = 1;
  job.parallelism.context_parallel_degree = 3;
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 3, m); }),
            "training.seq_len=64 must be divisible by 2 × parallelism.context_parallel_degree = 6 (each cp rank takes "
            "one head and one tail chunk)");
  job.parallelism.context_parallel_degree = 1;
  job.training.local_batch_size = 3;
  job.training.global_batch_size = 9;
  EXPECT_EQ(error_of([&] { td::resolve_parallel_dims(job, 2, m); }),
            "training.global_batch_size=9 must be a multiple of training.local_batch_size (3) × data-parallel degree "
            "(2) = 6");
  td::MeshShape tp;  // tensor parallelism is implemented (tensor_parallel_test.cpp): not refused
  tp.tp = 2;
  EXPECT_NO_THROW(td::refuse_unimplemented(tp));
  tp.pp = 2;  // inside pipeline stages too (tests/mpi/pp_tp_train_test.cpp)
  tp.dp_shard = 2;
  EXPECT_NO_THROW(td::refuse_unimplemented(tp));
  td::MeshShape cp;  // context parallelism with FSDP is implemented (tests/mpi/cp_train_test.cpp)
  cp.cp = 2;
  cp.dp_shard = 2;
  EXPECT_NO_THROW(td::refuse_unimplemented(cp));
  cp.pp = 2;  // CP inside pipeline stages (tests/mpi/cp_train_test.cpp): not refused
  EXPECT_NO_THROW(td::refuse_unimplemented(cp));
  cp.pp = 1;
  cp.tp = 2;  // CP × TP (tests/mpi/cp_train_test.cpp): not refused
  EXPECT_NO_THROW(td::refuse_unimplemented(cp));
  cp.pp = 2;  // CP × TP × PP: refused first, before any other check
  EXPECT_EQ(error_of([&] { td::refuse_unimplemented(cp); }),
            "parallelism.context_parallel_degree=2 with tensor_parallel_degree=2 and pipeline_parallel_degree=2: "
            "context parallelism with both tensor and pipeline parallelism is not supported (it composes with each "
            "of them, and with FSDP/HSDP)");
  cp.pp = 1;
  td::MeshShape ep;  // EP inside pipeline stages (tests/mpi/ep_train_test.cpp): not refused
  ep.ep = 2;
  ep.dp_shard = 2;
  ep.pp = 2;
  EXPECT_NO_THROW(td::refuse_unimplemented(ep));
  ep.pp = 1;
  ep.tp = 2;  // EP × TP (tests/mpi/ep_train_test.cpp): not refused
  EXPECT_NO_THROW(td::refuse_unimplemented(ep));
  ep.pp = 2;  // EP × TP × PP: refused first, before any other check
  EXPECT_EQ(error_of([&] { td::refuse_unimplemented(ep); }),
            "parallelism.expert_parallel_degree=2 with tensor_parallel_degree=2 and pipeline_parallel_degree=2: "
            "expert parallelism with both tensor and pipeline parallelism is not supported (it composes with each "
            "of them, and with FSDP/HSDP)");
}
