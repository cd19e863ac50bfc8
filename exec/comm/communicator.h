// Communicator: collectives and point-to-point transfers among a group of
// ranks. One interface, one folder per backend (MPI, TCP, NCCL, a single process), chosen
// at run time; the runtime never includes a backend header.
//
// Buffers are float32 unless stated; counts are elements. Every call returns
// a Status: kRemoteError when a peer failed, kTimeout when the call did not
// complete within the communicator's timeout (the caller then ends the job
// with abort(): a dead peer ends every rank instead of hanging it). Collectives must be called by
// every member in the same order (MPI semantics).
// Thread-safety: a communicator is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom::exec {

enum class ReduceOp { kSum, kMax, kMin };

// A non-blocking operation in flight; wait() completes it.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual Status wait() = 0;
  virtual bool test() = 0;  // true when complete (then wait() returns at once)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "world", "dp", "tp", ... for messages
  // Whether send/recv match by tag (MPI); false: they match in call order per
  // peer (NCCL), so a receiver must post its receives in the sender's order.
  virtual bool matches_by_tag() const { return true; }

  virtual Status all_reduce(float* buf, size_t count, ReduceOp op = ReduceOp::kSum) = 0;
  virtual Status all_reduce(double* buf, size_t count, ReduceOp op = ReduceOp::kSum) = 0;
  // recv(recv_count) = this rank's slice of the element-wise sum of send(recv_count * size()).
  virtual Status reduce_scatter(const float* send, float* recv, size_t recv_count) = 0;
  // recv(send_count * size()) = the concatenation of every rank's send(send_count), by rank.
  // In place when send == recv + rank() * send_count.
  virtual Status all_gather(const float* send, float* recv, size_t send_count) = 0;
  virtual Status broadcast(float* buf, size_t count, int root) = 0;
  virtual Status broadcast_bytes(void* buf, size_t bytes, int root) = 0;
  // send(count_per_peer * size()) -> recv(count_per_peer * size()), block i to/from rank i.
  virtual Status all_to_all(const float* send, float* recv, size_t count_per_peer) = 0;
  virtual Status send(const float* buf, size_t count, int peer, int tag) = 0;
  virtual Status recv(float* buf, size_t count, int peer, int tag) = 0;
  virtual Status barrier() = 0;

  // Non-blocking forms; buffers must stay alive until wait() returns.
  virtual Result<std::unique_ptr<CommRequest>> iall_reduce(float* buf, size_t count, ReduceOp op) = 0;
  virtual Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* send, float* recv,
                                                               size_t recv_count) = 0;
  virtual Result<std::unique_ptr<CommRequest>> iall_gather(const float* send, float* recv, size_t send_count) = 0;
  // all_to_all's non-blocking form (the compressed gradient reduction moves
  // packed bytes through it: a float is 4 bytes carried, never computed on).
  virtual Result<std::unique_ptr<CommRequest>> iall_to_all(const float* send, float* recv,
                                                           size_t count_per_peer) = 0;
  virtual Result<std::unique_ptr<CommRequest>> isend(const float* buf, size_t count, int peer, int tag) = 0;
  virtual Result<std::unique_ptr<CommRequest>> irecv(float* buf, size_t count, int peer, int tag) = 0;
  // One ring step: `send_count` floats to `dst` and `recv_count` floats from
  // `src`, both in flight at once (context parallelism's K/V exchange; NCCL
  // groups the pair so neither waits on the other). Default: irecv + isend
  // under `tag`, one request for both.
  virtual Result<std::unique_ptr<CommRequest>> isend_recv(const float* send, size_t send_count, int dst, float* recv,
                                                          size_t recv_count, int src, int tag);
  // All-to-all with variable splits (the MoE dispatch): send_counts[p] floats
  // to rank p, the blocks back to back in `send`; recv_counts[p] floats from
  // rank p, back to back in `recv`. The counts must agree pairwise (exchange
  // them first). Default: a receive and a send per peer under kAllToAllvTag
  // (communicator.cc); MPI (MPI_Ialltoallv) and NCCL (grouped send/recv)
  // use their own.
  static constexpr int kAllToAllvTag = 7717;
  virtual Status all_to_allv(const float* send, const std::vector<size_t>& send_counts, float* recv,
                             const std::vector<size_t>& recv_counts);

  // Sub-communicator of the ranks passing the same `color`, ordered by `key`
  // (MPI_Comm_split semantics). Collective over this communicator.
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key, const std::string& name) = 0;

  // Ends the whole job with an error (MPI_Abort): used when a peer is gone.
  [[noreturn]] virtual void abort(int exit_code, const std::string& message) = 0;
};

// Where the launcher put this process: torchrun, Open MPI, PMI or Slurm
// variables, detected in that order (torchrun -> OMPI -> PMI -> Slurm ->
// single process). Never fails: a launcher whose variables are malformed is
// skipped (see `warning`). Reads the environment only.
struct LaunchEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string launcher = "none";  // "torchrun", "openmpi", "pmi", "slurm", "none"
  // Why a launcher's variables were ignored (malformed or out of range; the
  // next launcher was tried), "" when none were. Worth logging at start-up.
  std::string warning;
};
LaunchEnv detect_launch_env();

}  // namespace loom::exec
