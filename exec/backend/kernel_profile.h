// Per-op profiling through the kernel table: KernelProfiler forwards every
// call to the backend's table (bit-identical results) and accumulates, per op
// type, the calls, the time (an OpTimer pair around each call: CUDA events on
// the backend's stream, so no host synchronization per op; the host clock on
// the CPU), and the FLOPs and bytes computed from each call's arguments
// (exec/backend/kernel_call.h). Timings are read back at step_done() (the end
// of a step), at report(), or when 32768 calls are pending.
//
// On a device the time of an op is from its start event to its stop event on
// the stream: the op's kernels, plus any gap while the stream waited for the
// host to launch them (a host-bound run shows up as slow small ops).
//
// `loom execute --profile-ops` installs one on every rank and prints rank
// 0's table after the run (measured steps only: the warm-up steps are reset).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/observed_kernels.h"
#include "exec/backend/op_timer.h"

namespace loom::exec {

struct OpProfileRow {
  std::string op;        // kernel_op_name()
  int64_t calls = 0;     // over the profiled steps
  double seconds = 0;    // measured time over the profiled steps
  double ms_per_step = 0;
  double share = 0;      // of all measured op time, 0..1
  double flops = 0;      // totals over the profiled steps
  double bytes = 0;
  double tflops = 0;     // achieved flops / seconds / 1e12 (0: an op rated by bytes)
  double gbps = 0;       // achieved bytes / seconds / 1e9
};

class KernelProfiler final : public ObservedKernels {
 public:
  KernelProfiler(Kernels& inner, std::unique_ptr<OpTimer> timer);

  // A step ended: reads its timings back, counts the step.
  void step_done();
  // Forgets everything measured so far (after warm-up steps).
  void reset();
  int64_t steps() const { return steps_; }
  // Ops with calls, the most time first. Per step: over steps() (1 if none).
  std::vector<OpProfileRow> report();

 protected:
  void before(const KernelCall& call) override;
  void after(const KernelCall& call) override;

 private:
  struct Totals {
    int64_t calls = 0;
    double seconds = 0, flops = 0, bytes = 0;
  };
  void resolve();

  std::unique_ptr<OpTimer> timer_;
  std::array<Totals, kNumKernelOps> totals_{};
  std::vector<KernelOp> pending_;  // timed calls not yet read back, in order
  int64_t steps_ = 0;
};

// Puts a KernelProfiler in front of `backend`'s table (ComputeBackend::
// wrap_kernels), timed by backend.make_op_timer(). The backend owns it; the
// pointer is valid while the backend lives.
Result<KernelProfiler*> install_kernel_profiler(ComputeBackend& backend);

// The rows as a table for people (op, calls, ms/step, share, TFLOP/s, GB/s,
// and the total), `steps` naming how many steps the figures cover.
std::string format_op_profile(const std::vector<OpProfileRow>& rows, int64_t steps);
// The same as JSON: {"steps": N, "total_ms_per_step": x, "ops": [{...}, ...]}.
std::string op_profile_json(const std::vector<OpProfileRow>& rows, int64_t steps);

}  // namespace loom::exec
