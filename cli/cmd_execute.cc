// loom execute: train with a plan's layout on this launch's ranks, measure
// what the simulator predicted, and compare.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <thread>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/compare.h"
#include "core/json_util.h"
#include "core/output_file.h"
#include "core/phases.h"
#include "core/plan.h"
#include "core/resources.h"
#include "core/run_record.h"
#include "exec/backend/cpu_ops.h"
#include "exec/backend/kernel_profile.h"
#include "exec/checkpoint/checkpoint.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/compute_threads.h"
#include "exec/runtime/dataset_source.h"
#include "exec/runtime/trainer.h"
#include "exec/runtime/run_driver.h"
#include "exec/runtime/trainer_checkpoint.h"
#include "exec/comm/world.h"
#include "exec/runtime/devices.h"
#include "exec/runtime/memory_check.h"

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

struct ExecArgs {
  std::string plan_path;
  int64_t steps = -1;
  std::string data;
  std::string scale;
  std::string metrics;
  std::string record;
  std::string trace;
  std::string cache_dir;
  std::string ckpt_dir;
  int64_t save_every = 0;
  int64_t light_every = 0;
  int keep_last = 3;
  int keep_every = 0;
  bool sync_save = false;
  std::string resume;
  int64_t stop_after = 0;
  int threads = 0;
  double timeout_s = 300;
  std::string backend = "cpu";
  std::string precision;  // "" = fp32 on the CPU, the plan's on CUDA
  int device = -1;
  bool quiet = false;
  double test_slowdown = 1.0;  // test only: every step takes this many times as long
  bool profile_ops = false;       // per-op table of the kernel calls after the run (rank 0)
  std::string profile_ops_json;   // the same rows as JSON
};

// Every rank's events of the last step, merged into one Chrome trace by rank 0
// (ranks write part files next to the target; one host or a shared file system).
// `program_hash` names the program the ops belong to (`loom compare --ops`).
Status write_merged_trace(exec::Communicator& world, const std::vector<TraceEvent>& mine, const std::string& path,
                          const std::string& plan_hash, const std::string& program_hash) {
  Trace part;
  part.kind = "measured";
  part.events = mine;
  // Part files next to the target (in the working directory for `-`, stdout).
  const std::string base = is_stdout_path(path) ? ".loom-trace-" + plan_hash : path;
  std::string part_path = base + ".rank" + std::to_string(world.rank());
  LOOM_RETURN_IF_ERROR(write_trace(part, part_path));
  LOOM_RETURN_IF_ERROR(world.barrier());
  if (world.rank() != 0) return Status::ok();
  Trace all;
  all.kind = "measured";
  all.plan_hash = plan_hash;
  all.program_hash = program_hash;
  for (int r = 0; r < world.size(); ++r) {
    std::string p = base + ".rank" + std::to_string(r);
    LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(p));
    LOOM_ASSIGN_OR_RETURN(Trace t, parse_trace(text));
    all.process_names.push_back("rank " + std::to_string(r));
    for (TraceEvent& e : t.events) {
      e.pid = r;
      all.events.push_back(std::move(e));
    }
    std::remove(p.c_str());
  }
  for (int i = 0; i < kNumStreams; ++i) all.thread_names.push_back(stream_name(static_cast<Stream>(i)));
  return write_trace(all, path);
}

// Every output is checked before the first step (core/output_file.h): a
// missing directory, a FIFO or a device must not cost a whole run.
Status check_execute_outputs(const ExecArgs& a) {
  const std::pair<const char*, const std::string*> files[] = {
      {"--record", &a.record}, {"--trace", &a.trace}, {"--metrics", &a.metrics},
      {"--profile-ops-json", &a.profile_ops_json}};
  for (const auto& [opt, path] : files) {
    if (path->empty()) continue;
    LOOM_RETURN_IF_ERROR(check_output_path(*path, opt));
    LOOM_RETURN_IF_ERROR(refuse_same_file(*path, a.plan_path, opt, "plan"));
    LOOM_RETURN_IF_ERROR(refuse_same_file(*path, a.data, opt, "--data file"));
  }
  if (!a.ckpt_dir.empty()) LOOM_RETURN_IF_ERROR(check_output_dir(a.ckpt_dir, "--ckpt-dir"));
  return Status::ok();
}

