// OpTimer: times a sequence of ops on a backend without waiting for each one
// (the per-op profiler, exec/backend/kernel_profile.h). start() and stop()
// bracket one op, in the order the backend runs its work; take() waits for
// the bracketed work and returns the seconds of every start/stop pair since
// the previous take(), in order.
//
// ComputeBackend::make_op_timer() hands one out: the host clock on the CPU
// backend (its ops are synchronous), a pool of CUDA event pairs recorded on
// the backend's stream on CUDA (exec/backend/cuda/cuda_op_timer.h), so a
// timed op costs two event records and no host synchronization; the events
// are read back when take() is called (the end of a step, the report).
// Thread-safety: used by one thread at a time, like the backend.
#pragma once

#include <memory>
#include <vector>

namespace loom::exec {

class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Seconds of each start/stop pair since the last take(); 0 for a pair the
  // device could not time (its error surfaces through the kernel table).
  virtual std::vector<double> take() = 0;
};

// The host's steady clock: right for backends whose ops return when done.
std::unique_ptr<OpTimer> make_host_op_timer();

}  // namespace loom::exec
