// Executing a plan in-process: everything `loom execute` does on one rank
// between the command line and the exit code, as a library call that the CLI,
// the GUI and tests make alike. The plan is read and checked against the
// launch (every rank agrees on a failure before anything is allocated), then
// the data, compute threads, device and its communicator, the trainer, a
// resume, the checkpointer and the metrics stream are opened, the run driver
// (run_driver.h) runs the steps, and the outputs (merged trace, run record,
// per-op profile) are written.
//
// execute_local() runs a plan on N ranks of this process: one thread per rank,
// joined over TCP on the loopback interface (tcp_communicator.h), so a desktop
// (the GUI) needs no MPI launcher.
//
// Thread-safety: execute_plan() is called once per rank, each on its own
// thread with its own communicator; the compute thread count (Eigen's pool)
// is process-wide, so every rank of a process must ask for the same number.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/plan.h"
#include "exec/data/s3_config.h"
#include "core/run_record.h"
#include "exec/backend/kernel_profile.h"
#include "exec/comm/communicator.h"
#include "exec/runtime/run_driver.h"

namespace loom::exec {

struct ExecuteOptions {
  std::string plan_path;
  int64_t steps = -1;  // the plan's when < 0 (20 when it has none)
  std::string data;    // a --data spec; "" = the sample corpus
  std::string scale;   // "layers=4,hidden=256,heads=4": the plan's model scaled down (and re-planned)
  std::string plan_out;  // with scale: write the re-planned plan here
  std::string cache_dir;
  data::S3Options s3;  // --endpoint, --aws-profile, --s3-addressing
  // Outputs ("" for none; "-" is stdout for the metrics).
  std::string metrics, record, trace, profile_ops_json;
  bool profile_ops = false;  // keep the per-op rows (ExecuteResult::profile)
  // Checkpoints.
  std::string ckpt_dir;
  int64_t save_every = 0, light_every = 0;
  int keep_last = 3, keep_every = 0;
  bool sync_save = false;
  std::string resume;      // a step directory, a checkpoint directory, or "latest" (in ckpt_dir)
  int64_t stop_after = 0;  // stop after this many steps of the schedule (0: run to the end)
  // Compute.
  int threads = 0;  // per rank; 0 = the cores this process may use / the ranks on this node
  std::string backend = "cpu";
  std::string precision;  // "" = fp32 on the CPU, the plan's on CUDA
  int device = -1;
  double timeout_s = 300;  // a collective waiting this long fails the run
  double test_slowdown = 1.0;
  // Set (by a signal handler, a GUI's stop button) to stop after the current step.
  const volatile std::sig_atomic_t* stop_requested = nullptr;
  // Rank 0's progress lines ("data: ...", "step 3/20 | loss ..."), each
  // without its newline; null prints them to stdout. Quiet: no step lines.
  std::function<void(const std::string&)> print;
  bool quiet = false;
};

struct ExecuteResult {
  Plan plan;
  RunRecord record;  // measured figures (rank 0's is the job's)
  RunEnd end = RunEnd::kCompleted;
  int64_t steps_done = 0;
  bool checkpointing = false;
  std::vector<OpProfileRow> profile;  // with profile_ops (rank 0)
  int64_t profile_steps = 0;
};

// How a failure of execute_plan() ended the job.
struct ExecuteFailure {
  // Every rank failed together in the checks before allocating: no rank
  // needs to abort the others.
  bool together = false;
  // This rank prints the error (the lowest failing rank of a failure
  // together; every failing rank otherwise).
  bool report = true;
};

// Runs the plan on this rank of `world`. Collective: every rank calls it with
// the same options. A failure in the checks before allocating returns on
// every rank with the same exit code (status_exit_code()); a later failure
// returns on the failing rank, and its peers fail in their next collective
// (the caller aborts the job: Communicator::abort).
Result<ExecuteResult> execute_plan(Communicator& world, const ExecuteOptions& options,
                                   ExecuteFailure* failure = nullptr);

// Runs the plan on `ranks` threads of this process joined over loopback TCP
// (the plan must be for that many ranks). Returns rank 0's result, or the
// first failing rank's error (naming the rank).
Result<ExecuteResult> execute_local(int ranks, const ExecuteOptions& options);

}  // namespace loom::exec