// Whether any rank failed the checks every rank makes before allocating:
// every rank learns it at once (a collective), so a problem met by some ranks
// only (a file missing on one node) ends the whole job together, the message
// is printed once (by the lowest failing rank) and no rank aborts the others.
// Returns the job's exit code, 0 when every rank passed.
int agree_on_failure(exec::Communicator& world, const Status& mine) {
  double worst = exit_code(mine), first = mine.is_ok() ? 1e18 : double(world.rank());
  if (Status s = world.all_reduce(&worst, 1, exec::ReduceOp::kMax); !s.is_ok()) return fail("execute", s);
  if (Status s = world.all_reduce(&first, 1, exec::ReduceOp::kMin); !s.is_ok()) return fail("execute", s);
  if (worst == 0) return 0;
  if (!mine.is_ok() && double(world.rank()) == first)
    fail("execute", world.rank() == 0 ? mine : mine.with_context("rank " + std::to_string(world.rank())));
  return int(worst);
}

// What one `loom execute` holds between its stages.
struct Session {
  Plan plan;
  exec::TrainerConfig cfg;
  std::unique_ptr<exec::TokenSource> data;
  exec::Devices devices;
  exec::KernelProfiler* profiler = nullptr;
  std::unique_ptr<exec::Trainer> trainer;
  int64_t start_step = 0;
  std::unique_ptr<ckpt::Checkpointer> checkpointer;
  std::unique_ptr<std::ofstream> metrics_file;
  std::ostream* metrics = nullptr;
};

// The checks every rank makes before allocating anything: the plan, the
// launch against it, the outputs, the (scaled) model and its host memory.
Status read_plan(exec::Communicator& world, const ExecArgs& a, Session& s) {
  LOOM_ASSIGN_OR_RETURN(s.plan, load_plan(a.plan_path));
  if (s.plan.world_size != world.size())
    return invalid_argument("the plan is for " + std::to_string(s.plan.world_size) + " ranks but " +
                            std::to_string(world.size()) + " were launched; run `mpirun -np " +
                            std::to_string(s.plan.world_size) + " loom execute " + a.plan_path + "`");
  LOOM_RETURN_IF_ERROR(check_execute_outputs(a));
  exec::TrainerConfig& cfg = s.cfg;
  cfg.model = s.plan.model;
  cfg.train = s.plan.train;
  cfg.layout = s.plan.layout;
  cfg.grad_buckets = s.plan.grad_buckets;  // the program the prediction timed
  cfg.record_trace = !a.trace.empty();
  if (!a.scale.empty()) {
    LOOM_ASSIGN_OR_RETURN(ModelScale scale, parse_model_scale(a.scale));
    LOOM_ASSIGN_OR_RETURN(cfg.model, scale_model(s.plan.model, scale));
  }
  if (a.steps >= 0) cfg.train.steps = a.steps;
  if (cfg.train.steps <= 0) cfg.train.steps = 20;
  LOOM_RETURN_IF_ERROR(validate_layout(cfg.layout, cfg.model, cfg.train, world.size()));
  // The (scaled) model must fit this host before anything is allocated (CUDA: once the device is open).
  if (a.backend == "cpu") LOOM_RETURN_IF_ERROR(exec::check_host_memory(s.plan, cfg.model, cfg.train, cfg.layout, world.rank()));
  return Status::ok();
}

