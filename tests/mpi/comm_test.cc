// MpiCommunicator under mpiexec -n 4: every collective against values computed
// locally from the rank-dependent inputs, point-to-point rings, non-blocking
// forms overlapping local work, TP/DP-style splits, 16M-float buffers, buffers
// split into several MPI calls, the watchdog on a recv, MPI error conversion.
// Values are small integers, so float sums are exact and compared with ==.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "exec/comm/mpi_communicator.h"

namespace loom::exec {
namespace {

Communicator* g_world = nullptr;
Communicator& world() { return *g_world; }

#define ASSERT_OK(expr)                                         \
  do {                                                          \
    ::loom::Status s_ = (expr);                                 \
    ASSERT_TRUE(s_.is_ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

float val(int rank, size_t i) { return float(rank * 3 + int(i % 97)); }

// Compares got[i] with want(i); reports the first mismatch only (buffers are large).
template <typename T, typename Want>
void expect_all(const std::vector<T>& got, Want want, const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want(i) << " (rank "
                    << world().rank() << ")";
      return;
    }
  }
}

// The checks below take the communicator and count, so they run both on the
// plain world and on one that splits buffers into 1000-element MPI calls.
void check_all_reduce(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  std::vector<float> sum(n), mx(n), mn(n);
  std::vector<double> dsum(n);
  for (size_t i = 0; i < n; ++i) {
    sum[i] = val(me, i);
    mx[i] = mn[i] = float((i + 5 * size_t(me)) % 11);
    dsum[i] = 0.5 * me + double(i);
  }
  ASSERT_OK(c.all_reduce(sum.data(), n, ReduceOp::kSum));
  ASSERT_OK(c.all_reduce(mx.data(), n, ReduceOp::kMax));
  ASSERT_OK(c.all_reduce(mn.data(), n, ReduceOp::kMin));
  ASSERT_OK(c.all_reduce(dsum.data(), n, ReduceOp::kSum));
  auto over_ranks = [&](auto f, auto combine, float init) {
    return [=](size_t i) {
      float acc = init;
      for (int r = 0; r < p; ++r) acc = combine(acc, f(r, i));
      return acc;
    };
  };
  auto perm = [](int r, size_t i) { return float((i + 5 * size_t(r)) % 11); };
  expect_all(sum,
             over_ranks(
                 val, [](float a, float b) { return a + b; }, 0.f),
             "sum");
  expect_all(mx,
             over_ranks(
                 perm, [](float a, float b) { return std::max(a, b); }, -1.f),
             "max");
  expect_all(mn,
             over_ranks(
                 perm, [](float a, float b) { return std::min(a, b); }, 99.f),
             "min");
  expect_all(
      dsum, [&](size_t i) { return 0.25 * p * (p - 1) + double(p) * double(i); }, "double sum");
}

void check_reduce_scatter(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  std::vector<float> send(n * p), recv(n, -1.f);
  for (size_t j = 0; j < send.size(); ++j) send[j] = val(me, j);
  ASSERT_OK(c.reduce_scatter(send.data(), recv.data(), n));
  expect_all(
      recv,
      [&](size_t k) {
        float s = 0;
        for (int r = 0; r < p; ++r) s += val(r, size_t(me) * n + k);
        return s;
      },
      "reduce_scatter slice");
}

void check_all_gather(Communicator& c, size_t n) {
  std::vector<float> send(n), recv(n * c.size(), -1.f);
  for (size_t k = 0; k < n; ++k) send[k] = val(c.rank(), k);
  ASSERT_OK(c.all_gather(send.data(), recv.data(), n));
  expect_all(
      recv, [&](size_t j) { return val(int(j / n), j % n); }, "all_gather (blocks in rank order)");
}

void check_broadcast(Communicator& c, size_t n) {
  const int root = c.size() - 1;  // not rank 0
  std::vector<float> buf(n, -1.f);
  if (c.rank() == root)
    for (size_t i = 0; i < n; ++i) buf[i] = val(root, i);
  ASSERT_OK(c.broadcast(buf.data(), n, root));
  expect_all(
      buf, [&](size_t i) { return val(root, i); }, "broadcast");

  std::vector<unsigned char> bytes(n + 3, 0);
  if (c.rank() == root)
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (unsigned char)(i * 7 + 1);
  ASSERT_OK(c.broadcast_bytes(bytes.data(), bytes.size(), root));
  expect_all(
      bytes, [](size_t i) { return (unsigned char)(i * 7 + 1); }, "broadcast_bytes");
}

void check_all_to_all(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  // Block i of rank r carries code(r, i): after the exchange rank me holds code(i, me) in block i.
  auto code = [n](int from, int to, size_t k) { return float(from * 1000 + to * 100 + int(k % 50)); };
  std::vector<float> send(n * p), recv(n * p, -1.f);
  for (int to = 0; to < p; ++to)
    for (size_t k = 0; k < n; ++k) send[size_t(to) * n + k] = code(me, to, k);
  ASSERT_OK(c.all_to_all(send.data(), recv.data(), n));
  expect_all(
      recv, [&](size_t j) { return code(int(j / n), me, j % n); }, "all_to_all");
}

void check_ring(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank(), next = (me + 1) % p, prev = (me + p - 1) % p;
  std::vector<float> out(n), in(n, -1.f);
  for (size_t i = 0; i < n; ++i) out[i] = val(me, i);
  // Blocking: even ranks send first, odd ranks receive first (no cycle of sends).
  if (me % 2 == 0) {
    ASSERT_OK(c.send(out.data(), n, next, 7));
    ASSERT_OK(c.recv(in.data(), n, prev, 7));
  } else {
    ASSERT_OK(c.recv(in.data(), n, prev, 7));
    ASSERT_OK(c.send(out.data(), n, next, 7));
  }
  expect_all(
      in, [&](size_t i) { return val(prev, i); }, "blocking ring");
  // Non-blocking: both directions at once, every rank posts before waiting.
  std::vector<float> in2(n, -1.f);
  auto r = c.irecv(in2.data(), n, next, 8);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto s = c.isend(out.data(), n, prev, 8);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_OK((*s)->wait());
  ASSERT_OK((*r)->wait());
  expect_all(
      in2, [&](size_t i) { return val(next, i); }, "non-blocking reverse ring");
}

void check_everything(Communicator& c, size_t n) {
  check_all_reduce(c, n);
  check_reduce_scatter(c, n);
  check_all_gather(c, n);
  check_broadcast(c, n);
  check_all_to_all(c, n);
  if (c.size() > 1) check_ring(c, n);
}

TEST(MpiComm, WorldMatchesTheLauncher) {
  EXPECT_EQ(world().name(), "world");
  LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.launcher, "openmpi");
  EXPECT_EQ(world().size(), env.world);
  EXPECT_EQ(world().rank(), env.rank);
  ASSERT_OK(world().barrier());
}

TEST(MpiComm, CollectivesAndRingsAgainstLocalValues) {
  for (size_t n : {size_t(1), size_t(5), size_t(1000), size_t(65537)}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    check_everything(world(), n);
  }
}

TEST(MpiComm, ZeroCountsComplete) { check_everything(world(), 0); }

TEST(MpiComm, NonBlockingOverlapsLocalWork) {
  const int p = world().size(), me = world().rank();
  const size_t n = size_t(1) << 20;
  std::vector<float> ar(n), rs_send(n), rs(n / p), ag(n / p * p);
  for (size_t i = 0; i < n; ++i) ar[i] = rs_send[i] = val(me, i);
  auto a = world().iall_reduce(ar.data(), n, ReduceOp::kSum);
  auto b = world().ireduce_scatter(rs_send.data(), rs.data(), n / p);
  auto g = world().iall_gather(rs_send.data(), ag.data(), n / p);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && g.is_ok());
  // Local work while the collectives run, polling them as a training step would.
  double local = 0;
  int polls = 0;
  while (!(*a)->test()) {
    for (int k = 0; k < 10000; ++k) local += 1e-3 * k;
    ++polls;
  }
  EXPECT_GT(local, 0);
  ASSERT_OK((*g)->wait());  // waits in another order than the starts
  ASSERT_OK((*b)->wait());
  ASSERT_OK((*a)->wait());
  EXPECT_TRUE((*a)->test());
  ASSERT_OK((*a)->wait());  // a completed request waits again at once
  expect_all(
      ar,
      [&](size_t i) {
        float s = 0;
        for (int r = 0; r < p; ++r) s += val(r, i);
        return s;
      },
      "iall_reduce");
  expect_all(
      rs,
      [&](size_t k) {
        float s = 0;
        for (int r = 0; r < p; ++r) s += val(r, me * (n / p) + k);
        return s;
      },
      "ireduce_scatter");
  expect_all(
      ag, [&](size_t j) { return val(int(j / (n / p)), j % (n / p)); }, "iall_gather");
}

