// The TCP communicator with its ranks as threads of this process, on
// loopback: every method against values computed locally, splits, tag
// matching, non-blocking progress, the watchdog and peers failing mid-job.
// Values are small integers, so float sums are exact and compared with ==.
// Start-up errors and abort(): tcp_rendezvous_test.cc.
#include "tests/unit/exec/tcp_test_support.h"

namespace loom::exec {
namespace {

using namespace tcp_test;

void check_all_reduce(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  std::vector<float> sum(n), mx(n), mn(n);
  std::vector<double> dsum(n), dmax(n);
  auto perm = [](int r, size_t i) { return float((i + 5 * size_t(r)) % 11); };
  for (size_t i = 0; i < n; ++i) {
    sum[i] = val(me, i);
    mx[i] = mn[i] = perm(me, i);
    dsum[i] = 0.5 * me + double(i);
    dmax[i] = double(perm(me, i)) + 0.25;
  }
  ASSERT_OK(c.all_reduce(sum.data(), n, ReduceOp::kSum));
  ASSERT_OK(c.all_reduce(mx.data(), n, ReduceOp::kMax));
  ASSERT_OK(c.all_reduce(mn.data(), n, ReduceOp::kMin));
  ASSERT_OK(c.all_reduce(dsum.data(), n, ReduceOp::kSum));
  ASSERT_OK(c.all_reduce(dmax.data(), n, ReduceOp::kMax));
  auto over = [&](auto f, auto combine, float init) {
    return [=](size_t i) {
      float acc = init;
      for (int r = 0; r < p; ++r) acc = combine(acc, f(r, i));
      return acc;
    };
  };
  expect_all(sum, over(val, [](float a, float b) { return a + b; }, 0.f), "sum");
  expect_all(mx, over(perm, [](float a, float b) { return std::max(a, b); }, -1.f), "max");
  expect_all(mn, over(perm, [](float a, float b) { return std::min(a, b); }, 99.f), "min");
  expect_all(dsum, [&](size_t i) { return 0.25 * p * (p - 1) + double(p) * double(i); }, "double sum");
  expect_all(
      dmax,
      [&](size_t i) {
        return double(over(
                   perm, [](float a, float b) { return std::max(a, b); }, -1.f)(i)) +
               0.25;
      },
      "double max");
}

void check_reduce_scatter(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  std::vector<float> send(n * size_t(p)), recv(n, -1.f);
  for (size_t j = 0; j < send.size(); ++j) send[j] = val(me, j);
  ASSERT_OK(c.reduce_scatter(send.data(), recv.data(), n));
  expect_all(recv,
             [&](size_t k) {
               float s = 0;
               for (int r = 0; r < p; ++r) s += val(r, size_t(me) * n + k);
               return s;
             },
             "reduce_scatter slice");
  // In place: the slice lands on this rank's own block of the input.
  std::vector<float> inplace = send;
  ASSERT_OK(c.reduce_scatter(inplace.data(), inplace.data() + size_t(me) * n, n));
  std::vector<float> mine(inplace.begin() + long(size_t(me) * n), inplace.begin() + long(size_t(me + 1) * n));
  EXPECT_EQ(mine, recv) << "reduce_scatter into its own input block";
}

void check_all_gather(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  std::vector<float> send(n), recv(n * size_t(p), -1.f);
  for (size_t k = 0; k < n; ++k) send[k] = val(me, k);
  ASSERT_OK(c.all_gather(send.data(), recv.data(), n));
  expect_all(recv, [&](size_t j) { return val(int(j / n), j % n); }, "all_gather");
  // In place: this rank's block already sits in the output.
  std::vector<float> inplace(n * size_t(p), -1.f);
  std::copy(send.begin(), send.end(), inplace.begin() + long(size_t(me) * n));
  ASSERT_OK(c.all_gather(inplace.data() + size_t(me) * n, inplace.data(), n));
  EXPECT_EQ(inplace, recv) << "all_gather in place";
}

void check_broadcast(Communicator& c, size_t n) {
  const int root = c.size() - 1;  // not rank 0
  std::vector<float> buf(n, -1.f);
  if (c.rank() == root)
    for (size_t i = 0; i < n; ++i) buf[i] = val(root, i);
  ASSERT_OK(c.broadcast(buf.data(), n, root));
  expect_all(buf, [&](size_t i) { return val(root, i); }, "broadcast");

  std::vector<unsigned char> bytes(n + 3, 0);
  if (c.rank() == 0)
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (unsigned char)(i * 7 + 1);
  ASSERT_OK(c.broadcast_bytes(bytes.data(), bytes.size(), 0));
  expect_all(bytes, [](size_t i) { return (unsigned char)(i * 7 + 1); }, "broadcast_bytes");
}

void check_all_to_all(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank();
  auto code = [](int from, int to, size_t k) { return float(from * 1000 + to * 100 + int(k % 50)); };
  std::vector<float> send(n * size_t(p)), recv(n * size_t(p), -1.f);
  for (int to = 0; to < p; ++to)
    for (size_t k = 0; k < n; ++k) send[size_t(to) * n + k] = code(me, to, k);
  ASSERT_OK(c.all_to_all(send.data(), recv.data(), n));
  expect_all(recv, [&](size_t j) { return code(int(j / n), me, j % n); }, "all_to_all");
}

void check_ring(Communicator& c, size_t n) {
  const int p = c.size(), me = c.rank(), next = (me + 1) % p, prev = (me + p - 1) % p;
  std::vector<float> out(n), in(n, -1.f);
  for (size_t i = 0; i < n; ++i) out[i] = val(me, i);
  // Every rank sends first: sends are eager, so this cannot deadlock.
  ASSERT_OK(c.send(out.data(), n, next, 7));
  ASSERT_OK(c.recv(in.data(), n, prev, 7));
  expect_all(in, [&](size_t i) { return val(prev, i); }, "blocking ring");
  std::vector<float> in2(n, -1.f);
  auto r = c.irecv(in2.data(), n, next, 8);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto s = c.isend(out.data(), n, prev, 8);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_OK((*s)->wait());
  ASSERT_OK((*r)->wait());
  expect_all(in2, [&](size_t i) { return val(next, i); }, "non-blocking reverse ring");
}

void check_everything(Communicator& c, size_t n) {
  SCOPED_TRACE("communicator '" + c.name() + "' rank " + std::to_string(c.rank()) + " of " +
               std::to_string(c.size()) + ", n=" + std::to_string(n));
  check_all_reduce(c, n);
  check_reduce_scatter(c, n);
  check_all_gather(c, n);
  check_broadcast(c, n);
  check_all_to_all(c, n);
  if (c.size() > 1) check_ring(c, n);
  ASSERT_OK(c.barrier());
}

TEST(TcpComm, WorldOfOneNeedsNoNetwork) {
  // Port 1 is privileged and unused: a world of one must not touch it.
  auto w = tcp_world(options(0, 1, 1));
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ((*w)->name(), "world");
  EXPECT_TRUE((*w)->matches_by_tag());
  check_everything(**w, 5);
  auto sub = (*w)->split(3, 0, "sub");
  ASSERT_TRUE(sub.is_ok());
  EXPECT_EQ((*sub)->size(), 1);
}

TEST(TcpComm, CollectivesAndRingsOnThreeRanks) {
  // 3 ranks: segments of unequal length; 65537 and 300001 floats take the
  // ring path in several 1 MiB chunks.
  run_ranks(3, [](Communicator& c) {
    for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(1000), size_t(65537), size_t(300001)}) {
      check_everything(c, n);
    }
    check_everything(c, 0);
  });
}