// Data, compute threads, the device and its communicator, the profiler, then
// the trainer (which allocates).
Status open_trainer(exec::Communicator& world, const ExecArgs& a, Session& s) {
  const bool say = world.rank() == 0 && !a.quiet;
  exec::TrainerConfig& cfg = s.cfg;
  exec::DataSpecOptions dopt;
  dopt.seq_len = cfg.train.seq_len;
  dopt.global_batch = cfg.train.global_batch;
  dopt.dp_rank = RankGrid(cfg.layout).coords(world.rank()).dp;
  dopt.dp_size = cfg.layout.dp;
  dopt.seed = cfg.train.seed;
  dopt.model_vocab = cfg.model.vocab;
  dopt.cache_dir = a.cache_dir;
  std::string data_spec = a.data;
  if (data_spec.empty()) {
    auto corpus = default_corpus();
    if (!corpus.is_ok()) return corpus.status().with_context("--data not given");
    data_spec = *corpus;
    if (say) std::printf("data: %s (the sample corpus; --data names yours)\n", data_spec.c_str());
  }
  LOOM_ASSIGN_OR_RETURN(s.data, exec::open_training_data(data_spec, dopt));
  LOOM_ASSIGN_OR_RETURN(exec::ComputeThreads threads, exec::compute_threads(a.threads, exec::detect_launch_env().local_world));
  cpu::set_num_threads(threads.threads);
  if (say) std::printf("threads: %s\n", threads.describe().c_str());
  if (world.rank() == 0 && !threads.warning.empty())
    std::fprintf(stderr, "loom execute: warning: %s\n", threads.warning.c_str());
  exec::DeviceRequest dreq;
  dreq.backend = a.backend;
  dreq.precision = a.precision;
  dreq.device = a.device;
  dreq.timeout_s = a.timeout_s;
  LOOM_ASSIGN_OR_RETURN(s.devices, exec::open_devices(world, dreq, cfg.train.precision));
  // --profile-ops: the per-op profiler in front of the backend's kernel table
  // (the CPU backend is made here instead of by the trainer so it can be wrapped).
  if (a.profile_ops || !a.profile_ops_json.empty()) {
    if (!s.devices.backend) s.devices.backend = exec::make_cpu_backend();
    LOOM_ASSIGN_OR_RETURN(s.profiler, exec::install_kernel_profiler(*s.devices.backend));
  }
  cfg.backend = s.devices.backend.get();
  cfg.device_world = s.devices.world.get();
  if (say) std::printf("backend: %s\n", s.devices.description.c_str());
  size_t free_b = 0, total_b = 0;  // CUDA: this rank's stage against its device's free memory
  if (exec::device_memory(s.devices, &free_b, &total_b))
    LOOM_RETURN_IF_ERROR(exec::check_device_memory(s.plan, cfg.model, cfg.train, cfg.layout, world.rank(),
                                             s.devices.precision, free_b,
                                             "GPU " + std::to_string(s.devices.cuda_device) + "'s free memory"));
  LOOM_ASSIGN_OR_RETURN(s.trainer, exec::Trainer::create(&world, cfg, s.data.get()));
  return Status::ok();
}

// --resume: any layout's checkpoint of this model; every rank reads its
// slices. Then the checkpointer of --ckpt-dir.
Status open_checkpoints(exec::Communicator& world, const ExecArgs& a, Session& s) {
  if (!a.resume.empty()) {
    std::string where = a.resume;
    if (where == "latest") {
      if (a.ckpt_dir.empty()) return invalid_argument("--resume latest needs --ckpt-dir DIR");
      where = a.ckpt_dir;
    }
    auto reader = ckpt::CheckpointReader::open(where);
    if (!reader.is_ok()) return reader.status().with_context("--resume " + a.resume);
    LOOM_RETURN_IF_ERROR(exec::restore_trainer(*s.trainer, **reader, &s.start_step));
    if (world.rank() == 0)
      std::printf("resumed from %s at step %lld\n", (*reader)->path().c_str(), (long long)s.start_step);
  }
  if (a.ckpt_dir.empty()) return Status::ok();
  ckpt::CheckpointOptions co;
  co.dir = a.ckpt_dir;
  co.async = !a.sync_save;
  co.keep_last = a.keep_last;
  co.keep_every = a.keep_every;
  OrderedJson meta;
  meta["model"] = OrderedJson::parse(model_spec_to_json(s.cfg.model));
  meta["model_name"] = s.cfg.model.name;
  meta["layout"] = OrderedJson::parse(layout_to_json(s.cfg.layout));
  meta["train"] = OrderedJson::parse(train_spec_to_json(s.cfg.train));
  meta["plan_hash"] = s.plan.plan_hash();
  LOOM_ASSIGN_OR_RETURN(s.checkpointer, ckpt::Checkpointer::create(co, world.rank(), world.size(), meta.dump()));
  return Status::ok();
}

