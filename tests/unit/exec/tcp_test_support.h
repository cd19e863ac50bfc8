// Helpers of the TCP communicator tests (tcp_communicator_test.cc,
// tcp_rendezvous_test.cc): ranks as threads of this process on loopback.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "exec/comm/tcp_communicator.h"

namespace loom::exec::tcp_test {

using Clock = std::chrono::steady_clock;

#define ASSERT_OK(expr)                                         \
  do {                                                          \
    ::loom::Status s_ = (expr);                                 \
    ASSERT_TRUE(s_.is_ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A port nothing listens on right now (the kernel's choice, released).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

inline TcpOptions options(int rank, int world, int port, double timeout_s = 30, double rendezvous_s = 20) {
  TcpOptions o;
  o.rank = rank;
  o.world = world;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout_s = timeout_s;
  o.rendezvous_timeout_s = rendezvous_s;
  return o;
}

// Runs fn(comm) for every rank of a `world`-rank job, one thread per rank.
inline void run_ranks(int world, const std::function<void(Communicator&)>& fn,
               const std::function<TcpOptions(int rank, int port)>& make = nullptr) {
  const int port = free_port();
  ASSERT_NE(port, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto w = tcp_world(make ? make(r, port) : options(r, world, port));
      ASSERT_TRUE(w.is_ok()) << "rank " << r << ": " << w.status().to_string();
      EXPECT_EQ((*w)->rank(), r);
      EXPECT_EQ((*w)->size(), world);
      fn(**w);
    });
  }
  for (auto& t : threads) t.join();
}

inline float val(int rank, size_t i) { return float(rank * 3 + int(i % 97)); }

// Compares got[i] with want(i); reports the first mismatch only.
template <typename T, typename Want>
inline void expect_all(const std::vector<T>& got, Want want, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      ADD_FAILURE() << what << ": element " << i << " of " << got.size() << " is " << +got[i] << ", want "
                    << +want(i);
      return;
    }
  }
}

}  // namespace loom::exec::tcp_test
