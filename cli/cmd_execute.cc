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
#include "cli/execute_memory.h"
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
#include "exec/runtime/trainer_checkpoint.h"
#include "exec/comm/world.h"
#include "exec/runtime/devices.h"

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

// One step of this rank as the typed phases the comparison reads
// (core/phases.h says what each field holds on the executor's side).
StepPhases measured_phases(const exec::PhaseTimes& t) {
  StepPhases p;
  p.forward_s = t.forward_s;
  p.backward_s = t.backward_s;
  // TP collectives run inside a chunk's forward/backward and are not timed
  // apart (the trainer leaves PhaseTimes::tp_comm_s unset).
  p.tp_comm_exposed_s = kNotMeasured;
  p.pipeline_wait_s = t.pp_comm_s;
  p.dp_comm_exposed_s = t.dp_comm_s;
  p.optimizer_s = t.optimizer_s;
  p.data_wait_s = t.data_s;
  return p;
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

int run(exec::Communicator& world, const ExecArgs& a, bool* failed_together) {
  const bool lead = world.rank() == 0;
  // Errors a single rank can meet alone (its data, its memory, a peer) are
  // printed by that rank; the checks before allocating end every rank
  // together (agree_on_failure).
  auto say = [&](const Status& s) {
    return fail("execute", lead ? s : s.with_context("rank " + std::to_string(world.rank())));
  };
  Result<Plan> plan = internal_error("the plan was not read");
  exec::TrainerConfig cfg;
  const Status early = [&]() -> Status {
    plan = load_plan(a.plan_path);
    if (!plan.is_ok()) return plan.status();
    // The launch must match the plan before anything is allocated.
    if (plan->world_size != world.size())
      return invalid_argument("the plan is for " + std::to_string(plan->world_size) + " ranks but " +
                              std::to_string(world.size()) + " were launched; run `mpirun -np " +
                              std::to_string(plan->world_size) + " loom execute " + a.plan_path + "`");
    LOOM_RETURN_IF_ERROR(check_execute_outputs(a));
    cfg.model = plan->model;
    cfg.train = plan->train;
    cfg.layout = plan->layout;
    cfg.grad_buckets = plan->grad_buckets;  // the program the prediction timed
    cfg.record_trace = !a.trace.empty();
    if (!a.scale.empty()) {
      auto scale = parse_model_scale(a.scale);
      if (!scale.is_ok()) return scale.status();
      auto scaled = scale_model(plan->model, *scale);
      if (!scaled.is_ok()) return scaled.status();
      cfg.model = *scaled;
    }
    if (a.steps >= 0) cfg.train.steps = a.steps;
    if (cfg.train.steps <= 0) cfg.train.steps = 20;
    LOOM_RETURN_IF_ERROR(validate_layout(cfg.layout, cfg.model, cfg.train, world.size()));
    // The plan's (scaled) model must fit this host before anything is allocated (CUDA: once the device is open).
    if (a.backend == "cpu")
      LOOM_RETURN_IF_ERROR(check_host_memory(*plan, cfg.model, cfg.train, cfg.layout, world.rank()));
    return Status::ok();
  }();
  if (int rc = agree_on_failure(world, early); rc != 0) {
    *failed_together = true;
    return rc;
  }
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
    if (!corpus.is_ok()) return say(corpus.status().with_context("--data not given"));
    data_spec = *corpus;
    if (lead && !a.quiet) std::printf("data: %s (the sample corpus; --data names yours)\n", data_spec.c_str());
  }
  auto data = exec::open_training_data(data_spec, dopt);
  if (!data.is_ok()) return say(data.status());
  auto threads = exec::compute_threads(a.threads, exec::detect_launch_env().local_world);
  if (!threads.is_ok()) return say(threads.status());
  cpu::set_num_threads(threads->threads);
  if (lead && !a.quiet) std::printf("threads: %s\n", threads->describe().c_str());
  if (lead && !threads->warning.empty()) std::fprintf(stderr, "loom execute: warning: %s\n", threads->warning.c_str());
  exec::DeviceRequest dreq;
  dreq.backend = a.backend;
  dreq.precision = a.precision;
  dreq.device = a.device;
  dreq.timeout_s = a.timeout_s;
  auto devices = exec::open_devices(world, dreq, cfg.train.precision);
  if (!devices.is_ok()) return say(devices.status());
  // --profile-ops: the per-op profiler in front of the backend's kernel table
  // (the CPU backend is made here instead of by the trainer so it can be wrapped).
  exec::KernelProfiler* profiler = nullptr;
  if (a.profile_ops || !a.profile_ops_json.empty()) {
    if (!devices->backend) devices->backend = exec::make_cpu_backend();
    auto p = exec::install_kernel_profiler(*devices->backend);
    if (!p.is_ok()) return say(p.status());
    profiler = *p;
  }
  cfg.backend = devices->backend.get();
  cfg.device_world = devices->world.get();
  if (lead && !a.quiet) std::printf("backend: %s\n", devices->description.c_str());
  if (devices->world) {  // CUDA: this rank's stage against its device's free memory
    size_t free_b = 0, total_b = 0;
    if (exec::device_memory(*devices, &free_b, &total_b))
      if (Status s = check_device_memory(*plan, cfg.model, cfg.train, cfg.layout, world.rank(), devices->precision,
                                         free_b, "GPU " + std::to_string(devices->cuda_device) + "'s free memory");
          !s.is_ok())
        return say(s);
  }
  auto trainer = exec::Trainer::create(&world, cfg, data->get());
  if (!trainer.is_ok()) return say(trainer.status());

  // Resume: any layout's checkpoint of this model; every rank reads its slices.
  int64_t start_step = 0;
  if (!a.resume.empty()) {
    std::string where = a.resume;
    if (where == "latest") {
      if (a.ckpt_dir.empty()) return say(invalid_argument("--resume latest needs --ckpt-dir DIR"));
      where = a.ckpt_dir;
    }
    auto reader = ckpt::CheckpointReader::open(where);
    if (!reader.is_ok()) return say(reader.status().with_context("--resume " + a.resume));
    if (Status s = exec::restore_trainer(**trainer, **reader, &start_step); !s.is_ok()) return say(s);
    if (lead)
      std::printf("resumed from %s at step %lld\n", (*reader)->path().c_str(), (long long)start_step);
  }
  std::unique_ptr<ckpt::Checkpointer> checkpointer;
  if (!a.ckpt_dir.empty()) {
    ckpt::CheckpointOptions co;
    co.dir = a.ckpt_dir;
    co.async = !a.sync_save;
    co.keep_last = a.keep_last;
    co.keep_every = a.keep_every;
    OrderedJson meta;
    meta["model"] = OrderedJson::parse(model_spec_to_json(cfg.model));
    meta["model_name"] = cfg.model.name;
    meta["layout"] = OrderedJson::parse(layout_to_json(cfg.layout));
    meta["train"] = OrderedJson::parse(train_spec_to_json(cfg.train));
    meta["plan_hash"] = plan->plan_hash();
    auto c = ckpt::Checkpointer::create(co, world.rank(), world.size(), meta.dump());
    if (!c.is_ok()) return say(c.status());
    checkpointer = std::move(c).value();
  }
  install_stop_handlers();
  auto save = [&](int64_t next_step, bool light) -> Status {
    ckpt::SaveRequest req;
    LOOM_RETURN_IF_ERROR(exec::snapshot_trainer(**trainer, next_step, light, &req));
    return checkpointer->save(std::move(req));
  };

  // Metrics stream line by line (no temporary + rename): to the symlink's
  // target, or stdout for `-`; a failed write ends the run (a full disk).
  std::unique_ptr<std::ofstream> metrics_file;
  std::ostream* metrics = nullptr;
  if (lead && !a.metrics.empty()) {
    if (is_stdout_path(a.metrics)) {
      metrics = &std::cout;
    } else {
      auto target = resolve_output_path(a.metrics, "--metrics");
      if (!target.is_ok()) return say(target.status());
      metrics_file = std::make_unique<std::ofstream>(*target);
      if (!*metrics_file) return say(write_error("open", a.metrics, errno));
      metrics = metrics_file.get();
    }
  }
  const double tokens = double(cfg.train.tokens_per_step());
  const double palm = cfg.model.model_flops_per_token_palm(cfg.train.seq_len);
  // MFU against the plan's hardware peak in the precision the run computes in.
  const double peak = plan->hw.accel.peak_flops(devices->precision);
  RunRecord rec;
  rec.loom_version = loom_version();
  rec.plan_hash = plan->plan_hash();
  rec.model_name = cfg.model.name;
  rec.model_config = model_spec_to_json(cfg.model);
  rec.hardware_name = plan->hw.name;
  rec.backend = devices->description;
  rec.layout = cfg.layout.to_string();
  rec.world_size = world.size();
  rec.steps = cfg.train.steps - start_step;
  rec.tokens_per_step = int64_t(tokens);
  rec.mfu_formula = "PaLM: (6*N + 12*L*H*Q*T) * tokens/s / (ranks * peak_flops_per_rank)";
  rec.peak_flops_per_rank = peak;
  rec.warmup_steps = cfg.train.steps - start_step > 3 ? 2 : 0;
  StepPhases sum = measured_phases(exec::PhaseTimes{});  // zeros, what is not measured marked so
  double ckpt_stall_s = 0;
  double time_sum = 0;
  int64_t measured = 0;
  size_t peak_mem = 0;
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    auto r = (*trainer)->step(step);
    if (!r.is_ok()) return say(r.status());
    if (profiler) {
      profiler->step_done();
      if (step - start_step + 1 == rec.warmup_steps) profiler->reset();  // the measured steps only
    }
    if (a.test_slowdown > 1.0) {
      // Test-only injected slowdown (tests/e2e/regress.sh proves `loom regress
      // check` catches it): every rank idles the same extra time, counted as
      // forward compute.
      const double extra = (a.test_slowdown - 1.0) * r->step_time_s;
      std::this_thread::sleep_for(std::chrono::duration<double>(extra));
      r->step_time_s += extra;
      r->phases.forward_s += extra;
    }
    rec.losses.push_back(r->loss);
    rec.step_times_s.push_back(r->step_time_s);
    peak_mem = std::max(peak_mem, r->peak_memory_bytes);
    double tps = tokens / r->step_time_s;
    double mfu = tps * palm / (world.size() * peak);
    if (step - start_step >= rec.warmup_steps) {
      ++measured;
      time_sum += r->step_time_s;
      sum += measured_phases(r->phases);
    }
    if (lead) {
      if (!a.quiet)
        std::printf("step %4lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%%s\n",
                    (long long)step + 1, (long long)cfg.train.steps, r->loss, r->lr, r->grad_norm,
                    r->step_time_s * 1e3, tps, 100 * mfu,
                    devices->precision == Precision::kFp16
                        ? (std::string(" | loss scale ") + std::to_string(int64_t(r->loss_scale)) +
                           (r->skipped ? " | skipped: fp16 overflow" : ""))
                              .c_str()
                        : "");
      if (metrics) {
        OrderedJson j;
        j["step"] = step + 1;
        j["loss"] = r->loss;
        j["lr"] = r->lr;
        j["grad_norm"] = r->grad_norm;
        j["step_time_s"] = r->step_time_s;
        j["tokens_per_s"] = tps;
        j["mfu"] = mfu;
        j["data_wait_s"] = r->phases.data_s;
        j["peak_memory_bytes"] = r->peak_memory_bytes;
        if (devices->precision == Precision::kFp16) {
          j["loss_scale"] = r->loss_scale;
          j["skipped"] = r->skipped;
        }
        *metrics << j.dump() << "\n";
        metrics->flush();
        if (!*metrics) return say(write_error("write", a.metrics, errno));
      }
    }
    // Checkpoints after step + 1 completed steps; a stop signal on any rank
    // stops every rank after the same step, with a final (synchronous) save.
    const bool planned_stop = a.stop_after > 0 && step + 1 >= a.stop_after && step + 1 < cfg.train.steps;
    double stop = (g_stop_requested || planned_stop) ? 1 : 0;
    if (Status s = world.all_reduce(&stop, 1, exec::ReduceOp::kMax); !s.is_ok()) return say(s);
    if (checkpointer) {
      const int64_t done = step + 1;
      const bool full = stop > 0 || (a.save_every > 0 && done % a.save_every == 0) || done == cfg.train.steps;
      const bool light = !full && a.light_every > 0 && done % a.light_every == 0;
      if (full || light) {
        // The training thread's stall: the snapshot copy, plus waiting for the
        // previous save still in flight.
        auto t0 = std::chrono::steady_clock::now();
        if (Status s = save(done, light); !s.is_ok()) return say(s);
        ckpt_stall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    if (stop > 0) {
      if (checkpointer) {
        if (Status s = checkpointer->wait(); !s.is_ok()) return say(s);
      }
      if (lead)
        std::fprintf(stderr, "loom execute: stopped %s after step %lld%s\n", planned_stop ? "as asked" : "by a signal",
                     (long long)step + 1, checkpointer ? "; checkpoint saved, continue with --resume latest" : "");
      return planned_stop ? 0 : 143;
    }
  }
  if (checkpointer) {
    if (Status s = checkpointer->wait(); !s.is_ok()) return say(s);
    if (lead && !a.quiet) std::printf("checkpoint stall: %.3f s in total over the run\n", ckpt_stall_s);
  }
  rec.checkpoint_stall_s = ckpt_stall_s;
  // Phases of the critical rank: each rank's means; the rank with the largest
  // compute (forward + backward) wins.
  double n = double(std::max<int64_t>(1, measured));
  const size_t rank = size_t(world.rank()), ranks = size_t(world.size());
  std::vector<double> all(kNumPhases * ranks, 0.0), mem(ranks, 0.0);
  const PhaseArray mine = flatten(sum / n);
  std::copy(mine.begin(), mine.end(), all.begin() + ptrdiff_t(rank * kNumPhases));
  mem[rank] = double(peak_mem);
  if (Status s = world.all_reduce(all.data(), all.size()); !s.is_ok()) return say(s);
  if (Status s = world.all_reduce(mem.data(), mem.size()); !s.is_ok()) return say(s);
  std::vector<StepPhases> per_rank(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    PhaseArray slot;
    std::copy_n(all.begin() + ptrdiff_t(r * kNumPhases), kNumPhases, slot.begin());
    per_rank[r] = unflatten(slot);
  }
  size_t crit = 0;
  for (size_t r = 1; r < ranks; ++r)
    if (per_rank[r].compute_s() > per_rank[crit].compute_s()) crit = r;
  rec.step_time_s = measured ? time_sum / n : (rec.step_times_s.empty() ? 0 : rec.step_times_s.back());
  {
    std::vector<double> t(rec.step_times_s.begin() + std::min<ptrdiff_t>(rec.warmup_steps, ptrdiff_t(rec.step_times_s.size())),
                          rec.step_times_s.end());
    std::sort(t.begin(), t.end());
    rec.step_time_median_s = t.empty() ? rec.step_time_s
                                       : (t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]));
  }
  rec.phases = per_rank[crit];
  rec.tokens_per_s = rec.step_time_s > 0 ? tokens / rec.step_time_s : 0;
  rec.model_tflops_per_gpu = rec.tokens_per_s * palm / world.size() / 1e12;
  rec.mfu = rec.tokens_per_s * palm / (world.size() * peak);
  rec.peak_memory_bytes = mem;
  if (!a.trace.empty()) {
    if (Status s = write_merged_trace(world, (*trainer)->last_step_events(), a.trace, rec.plan_hash,
                                      program_hash(plan->program_config()));
        !s.is_ok())
      return say(s);
  }
  if (!lead) return 0;
  if (!a.record.empty()) {
    if (Status s = write_text_file(a.record, run_record_to_json(rec)); !s.is_ok()) return fail("execute", s);
  }
  std::printf("\n%s", format_comparison(*plan, rec).c_str());
  if (profiler) {
    const auto rows = profiler->report();
    if (a.profile_ops) std::printf("\n%s", exec::format_op_profile(rows, profiler->steps()).c_str());
    if (!a.profile_ops_json.empty())
      if (Status s = write_text_file(a.profile_ops_json, exec::op_profile_json(rows, profiler->steps())); !s.is_ok())
        return fail("execute", s);
  }
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