TEST(MpiComm, SplitIntoTensorAndDataParallelGroups) {
  const int p = world().size(), me = world().rank();
  if (p % 2 != 0) GTEST_SKIP() << "needs an even number of ranks, got " << p;
  auto tp = world().split(me / 2, me, "tp");  // {0,1} {2,3}
  auto dp = world().split(me % 2, me, "dp");  // {0,2} {1,3}
  ASSERT_TRUE(tp.is_ok()) << tp.status().to_string();
  ASSERT_TRUE(dp.is_ok()) << dp.status().to_string();
  Communicator& t = **tp;
  Communicator& d = **dp;
  EXPECT_EQ(t.name(), "tp");
  EXPECT_EQ(t.size(), 2);
  EXPECT_EQ(t.rank(), me % 2);
  EXPECT_EQ(d.size(), p / 2);
  EXPECT_EQ(d.rank(), me / 2);
  // Which world ranks each group holds, in order: all_gather of the world rank.
  float mine = float(me);
  std::vector<float> t_members(2), d_members(p / 2);
  ASSERT_OK(t.all_gather(&mine, t_members.data(), 1));
  ASSERT_OK(d.all_gather(&mine, d_members.data(), 1));
  EXPECT_EQ(t_members, (std::vector<float>{float(me / 2 * 2), float(me / 2 * 2 + 1)}));
  for (int k = 0; k < p / 2; ++k) EXPECT_EQ(d_members[k], float(me % 2 + 2 * k));
  float tsum = float(me);
  ASSERT_OK(t.all_reduce(&tsum, 1, ReduceOp::kSum));
  EXPECT_EQ(tsum, float(4 * (me / 2) + 1));
  check_everything(t, 777);
  check_everything(d, 777);
  // key orders the ranks: a reversed world.
  auto rev = world().split(0, -me, "reversed");
  ASSERT_TRUE(rev.is_ok()) << rev.status().to_string();
  EXPECT_EQ((*rev)->rank(), p - 1 - me);
}