TEST(TcpComm, CollectivesOnTwoAndFourRanks) {
  for (int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    run_ranks(world, [](Communicator& c) {
      for (size_t n : {size_t(1), size_t(13), size_t(40000)}) check_everything(c, n);
    });
  }
}

TEST(TcpComm, SixteenMillionFloats) {
  const size_t n = size_t(16) << 20;  // 64 MiB: the chunked ring, and a chained broadcast
  run_ranks(3, [n](Communicator& c) {
    const int p = c.size(), me = c.rank();
    std::vector<float> buf(n);
    for (size_t i = 0; i < n; ++i) buf[i] = float(i % 1024 + size_t(me));
    auto t0 = Clock::now();
    ASSERT_OK(c.all_reduce(buf.data(), n, ReduceOp::kSum));
    double s = seconds_since(t0);
    if (me == 0)
      std::printf("16M-float all_reduce on 3 ranks: %.3f s (%.2f GB/s algorithm bandwidth)\n", s, 64e-3 * 1.048576 / s);
    expect_all(buf, [&](size_t i) { return float(p * (i % 1024) + p * (p - 1) / 2); }, "16M all_reduce");
    std::vector<float> b(n, me == 1 ? 3.f : 0.f);
    ASSERT_OK(c.broadcast(b.data(), n, 1));
    expect_all(b, [](size_t) { return 3.f; }, "16M broadcast");
    std::vector<float> slice(n / size_t(p));
    ASSERT_OK(c.reduce_scatter(buf.data(), slice.data(), n / size_t(p)));
    expect_all(slice, [&](size_t k) { return float(p) * buf[size_t(me) * (n / size_t(p)) + k]; }, "16M reduce_scatter");
  });
}