// Metrics stream line by line (no temporary + rename) from rank 0: to the
// symlink's target, or stdout for `-`; a failed write ends the run (a full disk).
Status open_metrics(exec::Communicator& world, const ExecArgs& a, Session& s) {
  if (world.rank() != 0 || a.metrics.empty()) return Status::ok();
  if (is_stdout_path(a.metrics)) {
    s.metrics = &std::cout;
    return Status::ok();
  }
  LOOM_ASSIGN_OR_RETURN(std::string target, resolve_output_path(a.metrics, "--metrics"));
  s.metrics_file = std::make_unique<std::ofstream>(target);
  if (!*s.metrics_file) return write_error("open", a.metrics, errno);
  s.metrics = s.metrics_file.get();
  return Status::ok();
}

// Rank 0's line per step and its metrics record.
Status report_step(const ExecArgs& a, Session& s, const exec::StepFigures& f) {
  const exec::StepResult& r = *f.result;
  const bool fp16 = s.devices.precision == Precision::kFp16;
  if (!a.quiet)
    std::printf("step %4lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%%s\n",
                (long long)f.step, (long long)f.steps, r.loss, r.lr, r.grad_norm, r.step_time_s * 1e3, f.tokens_per_s,
                100 * f.mfu,
                fp16 ? (std::string(" | loss scale ") + std::to_string(int64_t(r.loss_scale)) +
                        (r.skipped ? " | skipped: fp16 overflow" : ""))
                           .c_str()
                     : "");
  if (!s.metrics) return Status::ok();
  OrderedJson j;
  j["step"] = f.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = f.tokens_per_s;
  j["mfu"] = f.mfu;
  j["data_wait_s"] = r.phases.data_wait_s;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  if (fp16) {
    j["loss_scale"] = r.loss_scale;
    j["skipped"] = r.skipped;
  }
  *s.metrics << j.dump() << "\n";
  s.metrics->flush();
  if (!*s.metrics) return write_error("write", a.metrics, errno);
  return Status::ok();
}

// After the run: the merged trace (every rank), then rank 0's record,
// comparison with the prediction and per-op profile.
Status report_run(exec::Communicator& world, const ExecArgs& a, Session& s, const RunRecord& rec) {
  if (!a.trace.empty())
    LOOM_RETURN_IF_ERROR(write_merged_trace(world, s.trainer->last_step_events(), a.trace, rec.plan_hash,
                                            program_hash(s.plan.program_config())));
  if (world.rank() != 0) return Status::ok();
  if (!a.record.empty()) LOOM_RETURN_IF_ERROR(write_text_file(a.record, run_record_to_json(rec)));
  std::printf("\n%s", format_comparison(s.plan, rec).c_str());
  if (s.profiler) {
    const auto rows = s.profiler->report();
    if (a.profile_ops) std::printf("\n%s", exec::format_op_profile(rows, s.profiler->steps()).c_str());
    if (!a.profile_ops_json.empty())
      LOOM_RETURN_IF_ERROR(write_text_file(a.profile_ops_json, exec::op_profile_json(rows, s.profiler->steps())));
  }
  return Status::ok();
}