TEST(MpiComm, SplitRejectsANegativeColorOnEveryRank) {
  auto bad = world().split(world().rank() == 1 ? -1 : 0, 0, "bad");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("rank 1 passed color -1"), std::string::npos) << bad.status().to_string();
}

TEST(MpiComm, SixteenMillionFloats) {
  const int p = world().size(), me = world().rank();
  const size_t n = size_t(16) << 20;  // 16M floats, 64 MiB
  std::vector<float> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = float(i % 1024 + size_t(me));
  ASSERT_OK(world().all_reduce(buf.data(), n, ReduceOp::kSum));
  expect_all(
      buf, [&](size_t i) { return float(p * (i % 1024) + p * (p - 1) / 2); }, "16M all_reduce");
}

TEST(MpiComm, BuffersSplitIntoSeveralMpiCalls) {
  // max_count_per_call = 1000: 2501 elements take 3 calls (1000, 1000, 501),
  // and 11 for the block collectives (1000 / 4 ranks = 250 per block): the
  // code path of a buffer beyond INT_MAX elements.
  auto chunked = mpi_world(nullptr, nullptr, MpiOptions{.timeout_s = 60, .max_count_per_call = 1000});
  ASSERT_TRUE(chunked.is_ok()) << chunked.status().to_string();
  check_everything(**chunked, 2501);
  std::vector<float> buf(2501, float(world().rank()));
  auto req = (*chunked)->iall_reduce(buf.data(), buf.size(), ReduceOp::kMax);
  ASSERT_TRUE(req.is_ok());
  ASSERT_OK((*req)->wait());
  expect_all(
      buf, [&](size_t) { return float(world().size() - 1); }, "chunked iall_reduce");
}