TEST(TcpComm, SplitIntoTwoColorsAndNested) {
  run_ranks(4, [](Communicator& w) {
    const int me = w.rank();
    auto tp = w.split(me / 2, me, "tp");  // {0,1} {2,3}
    auto dp = w.split(me % 2, me, "dp");  // {0,2} {1,3}
    ASSERT_TRUE(tp.is_ok()) << tp.status().to_string();
    ASSERT_TRUE(dp.is_ok()) << dp.status().to_string();
    Communicator& t = **tp;
    Communicator& d = **dp;
    EXPECT_EQ(t.name(), "tp");
    EXPECT_EQ(t.size(), 2);
    EXPECT_EQ(t.rank(), me % 2);
    EXPECT_EQ(d.size(), 2);
    EXPECT_EQ(d.rank(), me / 2);
    float mine = float(me);
    std::vector<float> t_members(2), d_members(2);
    ASSERT_OK(t.all_gather(&mine, t_members.data(), 1));
    ASSERT_OK(d.all_gather(&mine, d_members.data(), 1));
    EXPECT_EQ(t_members, (std::vector<float>{float(me / 2 * 2), float(me / 2 * 2 + 1)}));
    EXPECT_EQ(d_members, (std::vector<float>{float(me % 2), float(me % 2 + 2)}));
    // Traffic on the three communicators interleaves without mixing:
    // a pending collective on dp while tp and the world run theirs.
    std::vector<float> dv(100000, float(me));
    auto pending = d.iall_reduce(dv.data(), dv.size(), ReduceOp::kSum);
    ASSERT_TRUE(pending.is_ok());
    check_everything(t, 777);
    check_everything(w, 5);
    ASSERT_OK((*pending)->wait());
    expect_all(dv, [&](size_t) { return float(2 * (me % 2) + 2); }, "dp iall_reduce");
    check_everything(d, 777);
    // Nested: tp split again, reversed by key; and into singletons.
    auto rev = t.split(0, -t.rank(), "tp-reversed");
    ASSERT_TRUE(rev.is_ok()) << rev.status().to_string();
    EXPECT_EQ((*rev)->rank(), 1 - t.rank());
    float x = float(me);
    ASSERT_OK((*rev)->broadcast(&x, 1, 0));  // root 0 of the reversed group is tp rank 1
    EXPECT_EQ(x, float(me / 2 * 2 + 1));
    check_everything(**rev, 31);
    auto single = t.split(t.rank(), 0, "single");
    ASSERT_TRUE(single.is_ok());
    EXPECT_EQ((*single)->size(), 1);
    check_everything(**single, 9);
    // Two splits with the same color are distinct communicators.
    auto again = w.split(me / 2, me, "tp-again");
    ASSERT_TRUE(again.is_ok());
    float a = 1, b = 10;
    ASSERT_OK((*again)->all_reduce(&a, 1, ReduceOp::kSum));
    ASSERT_OK(t.all_reduce(&b, 1, ReduceOp::kSum));
    EXPECT_EQ(a, 2);
    EXPECT_EQ(b, 20);
  });
}

TEST(TcpComm, SplitRejectsANegativeColorOnEveryRank) {
  run_ranks(3, [](Communicator& w) {
    auto bad = w.split(w.rank() == 1 ? -1 : 0, 0, "bad");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(bad.status().message(), "rank 1 passed color -1")) << bad.status().to_string();
    ASSERT_OK(w.barrier());  // still usable
  });
}

