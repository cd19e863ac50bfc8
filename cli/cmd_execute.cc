// loom execute: train with a plan's layout on this launch's ranks, measure
// what the simulator predicted, and compare.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <limits>

#include "cli/commands.h"
#include "cli/compare.h"
#include "cli/parse_args.h"
#include "cli/s3_options.h"
#include "exec/comm/world.h"
#include "exec/runtime/execute.h"

namespace loom::cli {

namespace {

// SIGTERM / SIGINT (what schedulers send before preemption): finish the
// current step, save, and stop.
volatile std::sig_atomic_t g_stop_requested = 0;
void on_stop_signal(int) { g_stop_requested = 1; }
void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

// The run, then rank 0's comparison with the prediction and per-op table.
// `failed_together`: every rank failed the checks before the run (no abort).
int run(exec::Communicator& world, const exec::ExecuteOptions& o, bool* failed_together) {
  exec::ExecuteFailure how;
  auto r = exec::execute_plan(world, o, &how);
  if (!r.is_ok()) {
    *failed_together = how.together;
    const int rc = exit_code(r.status());
    if (!how.report) return rc;
    // Errors a single rank can meet alone (its data, its memory, a peer) are
    // printed by that rank, naming it.
    const Status& s = r.status();
    return fail("execute", world.rank() == 0 || how.together ? s : s.with_context("rank " + std::to_string(world.rank())));
  }
  const bool lead = world.rank() == 0;
  if (r->end != exec::RunEnd::kCompleted) {
    const bool planned = r->end == exec::RunEnd::kStoppedAsAsked;
    if (lead)
      std::fprintf(stderr, "loom execute: stopped %s after step %lld%s\n", planned ? "as asked" : "by a signal",
                   (long long)r->steps_done, r->checkpointing ? "; checkpoint saved, continue with --resume latest" : "");
    return planned ? 0 : 143;
  }
  if (!lead) return 0;
  std::printf("\n%s", format_comparison(r->plan, r->record).c_str());
  if (o.profile_ops) std::printf("\n%s", exec::format_op_profile(r->profile, r->profile_steps).c_str());
  return 0;
}

}  // namespace

int cmd_execute(int argc, char** argv) {
  CLI::App app{"Train with a plan's layout on the launched ranks (mpirun -np N loom execute plan.json).",
               "loom execute"};
  exec::ExecuteOptions a;
  a.stop_requested = &g_stop_requested;
  app.add_option("plan", a.plan_path, "plan JSON written by `loom plan`")->required();
  app.add_option("--steps", a.steps, "optimizer steps (default: the plan's, else 20)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40).description("at least 1"));
  app.add_option("--data", a.data,
                 "training data: a text file (byte-level tokens), an indexed dataset PREFIX, a PREFIX.manifest.json "
                 "from `loom preprocess`, or a blend W:SPEC,W:SPEC; s3:// and https:// too; "
                 "default data/tinyshakespeare.txt");
  app.add_option("--cache-dir", a.cache_dir, "where remote data is cached (default $LOOM_CACHE_DIR or ~/.cache/loom)");
  add_s3_options(app, &a.s3);
  app.add_option("--ckpt-dir", a.ckpt_dir, "write checkpoints here (step_NNNNNN/ directories and `latest`)");
  app.add_option("--save-every", a.save_every, "a full checkpoint every N steps (and a final one on SIGTERM/SIGINT)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--light-every", a.light_every, "a light checkpoint (training state only) every N steps")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--keep", a.keep_last, "full checkpoints to keep (0 = all)")
      ->capture_default_str()
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--keep-every", a.keep_every, "also keep every M-th step's checkpoint")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_flag("--sync-save", a.sync_save, "write checkpoints in the training thread (default: in the background)");
  app.add_option("--stop-after", a.stop_after,
                 "stop (with a checkpoint when --ckpt-dir is set) after this many steps of the run, keeping the LR "
                 "schedule of --steps: an interruption on purpose")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40).description("at least 1"));
  app.add_option("--resume", a.resume, "continue from a checkpoint: a step directory, a checkpoint directory, or `latest` "
                                       "(in --ckpt-dir); it may have been written under another layout");
  app.add_option("--scale", a.scale,
                 "run the plan's model scaled down, e.g. layers=4,hidden=256,heads=4; the plan's layout is re-planned "
                 "for the scaled model (its prediction is what the run is compared with)");
  app.add_option("--plan-out", a.plan_out, "with --scale: write the re-planned plan here (for `loom compare`)");
  app.add_option("--metrics", a.metrics, "write one JSON line per step here");
  app.add_option("--record", a.record, "write the run record (measured figures) here");
  app.add_option("--trace", a.trace, "write the measured Chrome trace of the last step here");
  app.add_option("--threads", a.threads,
                 "compute threads per rank (default 0: the cores this process may use / the ranks on this node)");
  app.add_option("--backend", a.backend, "where the math runs: cpu, or cuda (one GPU per rank, NCCL between them)")
      ->capture_default_str();
  app.add_option("--precision", a.precision,
                 "fp32, bf16 or fp16 (16-bit GEMM operands with fp32 master weights, gradients and Adam states; fp16 "
                 "with dynamic loss scaling; CUDA only); "
                 "default: fp32 on the CPU, the plan's precision on CUDA");
  app.add_option("--device", a.device, "CUDA device of this rank (default: the local rank modulo the visible GPUs)")
      ->check(CLI::Range(0, 1 << 20).description("a device index, 0 or more"));
  app.add_option("--timeout", a.timeout_s,
                 "seconds a collective may wait for a peer before the job is aborted (and, under a torchrun-style "
                 "launch, every rank has to reach the rendezvous); 0 disables the watchdog")
      ->check(CLI::Range(0.0, 1e9));
  app.add_flag("--quiet", a.quiet, "no per-step lines");
  app.add_flag("--profile-ops", a.profile_ops,
               "time every kernel-table call (CUDA events on the GPU, no extra synchronization) and print, after the "
               "run, rank 0's table per op: calls, ms per step, share, TFLOP/s or GB/s (warm-up steps excluded)");
  app.add_option("--profile-ops-json", a.profile_ops_json, "write the per-op rows as JSON here (implies profiling)");
  app.add_option("--test-slowdown", a.test_slowdown, "test only: make every step this many times slower")
      ->check(CLI::Range(1.0, 100.0))
      ->group("");
  if (int rc = parse_args(app, "execute", argc, argv); rc >= 0) return rc;
  if (!a.plan_out.empty() && a.scale.empty())
    return fail("execute", invalid_argument("--plan-out writes the plan re-planned for --scale; without --scale the "
                                            "run's plan is " + a.plan_path + " itself: drop --plan-out"));
  exec::WorldOptions wo;
  wo.timeout_s = a.timeout_s;
  wo.rendezvous_timeout_s = a.timeout_s > 0 ? a.timeout_s : 300;
  auto world = exec::open_world(&argc, &argv, wo);
  if (!world.is_ok()) return fail("execute", world.status());
  exec::Communicator& comm = world->comm();
  if (comm.rank() == 0 && !a.quiet)
    std::printf("ranks: %d, joined by %s\n", comm.size(), world->how().c_str());
  install_stop_handlers();
  bool failed_together = false;
  int rc = run(comm, a, &failed_together);
  if (rc != 0 && rc != 143 && !failed_together && comm.size() > 1) {  // 143: every rank stopped together on a signal
    // One rank failing ends the job on every rank instead of leaving peers waiting.
    comm.abort(rc, "loom execute: rank " + std::to_string(comm.rank()) + " failed; ending the job");
  }
  return rc;
}

}  // namespace loom::cli
