// The collective algorithms of the TCP communicator, on host buffers, over
// the messages of one collective call (CollectiveIo). Every rank of the group
// runs the same algorithm with the same arguments; message sizes are derived
// from the arguments on both ends, so a mismatch is detected, not misread.
//
//   all_reduce      small (<= 64 KiB or fewer elements than ranks): every
//                   rank sends its buffer to every other and reduces in rank
//                   order; large: ring reduce-scatter + ring all-gather in
//                   1 MiB chunks (2(p-1)/p of the buffer per rank on the wire).
//   reduce_scatter  ring, 1 MiB chunks; all_gather: ring, 1 MiB chunks.
//   broadcast       small: root to each rank; large: pipelined chain.
//   all_to_all      pairwise exchange; barrier: dissemination (log2 p rounds).
// Each element of a reduction is combined in one fixed order on one rank and
// then copied, so every rank ends with bit-identical values.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "exec/comm/communicator.h"
#include "exec/comm/tcp_transport.h"

namespace loom::exec::tcp {

// The members and context of a communicator.
struct Group {
  Transport* transport = nullptr;
  uint64_t ctx = 0;
  int rank = 0;                // in the group
  const std::vector<int>* members = nullptr;  // world rank of each group rank
  double timeout_s = 0;        // per message wait; 0: none
  int size() const { return int(members->size()); }
};

// The messages of one collective call: tagged with its sequence number, so
// traffic of consecutive collectives never mixes.
class CollectiveIo {
 public:
  CollectiveIo(const Group& g, int64_t seq, const std::atomic<bool>* cancel, std::atomic<int>* waiting_on)
      : g_(g), seq_(seq), cancel_(cancel), waiting_on_(waiting_on) {}
  const Group& group() const { return g_; }
  // To / from a group rank.
  Status send(int peer, const void* data, size_t bytes);
  Result<Message> recv(int peer, size_t bytes);

 private:
  const Group& g_;
  int64_t seq_;
  const std::atomic<bool>* cancel_;
  std::atomic<int>* waiting_on_;  // the world rank last waited for (or sent to), -1 before any
};

Status all_reduce(CollectiveIo& io, float* buf, size_t count, ReduceOp op);
Status all_reduce(CollectiveIo& io, double* buf, size_t count, ReduceOp op);
Status reduce_scatter(CollectiveIo& io, const float* send, float* recv, size_t recv_count);
Status all_gather_bytes(CollectiveIo& io, const void* send, void* recv, size_t block_bytes);
Status broadcast_bytes(CollectiveIo& io, void* buf, size_t bytes, int root);
Status all_to_all_bytes(CollectiveIo& io, const void* send, void* recv, size_t block_bytes);
Status barrier(CollectiveIo& io);

}  // namespace loom::exec::tcp
