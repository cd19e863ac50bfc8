// The TCP communicator's start-up errors (port in use, unreachable store,
// missing, duplicate or foreign ranks, bad options), abort() in a forked child,
// closing toward a stopped peer, and messages beyond 2 GiB.
#include "tests/unit/exec/tcp_test_support.h"

namespace loom::exec {
namespace {

using namespace tcp_test;

// ---- start-up errors ----------------------------------------------------

TEST(TcpComm, MasterPortInUse) {
  const int port = free_port();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  auto w = tcp_world(options(0, 2, port, 30, 2));
  ::close(fd);
  ASSERT_FALSE(w.is_ok());
  EXPECT_TRUE(contains(w.status().message(), "MASTER_PORT " + std::to_string(port) +
                                                 " on 127.0.0.1 is in use (another job?); set another MASTER_PORT"))
      << w.status().to_string();
}

TEST(TcpComm, UnreachableStoreIsNamedAfterTheRendezvousTimeout) {
  const int port = free_port();
  auto t0 = Clock::now();
  auto w = tcp_world(options(1, 2, port, 30, 0.5));
  double waited = seconds_since(t0);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(contains(w.status().message(), "could not reach the rendezvous store at 127.0.0.1:" +
                                                 std::to_string(port) +
                                                 " (MASTER_ADDR/MASTER_PORT) within 0.5 s: connection refused; is "
                                                 "rank 0 running?"))
      << w.status().to_string();
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 3.0);
}

TEST(TcpComm, MissingRankIsNamedToEveryArrivedRank) {
  const int port = free_port();
  std::vector<Status> got(2);
  std::vector<double> took(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      auto t0 = Clock::now();
      auto w = tcp_world(options(r, 3, port, 30, 1.0));  // rank 2 never starts
      took[size_t(r)] = seconds_since(t0);
      got[size_t(r)] = w.is_ok() ? Status::ok() : w.status();
    });
  }
  for (auto& t : th) t.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(got[size_t(r)].code(), StatusCode::kTimeout) << got[size_t(r)].to_string();
    EXPECT_TRUE(contains(got[size_t(r)].message(), "rank 2 of WORLD_SIZE=3 did not arrive within 1 s (arrived: 0, 1)"))
        << got[size_t(r)].to_string();
    EXPECT_LT(took[size_t(r)], 4.0);
  }
}

TEST(TcpComm, WrongWorldSizeIsRejectedAtRegistration) {
  const int port = free_port();
  std::vector<Status> got(2);
  std::thread a([&] { got[0] = tcp_world(options(0, 2, port, 30, 10)).status(); });
  std::thread b([&] { got[1] = tcp_world(options(1, 3, port, 30, 10)).status(); });
  a.join();
  b.join();
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2; start every rank with the same "
                                      "WORLD_SIZE"))
        << s.to_string();
  }
}

TEST(TcpComm, DuplicateRankIsRejectedAtRegistration) {
  const int port = free_port();
  std::vector<Status> got(3);
  std::vector<std::thread> th;
  th.emplace_back([&] { got[0] = tcp_world(options(0, 3, port, 30, 10)).status(); });
  for (int i = 1; i <= 2; ++i)
    th.emplace_back([&, i] { got[size_t(i)] = tcp_world(options(1, 3, port, 30, 10)).status(); });
  auto t0 = Clock::now();
  for (auto& t : th) t.join();
  EXPECT_LT(seconds_since(t0), 8.0);
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "rank 1 registered twice")) << s.to_string();
  }
}

TEST(TcpComm, JobIdsMustMatch) {
  run_ranks(2, [](Communicator&) {}, [](int r, int port) {
    TcpOptions o = options(r, 2, port);
    o.job_id = "job-42";
    return o;
  });
  // The process of job 'b' hears why at once; job 'a' is not failed by it
  // (it only misses its rank 1, named with the stranger at its timeout).
  const int port = free_port();
  std::vector<Status> got(2);
  std::vector<double> took(2);
  std::thread a([&] {
    TcpOptions o = options(0, 2, port, 30, 2);
    o.job_id = std::string(1, 'a');
    got[0] = tcp_world(o).status();
  });
  std::thread b([&] {
    TcpOptions o = options(1, 2, port, 30, 10);
    o.job_id = std::string(1, 'b');
    auto t0 = Clock::now();
    got[1] = tcp_world(o).status();
    took[1] = seconds_since(t0);
  });
  a.join();
  b.join();
  for (const Status& s : got)
    EXPECT_TRUE(contains(s.message(), "belongs to job 'b' but rank 0 to job 'a'")) << s.to_string();
  EXPECT_EQ(got[1].code(), StatusCode::kInvalidArgument) << got[1].to_string();
  EXPECT_LT(took[1], 5.0);
  EXPECT_EQ(got[0].code(), StatusCode::kTimeout) << got[0].to_string();
  EXPECT_TRUE(contains(got[0].message(), "rank 1 of WORLD_SIZE=2 did not arrive within 2 s")) << got[0].to_string();
  EXPECT_TRUE(contains(got[0].message(), "turned away: the process registering as rank 1")) << got[0].to_string();
}