TEST(MpiComm, WatchdogTimesOutARecvAndCancelsIt) {
  // Rank 0 has a 0.3 s watchdog and waits for a message rank 1 has not sent.
  const int me = world().rank();
  auto w = mpi_world(nullptr, nullptr, MpiOptions{.timeout_s = me == 0 ? 0.3 : 30});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  Communicator& c = **w;
  float x = -1;
  if (me == 0) {
    auto t0 = std::chrono::steady_clock::now();
    Status s = c.recv(&x, 1, 1, 4242);
    double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    for (const char* part : {"recv on communicator 'world' (rank 0 of", "within 0.3 s", "loom execute --timeout"}) {
      EXPECT_NE(s.message().find(part), std::string::npos) << "'" << part << "' not in: " << s.message();
    }
    EXPECT_GE(waited_s, 0.3);
    EXPECT_LT(waited_s, 5.0);
  }
  // The cancelled recv left the communicator usable and consumed nothing.
  ASSERT_OK(c.barrier());
  if (me == 1) {
    float v = 42;
    ASSERT_OK(c.send(&v, 1, 0, 4242));
  } else if (me == 0) {
    ASSERT_OK(c.recv(&x, 1, 1, 4242));
    EXPECT_EQ(x, 42);
  }
  ASSERT_OK(c.barrier());
}

TEST(MpiComm, MpiErrorsBecomeStatuses) {
  const int me = world().rank(), p = world().size();
  float buf[10] = {};
  // Caught before MPI is called: the same on every rank.
  EXPECT_EQ(world().send(buf, 1, p, 0).code(), StatusCode::kInvalidArgument);
  Status bad_root = world().broadcast(buf, 1, -1);
  EXPECT_EQ(bad_root.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_root.message().find("root=-1 is not a rank"), std::string::npos) << bad_root.to_string();
  EXPECT_EQ(world().recv(buf, 1, 0, -5).code(), StatusCode::kInvalidArgument);
  // Reported by MPI (MPI_ERR_TRUNCATE): 10 floats into a 5-float recv.
  if (me == 1) {
    ASSERT_OK(world().send(buf, 10, 0, 11));
    ASSERT_OK(world().send(buf, 3, 0, 12));
  } else if (me == 0) {
    Status s = world().recv(buf, 5, 1, 11);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("recv on communicator 'world'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("MPI_Irecv (completed by MPI_Test) failed: MPI_ERR_TRUNCATE"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("truncat"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("mpi_communicator.cc:"), std::string::npos) << s.message();
    // Fewer floats than asked for is also a mismatch.
    s = world().recv(buf, 5, 1, 12);
    EXPECT_NE(s.message().find("received 3 floats from rank 1 but expected 5"), std::string::npos) << s.to_string();
  }
  ASSERT_OK(world().barrier());
}

// Non-zero ranks print failures only, prefixed with their rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.message());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace loom::exec

int main(int argc, char** argv) {
  using namespace loom::exec;
  ::testing::InitGoogleTest(&argc, argv);
  auto world = mpi_world(&argc, &argv, MpiOptions{.timeout_s = 20});
  if (!world.is_ok()) {
    std::fprintf(stderr, "comm_test: %s\n", world.status().to_string().c_str());
    return 1;
  }
  g_world = world->get();
  const int rank = g_world->rank();
  if (g_world->size() < 2) {
    std::fprintf(stderr, "comm_test: needs several ranks; run it as `ctest -L mpi` or under mpiexec -n 4\n");
    world->reset();
    mpi_finalize();
    return 1;
  }
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Every rank exits with the same code: failed anywhere is failed everywhere.
  double any_failed = failed;
  loom::Status s = g_world->all_reduce(&any_failed, 1, ReduceOp::kMax);
  int code = (!s.is_ok() || any_failed != 0) ? 1 : 0;
  if (!s.is_ok()) std::fprintf(stderr, "[rank %d] comm_test: %s\n", rank, s.to_string().c_str());
  if (rank == 0) std::printf("comm_test: %s on %d ranks\n", code ? "FAILED" : "passed", g_world->size());
  g_world = nullptr;
  world->reset();
  mpi_finalize();
  return code;
}