TEST(TcpComm, TagsMatchOutOfOrderAndSameTagsInOrder) {
  run_ranks(2, [](Communicator& c) {
    if (c.rank() == 0) {
      for (int tag : {1, 2, 3}) {
        std::vector<float> v(size_t(tag) * 1000, float(tag));
        ASSERT_OK(c.send(v.data(), v.size(), 1, tag));
      }
      float first = 100, second = 200;
      ASSERT_OK(c.send(&first, 1, 1, 9));
      ASSERT_OK(c.send(&second, 1, 1, 9));
      float big_tag = 5;
      ASSERT_OK(c.send(&big_tag, 1, 1, (1 << 26) + (3 << 20) + 7));  // the trainer's tag layout
    } else {
      for (int tag : {3, 1, 2}) {
        std::vector<float> v(size_t(tag) * 1000, -1.f);
        ASSERT_OK(c.recv(v.data(), v.size(), 0, tag));
        expect_all(v, [&](size_t) { return float(tag); }, "tag " + std::to_string(tag));
      }
      // Receives with the same tag match in posting order, whatever the wait order.
      float a = 0, b = 0, z = 0;
      auto ra = c.irecv(&a, 1, 0, 9);
      auto rb = c.irecv(&b, 1, 0, 9);
      ASSERT_TRUE(ra.is_ok() && rb.is_ok());
      ASSERT_OK((*rb)->wait());
      ASSERT_OK((*ra)->wait());
      EXPECT_EQ(a, 100);
      EXPECT_EQ(b, 200);
      ASSERT_OK(c.recv(&z, 1, 0, (1 << 26) + (3 << 20) + 7));
      EXPECT_EQ(z, 5);
    }
    ASSERT_OK(c.barrier());
  });
}

TEST(TcpComm, P2pErrorsAreTheCallersAndLeaveTheCommunicatorUsable) {
  run_ranks(2, [](Communicator& c) {
    float buf[10] = {};
    EXPECT_EQ(c.send(buf, 1, 2, 0).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.recv(buf, 1, 0, -5).code(), StatusCode::kInvalidArgument);
    Status bad_root = c.broadcast(buf, 1, -1);
    EXPECT_EQ(bad_root.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(bad_root.message(), "root=-1 is not a rank")) << bad_root.to_string();
    if (c.rank() == 1) {
      ASSERT_OK(c.send(buf, 10, 0, 11));
    } else {
      Status s = c.recv(buf, 5, 1, 11);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_TRUE(contains(s.message(), "received 10 floats from rank 1 (tag 11) but expected 5")) << s.to_string();
    }
    ASSERT_OK(c.barrier());
  });
}

TEST(TcpComm, SendToSelf) {
  run_ranks(2, [](Communicator& c) {
    float out = float(c.rank() + 1), in = 0;
    auto r = c.irecv(&in, 1, c.rank(), 3);
    ASSERT_TRUE(r.is_ok());
    ASSERT_OK(c.send(&out, 1, c.rank(), 3));
    ASSERT_OK((*r)->wait());
    EXPECT_EQ(in, out);
  });
}

// The trainer's pattern: a gradient all-reduce in flight on dp while the
// caller blocks in pipeline transfers on another communicator. Rank 1 waits
// for the all-reduce before it sends, while rank 0 sits in recv: only
// progress in the background completes it.
TEST(TcpComm, NonBlockingCollectivesProgressWhileTheCallerBlocks) {
  run_ranks(2, [](Communicator& w) {
    const int me = w.rank();
    auto pp = w.split(0, me, "pp");
    ASSERT_TRUE(pp.is_ok());
    const size_t n = size_t(4) << 20;
    std::vector<float> grads(n, float(me + 1)), act(n, float(10 + me)), got(n, -1.f);
    auto ar = w.iall_reduce(grads.data(), n, ReduceOp::kSum);
    ASSERT_TRUE(ar.is_ok());
    if (me == 0) {
      ASSERT_OK((*pp)->recv(got.data(), n, 1, 5));
    } else {
      ASSERT_OK((*ar)->wait());
      ASSERT_OK((*pp)->send(act.data(), n, 0, 5));
    }
    ASSERT_OK((*ar)->wait());
    expect_all(grads, [](size_t) { return 3.f; }, "iall_reduce");
    // Both send large activations first, then receive (eager sends), while
    // two more collectives are pending.
    std::vector<float> g2(n, 1.f), shard(n / 2), gathered(n);
    auto a2 = w.iall_reduce(g2.data(), n, ReduceOp::kMax);
    auto rs = w.ireduce_scatter(g2.data(), shard.data(), n / 2);  // queued behind a2: sees its result
    ASSERT_TRUE(a2.is_ok() && rs.is_ok());
    ASSERT_OK((*pp)->send(act.data(), n, 1 - me, 6));
    ASSERT_OK((*pp)->recv(got.data(), n, 1 - me, 6));
    expect_all(got, [&](size_t) { return float(10 + (1 - me)); }, "cross p2p");
    auto ag = w.iall_gather(shard.data(), gathered.data(), n / 2);
    ASSERT_TRUE(ag.is_ok());
    while (!(*ag)->test()) std::this_thread::yield();
    ASSERT_OK((*rs)->wait());
    ASSERT_OK((*a2)->wait());
    ASSERT_OK((*ag)->wait());
    expect_all(gathered, [](size_t) { return 2.f; }, "ireduce_scatter + iall_gather");
  });
}

