// The TCP mesh under every TCP communicator of a job (tcp_communicator.h):
// one connection per pair of ranks, shared by the world communicator and all
// communicators split from it.
//
// Framing: a message is sent as frames of at most 4 MiB, each a 40-byte
// header (magic, kind, first/last flags, context, tag, message bytes, frame
// bytes) and its payload, written whole under the connection's write lock, so
// messages of different senders (threads) interleave only at frame
// boundaries. A reader thread per peer drains its connection at all times and
// reassembles messages into a mailbox keyed by (context, source, kind, tag):
// sends are eager and never wait for the receiver to post (no deadlock on
// full socket buffers), and receives match in post order per key, messages
// in arrival order (MPI's non-overtaking rule).
// A peer whose connection ends (EOF, reset, a malformed frame) is marked
// down: receives from it fail at once with kRemoteError naming it, as do
// later sends to it. A peer that stops using a communicator (destroyed it, or
// abandoned it after an error) says so with a close frame, which fails
// receives from it on that context only. A peer that aborts the job says so
// with an abort frame carrying its exit code before it goes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "exec/comm/tcp_socket.h"
#include "exec/comm/tcp_store.h"

namespace loom::exec::tcp {

enum class Kind : uint8_t { kCollective = 1, kP2p = 2, kClose = 3, kAbort = 4 };

struct Message {
  std::unique_ptr<char[]> data;
  size_t bytes = 0;
};

// A posted receive. Filled (under the transport's lock) by the reader thread,
// or at post time when its message had already arrived.
struct Ticket {
  uint64_t ctx = 0;
  int src = 0;
  Kind kind = Kind::kP2p;
  int64_t tag = 0;
  bool filled = false;
  bool withdrawn = false;
  Message msg;
};

class Transport {
 public:
  // Builds the mesh from a completed rendezvous: rank r connects to every
  // lower rank and accepts every higher one; both ends check a handshake
  // (job nonce, world size, ranks), so a stray connection is turned away.
  // Every pair must be connected within timeout_s.
  static Result<std::shared_ptr<Transport>> connect(Rendezvous rv, int rank, double timeout_s);
  // A transport of a single rank (no connections).
  static std::shared_ptr<Transport> single();
  // Half-closes every connection, lets the peers' last bytes arrive (up to
  // 1 s), then closes them and joins the readers.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int size() const { return int(addresses_.size()); }
  // "rank 3 (10.0.0.7:41234)".
  std::string describe(int r) const;

  // Sends `bytes` bytes to world rank `dst` (itself included). kRemoteError
  // when dst is down; kTimeout when dst does not drain its connection before
  // `deadline` or *cancel is set ("cancelled").
  Status send(int dst, uint64_t ctx, Kind kind, int64_t tag, const void* data, size_t bytes, Deadline deadline,
              const std::atomic<bool>* cancel = nullptr);
  // Posts a receive of the next message from world rank `src` with this key.
  std::shared_ptr<Ticket> post(uint64_t ctx, int src, Kind kind, int64_t tag);
  // Waits until the ticket holds its message. On failure the ticket is
  // withdrawn: kRemoteError when src is down or closed ctx, kTimeout at
  // `deadline`, or kTimeout "cancelled" when *cancel is set (see wake()).
  Status wait(Ticket& t, Deadline deadline, const std::atomic<bool>* cancel = nullptr);
  // Non-blocking: true when the ticket is filled, or *error when it can never be.
  bool poll(Ticket& t, Status* error);
  // Withdraws an unfilled ticket (a receive no longer wanted).
  void withdraw(Ticket& t);
  // Wakes every wait (after a cancel flag was set).
  void wake();

  // This rank stops using `ctx`: tells the other `members` (world ranks) so
  // their receives on it fail instead of hanging, and drops later traffic.
  // `abandoned`: after an error (else: destroyed).
  void close_context(uint64_t ctx, const std::vector<int>& members, bool abandoned);
  // For abort(): tells every peer the job ends with `exit_code` (best effort,
  // a moment per peer), then shuts every connection down at once (peers see
  // EOF). A peer told so fails its receives from this rank naming the code.
  void abort_peers(int exit_code);
  void shutdown_now();
  // The first peer that aborted the job (its world rank and exit code), if
  // one did: abort() on this rank then ends with the same code, so every
  // rank of a job exits alike.
  struct PeerAbort {
    int rank = -1;
    int exit_code = 0;
  };
  std::optional<PeerAbort> peer_abort() const;

 private:
  struct Peer;
  struct Key {
    uint64_t ctx;
    int32_t src;
    uint8_t kind;
    int64_t tag;
    auto operator<=>(const Key&) const = default;
  };
  // Messages that arrived before their receive, or receives waiting for
  // their message (never both).
  struct Slot {
    std::deque<Message> messages;
    std::deque<std::shared_ptr<Ticket>> waiting;
  };

  Transport(int rank, std::vector<PeerAddress> addresses);
  void start_readers();
  void reader(int r);
  void deliver(const Key& key, Message m);
  void mark_down(int r, Status why);
  Status failure_locked(const Ticket& t) const;
  void withdraw_locked(Ticket& t);

  int rank_;
  std::vector<PeerAddress> addresses_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by world rank; null for this rank

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::map<Key, Slot> slots_;
  std::vector<Status> down_;                     // by world rank: not ok once the connection is gone
  std::map<std::pair<uint64_t, int>, bool> closed_by_peer_;  // (ctx, rank) -> abandoned
  std::set<uint64_t> closed_here_;                // contexts this rank closed
  std::optional<PeerAbort> peer_abort_;
  int readers_running_ = 0;
  bool closing_ = false;
};

}  // namespace loom::exec::tcp