// Two jobs on one MASTER_PORT: the second job's rank 0 finds the port taken,
// and its rank 1 reaches the first job's store. Only that process fails; the
// first job forms when its own rank 1 arrives.
TEST(TcpComm, AnotherJobsProcessDoesNotFailThisJob) {
  const int port = free_port();
  Status stranger;
  std::thread first0([&] {
    TcpOptions o = options(0, 2, port, 30, 20);
    o.job_id = "first";
    auto w = tcp_world(o);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_OK((*w)->barrier());
  });
  std::thread second1([&] {
    TcpOptions o = options(1, 2, port, 30, 20);
    o.job_id = "second";
    stranger = tcp_world(o).status();
  });
  second1.join();
  EXPECT_EQ(stranger.code(), StatusCode::kInvalidArgument) << stranger.to_string();
  EXPECT_TRUE(contains(stranger.message(), "belongs to job 'second' but rank 0 to job 'first'")) << stranger.to_string();
  std::thread first1([&] {
    TcpOptions o = options(1, 2, port, 30, 20);
    o.job_id = "first";
    auto w = tcp_world(o);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_OK((*w)->barrier());
  });
  first0.join();
  first1.join();
}

// A connection to the store that never registers (a port scanner, a stray
// client) is not sent the address table and job nonce of the mesh.
TEST(TcpComm, AConnectionThatNeverRegisteredGetsNoAddressTable) {
  const int port = free_port();
  std::thread r0([&] {
    auto w = tcp_world(options(0, 2, port, 30, 20));
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_OK((*w)->barrier());
  });
  int fd = -1;
  for (auto t0 = Clock::now(); fd < 0 && seconds_since(t0) < 10;) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ASSERT_GE(fd, 0);
  std::thread r1([&] {
    auto w = tcp_world(options(1, 2, port, 30, 20));
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_OK((*w)->barrier());
  });
  r0.join();
  r1.join();
  // The store is closed now: the stranger reads its end, and nothing before it.
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  EXPECT_EQ(n, 0) << "the stranger received " << n << " bytes";
}

TEST(TcpComm, BadOptionsAreNamed) {
  EXPECT_EQ(tcp_world(options(2, 2, 29500)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tcp_world(options(0, 2, 0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tcp_world(options(0, 2, 29500, -1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tcp_world(options(0, 2, 29500, 1, 0)).status().code(), StatusCode::kInvalidArgument);
}

// ---- abort(): a forked child is rank 1 -----------------------------------

TEST(TcpComm, AbortEndsTheProcessAndItsPeersSeeItAtOnce) {
  const int port = free_port();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    auto w = tcp_world(options(1, 2, port, 30, 20));
    if (!w.is_ok()) std::_Exit(90);
    if (!(*w)->barrier().is_ok()) std::_Exit(91);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (*w)->abort(7, "rank 1 gives up on purpose");
  }
  ::close(pipe_fds[1]);
  auto w = tcp_world(options(0, 2, port, 30, 20));
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_OK((*w)->barrier());
  std::vector<float> v(1 << 16, 1.f);
  auto t0 = Clock::now();
  Status s = (*w)->all_reduce(v.data(), v.size(), ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "rank 1 (127.0.0.1:")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "aborted the job (exit code 7)")) << s.to_string();
  EXPECT_LT(seconds_since(t0), 3.0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  std::string err;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  ::close(pipe_fds[0]);
  EXPECT_TRUE(contains(err, "loom: rank 1 of communicator 'world' aborts the job (exit code 7): rank 1 gives up on "
                            "purpose"))
      << err;
}

// Rank 1 aborts with exit code 7; rank 0's collective fails, and its own
// abort() (what `loom execute` does with any failure) ends with rank 1's
// code, not its own: every rank of the job exits alike. Both ranks are
// forked children.
TEST(TcpComm, EveryRankExitsWithTheCodeOfTheFirstRankThatAborted) {
  const int port = free_port();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t children[2];
  for (int rank = 0; rank < 2; ++rank) {
    children[rank] = ::fork();
    ASSERT_GE(children[rank], 0);
    if (children[rank] != 0) continue;
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    auto w = tcp_world(options(rank, 2, port, 30, 20));
    if (!w.is_ok()) std::_Exit(90);
    if (!(*w)->barrier().is_ok()) std::_Exit(91);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      (*w)->abort(7, "a corrupt shard on rank 1");
    }
    std::vector<float> v(1 << 16, 1.f);
    Status s = (*w)->all_reduce(v.data(), v.size(), ReduceOp::kSum);
    if (s.is_ok()) std::_Exit(92);
    (*w)->abort(1, "rank 0 failed: " + s.message());
  }
  ::close(pipe_fds[1]);
  for (int rank = 0; rank < 2; ++rank) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[rank], &status, 0), children[rank]);
    ASSERT_TRUE(WIFEXITED(status)) << "rank " << rank;
    EXPECT_EQ(WEXITSTATUS(status), 7) << "rank " << rank;
  }
  std::string err;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  ::close(pipe_fds[0]);
  EXPECT_TRUE(contains(err, "loom: rank 0 of communicator 'world' aborts the job (exit code 7): rank 0 failed: "))
      << err;
  EXPECT_TRUE(contains(err, "aborted the job (exit code 7)")) << err;
  EXPECT_TRUE(contains(err, "(world rank 1 aborted first, with this exit code)")) << err;
}