TEST(TcpComm, TimedOutRecvLeavesTheCommunicatorUsable) {
  run_ranks(
      2,
      [](Communicator& c) {
        const int me = c.rank();
        float x = -1;
        if (me == 0) {
          auto t0 = Clock::now();
          Status s = c.recv(&x, 1, 1, 4242);
          double waited = seconds_since(t0);
          EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
          for (const char* part : {"recv on communicator 'world' (rank 0 of 2)", "within 0.3 s",
                                   "waiting for rank 1 (127.0.0.1:", "loom execute --timeout"}) {
            EXPECT_TRUE(contains(s.message(), part)) << "'" << part << "' not in: " << s.message();
          }
          EXPECT_GE(waited, 0.29);
          EXPECT_LT(waited, 5.0);
        }
        ASSERT_OK(c.barrier());
        if (me == 1) {
          float v = 42;
          ASSERT_OK(c.send(&v, 1, 0, 4242));
        } else {
          ASSERT_OK(c.recv(&x, 1, 1, 4242));
          EXPECT_EQ(x, 42);
        }
        ASSERT_OK(c.barrier());
      },
      [](int r, int port) { return options(r, 2, port, r == 0 ? 0.3 : 30); });
}

TEST(TcpComm, TimedOutCollectiveNamesThePeerAndBreaksTheCommunicator) {
  std::atomic<bool> rank0_done{false}, rank1_done{false};
  run_ranks(
      2,
      [&](Communicator& c) {
        float x = 1;
        if (c.rank() == 0) {
          // Rank 1 (the root) never broadcasts.
          Status s = c.broadcast(&x, 1, 1);
          EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
          for (const char* part : {"broadcast on communicator 'world' (rank 0 of 2)", "within 0.5 s",
                                   "waiting for rank 1 (127.0.0.1:"}) {
            EXPECT_TRUE(contains(s.message(), part)) << "'" << part << "' not in: " << s.message();
          }
          Status later = c.barrier();
          EXPECT_EQ(later.code(), StatusCode::kTimeout) << later.to_string();
          EXPECT_TRUE(contains(later.message(), "unusable after broadcast timed out")) << later.to_string();
          rank0_done = true;
          while (!rank1_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // stay alive
        } else {
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          // Rank 0 gave up on the world: this rank hears it instead of hanging.
          auto t0 = Clock::now();
          Status s = c.barrier();
          EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.to_string();
          EXPECT_TRUE(contains(s.message(), "rank 0 (127.0.0.1:")) << s.to_string();
          EXPECT_TRUE(contains(s.message(), "abandoned this communicator")) << s.to_string();
          EXPECT_LT(seconds_since(t0), 5.0);
          rank1_done = true;
        }
      },
      [](int r, int port) { return options(r, 2, port, r == 0 ? 0.5 : 30); });
}

// Receives posted before the communicator broke end with the reason at once:
// its later traffic is dropped, so they could never complete (they used to
// wait out their own timeout, or for ever without one).
TEST(TcpComm, PendingReceivesEndWhenTheCommunicatorBreaks) {
  std::atomic<bool> rank0_done{false};
  run_ranks(
      2,
      [&](Communicator& c) {
        if (c.rank() == 1) {  // alive, but never joins the broadcast
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        float a = 0, b = 0, x = 1;
        auto ra = c.irecv(&a, 1, 1, 3);
        auto rb = c.irecv(&b, 1, 1, 4);
        ASSERT_TRUE(ra.is_ok() && rb.is_ok());
        Status s = c.broadcast(&x, 1, 1);  // times out after 2 s and breaks the communicator
        EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
        auto t0 = Clock::now();
        EXPECT_TRUE((*rb)->test());
        Status sa = (*ra)->wait();
        EXPECT_LT(seconds_since(t0), 1.0);
        EXPECT_EQ(sa.code(), StatusCode::kTimeout) << sa.to_string();
        for (const Status& st : {sa, (*rb)->wait()}) {
          EXPECT_TRUE(contains(st.message(), "irecv on communicator 'world' (rank 0 of 2)")) << st.to_string();
          EXPECT_TRUE(contains(st.message(), "unusable after broadcast timed out")) << st.to_string();
        }
        rank0_done = true;
      },
      [](int r, int port) { return options(r, 2, port, r == 0 ? 2.0 : 30); });
}

TEST(TcpComm, TimeoutOfAQueuedRequestCancelsTheOneAheadOfIt) {
  std::atomic<bool> rank0_done{false};
  run_ranks(
      2,
      [&](Communicator& c) {
        if (c.rank() == 1) {  // never joins the collectives
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        std::vector<float> x(1000, 1.f), y(1000, 1.f);
        auto a = c.iall_reduce(x.data(), x.size(), ReduceOp::kSum);
        auto b = c.iall_reduce(y.data(), y.size(), ReduceOp::kSum);
        ASSERT_TRUE(a.is_ok() && b.is_ok());
        auto t0 = Clock::now();
        Status sb = (*b)->wait();  // queued behind a, which hangs
        EXPECT_EQ(sb.code(), StatusCode::kTimeout) << sb.to_string();
        EXPECT_TRUE(contains(sb.message(), "iall_reduce on communicator 'world' (rank 0 of 2)")) << sb.to_string();
        EXPECT_TRUE(contains(sb.message(), "waiting for rank 1 (127.0.0.1:")) << sb.to_string();
        Status sa = (*a)->wait();  // cancelled with it: returns at once
        EXPECT_EQ(sa.code(), StatusCode::kTimeout) << sa.to_string();
        EXPECT_LT(seconds_since(t0), 1.5);  // one timeout (0.5 s), not two
        rank0_done = true;
      },
      [](int r, int port) { return options(r, 2, port, r == 0 ? 0.5 : 30); });
}

TEST(TcpComm, MismatchedCountsAreNamed) {
  run_ranks(2, [](Communicator& c) {
    std::vector<float> v(c.rank() == 0 ? 10 : 20, 1.f);
    Status s = c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "same collectives in the same order with the same counts")) << s.to_string();
  });
}

TEST(TcpComm, PeerDestroyedMidCallFailsPendingAndLaterCallsAtOnce) {
  run_ranks(2, [](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return;  // run_ranks destroys this rank's world now
    }
    std::vector<float> v(1000, 1.f);
    auto t0 = Clock::now();
    Status s = c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
    EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "all_reduce on communicator 'world' (rank 0 of 2)")) << s.to_string();
    // Rank 1's world says goodbye on the way out ("destroyed"), then its
    // connection closes ("closed its connection"): either may come first.
    auto names_the_exit = [](const Status& st) {
      return contains(st.message(), "rank 1 (127.0.0.1:") &&
             (contains(st.message(), "closed its connection: it died or exited") ||
              contains(st.message(), "destroyed this communicator"));
    };
    EXPECT_TRUE(names_the_exit(s)) << s.to_string();
    EXPECT_LT(seconds_since(t0), 3.0);  // the timeout is 30 s
    Status later = c.barrier();
    EXPECT_EQ(later.code(), StatusCode::kRemoteError) << later.to_string();
    float x = 0;
    Status r = c.recv(&x, 1, 1, 0);
    EXPECT_EQ(r.code(), StatusCode::kRemoteError) << r.to_string();
    EXPECT_TRUE(names_the_exit(r)) << r.to_string();
    Status w = c.send(&x, 1, 1, 0);
    EXPECT_EQ(w.code(), StatusCode::kRemoteError) << w.to_string();
    EXPECT_TRUE(names_the_exit(w)) << w.to_string();
    EXPECT_LT(seconds_since(t0), 3.0);
  });
}

TEST(TcpComm, DestroyedSubCommunicatorFailsItsPeersOnly) {
  run_ranks(2, [](Communicator& w) {
    auto sub = w.split(0, w.rank(), "dp");
    ASSERT_TRUE(sub.is_ok());
    if (w.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      sub->reset();
    } else {
      std::vector<float> v(10, 1.f);
      auto t0 = Clock::now();
      Status s = (*sub)->all_reduce(v.data(), v.size(), ReduceOp::kSum);
      EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.to_string();
      EXPECT_TRUE(contains(s.message(), "all_reduce on communicator 'dp'")) << s.to_string();
      EXPECT_TRUE(contains(s.message(), "rank 1 (127.0.0.1:")) << s.to_string();
      EXPECT_TRUE(contains(s.message(), "destroyed this communicator")) << s.to_string();
      EXPECT_LT(seconds_since(t0), 3.0);
    }
    ASSERT_OK(w.barrier());  // the world is unaffected
  });
}


}  // namespace
}  // namespace loom::exec
