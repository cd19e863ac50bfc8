// The NCCL backend of Communicator, for the CUDA backend: buffers are DEVICE
// pointers. Every call is enqueued on the communicator's own stream (after
// the work already queued on the compute stream, see NcclOptions); blocking
// calls wait for it, the i* forms return a request whose wait() does. A call
// that has not completed after `timeout_s` aborts the NCCL communicator
// (ncclCommAbort) and returns kTimeout, so a dead peer ends the job instead
// of hanging it; asynchronous NCCL errors (a peer's failure) come back as
// kRemoteError. NCCL has no message tags: send/recv pairs match in call
// order per peer, which is how the runtime uses them.
//
// Only this header's .cc includes <nccl.h>.
#pragma once

#include <memory>

#include "exec/comm/communicator.h"

namespace loom::exec {

struct NcclOptions {
  double timeout_s = 300;  // 0 disables the watchdog
  int device = -1;         // CUDA device of this rank; -1: local rank % devices
  // The stream the buffers are produced on (the CUDA backend's, a
  // cudaStream_t): every call first waits for the work queued there, so a
  // collective never reads a buffer a kernel is still writing. Null: the
  // caller synchronizes.
  void* compute_stream = nullptr;
};

// A communicator over every rank of `bootstrap` (e.g. the MPI world): rank 0
// creates the NCCL unique id and broadcasts it through `bootstrap`, each rank
// binds its device and joins. Collective over `bootstrap`. `bootstrap` is
// kept for abort() and must outlive the result.
// The loaded NCCL library's version ("2.27.3").
std::string nccl_version();

Result<std::unique_ptr<Communicator>> nccl_world(Communicator* bootstrap, int local_rank,
                                                 const NcclOptions& options = {});

}  // namespace loom::exec