// A peer that stops draining its connection (a frozen process, a dead link)
// while a send to it holds the connection: destroying a communicator (which
// says goodbye to that peer) must not wait for that send, which without a
// watchdog never ends. The forked child is rank 1, stopped with SIGSTOP.
TEST(TcpComm, DestroyingACommunicatorDoesNotWaitForASendToAStoppedPeer) {
  const int port = free_port();
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto w = tcp_world(options(1, 2, port, 0, 20));
    if (!w.is_ok()) std::_Exit(90);
    auto sub = (*w)->split(0, 1, "sub");
    if (!sub.is_ok() || !(*w)->barrier().is_ok()) std::_Exit(91);
    for (;;) ::pause();  // SIGSTOP, then SIGKILL from the parent
  }
  auto w = tcp_world(options(0, 2, port, 0, 20));  // no watchdog
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  auto sub = (*w)->split(0, 0, "sub");
  ASSERT_TRUE(sub.is_ok()) << sub.status().to_string();
  ASSERT_OK((*w)->barrier());
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  const size_t n = size_t(64) << 20;  // 256 MiB: far beyond the socket buffers
  std::vector<float> big(n, 1.f);
  std::thread sender([&] { (void)(*w)->send(big.data(), n, 1, 5); });  // blocks until the child dies
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    sub->reset();
    destroyed = true;
  });
  auto t0 = Clock::now();
  while (!destroyed && seconds_since(t0) < 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(destroyed) << "the sub-communicator's destructor waited for the stalled send";
  EXPECT_LT(seconds_since(t0), 5.0);
  ::kill(child, SIGKILL);  // ends the send (and the destructor, if it waited)
  int status = 0;
  ::waitpid(child, &status, 0);
  sender.join();
  destroyer.join();
}

// Counts beyond 2^31 bytes (several GiB of memory): run with LOOM_TEST_LARGE=1.
TEST(TcpComm, BeyondTwoGibibytes) {
  if (std::getenv("LOOM_TEST_LARGE") == nullptr) GTEST_SKIP() << "set LOOM_TEST_LARGE=1 (needs ~7 GiB of memory)";
  const size_t n = (size_t(1) << 29) + 3;  // floats: 2 GiB + 12 bytes
  run_ranks(2, [n](Communicator& c) {
    std::vector<float> v(n, c.rank() == 0 ? 2.f : 0.f);
    v[n - 1] = c.rank() == 0 ? 5.f : 0.f;
    if (c.rank() == 0) {
      ASSERT_OK(c.send(v.data(), n, 1, 1));
    } else {
      ASSERT_OK(c.recv(v.data(), n, 0, 1));
      EXPECT_EQ(v[0], 2.f);
      EXPECT_EQ(v[n / 2], 2.f);
      EXPECT_EQ(v[n - 1], 5.f);
      std::fill(v.begin(), v.end(), 0.f);
    }
    ASSERT_OK(c.broadcast_bytes(v.data(), n * sizeof(float), 0));
    EXPECT_EQ(v[n - 1], 5.f);
    EXPECT_EQ(v[n - 2], 2.f);
  });
}


}  // namespace
}  // namespace loom::exec