int run(exec::Communicator& world, const ExecArgs& a, bool* failed_together) {
  const bool lead = world.rank() == 0;
  // Errors a single rank can meet alone (its data, its memory, a peer) are
  // printed by that rank; the checks before allocating end every rank
  // together (agree_on_failure).
  auto say = [&](const Status& s) {
    return fail("execute", lead ? s : s.with_context("rank " + std::to_string(world.rank())));
  };
  Session s;
  if (int rc = agree_on_failure(world, read_plan(world, a, s)); rc != 0) {
    *failed_together = true;
    return rc;
  }
  for (auto stage : {open_trainer, open_checkpoints, open_metrics})
    if (Status st = stage(world, a, s); !st.is_ok()) return say(st);
  install_stop_handlers();
  RunRecord rec;
  rec.loom_version = loom_version();
  rec.plan_hash = s.plan.plan_hash();
  rec.model_name = s.cfg.model.name;
  rec.model_config = model_spec_to_json(s.cfg.model);
  rec.hardware_name = s.plan.hw.name;
  rec.backend = s.devices.description;
  rec.layout = s.cfg.layout.to_string();
  rec.world_size = world.size();
  exec::RunControl control;
  control.start_step = s.start_step;
  control.checkpointer = s.checkpointer.get();
  control.save_every = a.save_every;
  control.light_every = a.light_every;
  control.stop_after = a.stop_after;
  control.stop_requested = &g_stop_requested;
  control.profiler = s.profiler;
  control.test_slowdown = a.test_slowdown;
  control.on_step = [&](const exec::StepFigures& f) { return lead ? report_step(a, s, f) : Status::ok(); };
  // MFU against the plan's hardware peak in the precision the run computes in.
  auto outcome = exec::drive_run(world, *s.trainer, s.cfg.train,
                                 s.cfg.model.model_flops_per_token_palm(s.cfg.train.seq_len),
                                 s.plan.hw.accel.peak_flops(s.devices.precision), control, &rec);
  if (!outcome.is_ok()) return say(outcome.status());
  if (outcome->end != exec::RunEnd::kCompleted) {
    const bool planned = outcome->end == exec::RunEnd::kStoppedAsAsked;
    if (lead)
      std::fprintf(stderr, "loom execute: stopped %s after step %lld%s\n", planned ? "as asked" : "by a signal",
                   (long long)outcome->steps_done,
                   s.checkpointer ? "; checkpoint saved, continue with --resume latest" : "");
    return planned ? 0 : 143;
  }
  if (s.checkpointer && lead && !a.quiet)
    std::printf("checkpoint stall: %.3f s in total over the run\n", rec.checkpoint_stall_s);
  if (Status st = report_run(world, a, s, rec); !st.is_ok()) return say(st);
  return 0;
}

}  // namespace

int cmd_execute(int argc, char** argv) {
  CLI::App app{"Train with a plan's layout on the launched ranks (mpirun -np N loom execute plan.json).",
               "loom execute"};
  ExecArgs a;
  app.add_option("plan", a.plan_path, "plan JSON written by `loom plan`")->required();
  app.add_option("--steps", a.steps, "optimizer steps (default: the plan's, else 20)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40).description("at least 1"));
  app.add_option("--data", a.data,
                 "training data: a text file (byte-level tokens), an indexed dataset PREFIX, a PREFIX.manifest.json "
                 "from `loom preprocess`, or a blend W:SPEC,W:SPEC; s3:// and https:// too; "
                 "default data/tinyshakespeare.txt");
  app.add_option("--cache-dir", a.cache_dir, "where remote data is cached (default $LOOM_CACHE_DIR or ~/.cache/loom)");
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
  app.add_option("--scale", a.scale, "run the plan's model scaled down, e.g. layers=4,hidden=256,heads=4");
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
  exec::WorldOptions wo;
  wo.timeout_s = a.timeout_s;
  wo.rendezvous_timeout_s = a.timeout_s > 0 ? a.timeout_s : 300;
  auto world = exec::open_world(&argc, &argv, wo);
  if (!world.is_ok()) return fail("execute", world.status());
  exec::Communicator& comm = world->comm();
  if (comm.rank() == 0 && !a.quiet)
    std::printf("ranks: %d, joined by %s\n", comm.size(), world->how().c_str());
  bool failed_together = false;
  int rc = run(comm, a, &failed_together);
  if (rc != 0 && rc != 143 && !failed_together && comm.size() > 1) {  // 143: every rank stopped together on a signal
    // One rank failing ends the job on every rank instead of leaving peers waiting.
    comm.abort(rc, "loom execute: rank " + std::to_string(comm.rank()) + " failed; ending the job");
  }
  return rc;
}

}  // namespace loom::cli
