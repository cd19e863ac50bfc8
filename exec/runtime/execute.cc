// execute_plan(): the stages of one rank's run (execute.h), and
// execute_local(): ranks as threads over loopback TCP.
#include "exec/runtime/execute.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "core/json_util.h"
#include "core/output_file.h"
#include "core/resources.h"
#include "core/trace.h"
#include "exec/backend/cpu_ops.h"
#include "exec/checkpoint/checkpoint.h"
#include "exec/comm/tcp_communicator.h"
#include "exec/runtime/compute_threads.h"
#include "exec/runtime/dataset_source.h"
#include "exec/runtime/devices.h"
#include "exec/runtime/memory_check.h"
#include "exec/runtime/trainer.h"
#include "sim/evaluate.h"
#include "sim/report.h"
#include "sim/simulate.h"
#include "exec/runtime/trainer_checkpoint.h"

namespace loom::exec {

namespace {

// What one run holds between its stages.
struct Session {
  const ExecuteOptions& o;
  Communicator& world;
  Plan plan;
  TrainerConfig cfg;
  std::unique_ptr<TokenSource> data;
  Devices devices;
  KernelProfiler* profiler = nullptr;
  int compute_threads = 1;  // per rank, as run
  std::unique_ptr<Trainer> trainer;
  int64_t start_step = 0;
  std::unique_ptr<ckpt::Checkpointer> checkpointer;
  std::unique_ptr<std::ofstream> metrics_file;
  std::ostream* metrics = nullptr;

  bool lead() const { return world.rank() == 0; }
  // Rank 0's progress line.
  void say(const char* fmt, ...) const __attribute__((format(printf, 2, 3))) {
    if (!lead()) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (o.print) {
      o.print(buf);
    } else {
      std::printf("%s\n", buf);
      std::fflush(stdout);
    }
  }
};

// Every rank's events of the last step, merged into one Chrome trace by rank 0
// (ranks write part files next to the target; one host or a shared file system).
// `program_hash` names the program the ops belong to (`loom compare --ops`).
Status write_merged_trace(Communicator& world, const std::vector<TraceEvent>& mine, const std::string& path,
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
Status check_outputs(const ExecuteOptions& o) {
  const std::pair<const char*, const std::string*> files[] = {
      {"--record", &o.record}, {"--trace", &o.trace}, {"--metrics", &o.metrics},
      {"--profile-ops-json", &o.profile_ops_json}, {"--plan-out", &o.plan_out}};
  for (const auto& [opt, path] : files) {
    if (path->empty()) continue;
    LOOM_RETURN_IF_ERROR(check_output_path(*path, opt));
    LOOM_RETURN_IF_ERROR(refuse_same_file(*path, o.plan_path, opt, "plan"));
    LOOM_RETURN_IF_ERROR(refuse_same_file(*path, o.data, opt, "--data file"));
  }
  if (!o.ckpt_dir.empty()) LOOM_RETURN_IF_ERROR(check_output_dir(o.ckpt_dir, "--ckpt-dir"));
  return Status::ok();
}

// --scale runs another model than the plan's: the plan's layout is evaluated
// again for the scaled model on the plan's hardware and simulator options, so
// that the prediction, the run record's plan hash and the comparison at the
// end are the scaled model's (--plan-out writes that plan for `loom compare`).
Status replan_scaled(Session& s) {
  SimOptions opt;
  if (!s.plan.sim_options_json.empty()) {
    LOOM_ASSIGN_OR_RETURN(opt, parse_sim_options(s.plan.sim_options_json));
  }
  Evaluator eval(s.cfg.model, s.plan.hw, s.plan.train, opt);
  Result<SimResult> r = simulate_layout(eval, s.plan.layout);
  if (!r.is_ok()) return r.status().with_context("re-planning the plan's layout for the model scaled by --scale");
  Plan scaled = make_plan(eval, *r, s.plan.world_size);
  scaled.created_by = "loom execute --scale " + s.o.scale;
  s.say("model: %s scaled by --scale %s; the plan's layout re-planned for it on %s: predicted step %s "
        "(plan hash %s%s%s)",
        s.plan.model.name.c_str(), s.o.scale.c_str(), s.plan.hw.name.c_str(),
        human_seconds(r->figures.step_time_s).c_str(), scaled.plan_hash().c_str(),
        s.o.plan_out.empty() ? "; --plan-out writes it" : ", written to ", s.o.plan_out.c_str());
  if (!s.o.plan_out.empty() && s.lead()) LOOM_RETURN_IF_ERROR(save_plan(scaled, s.o.plan_out));
  s.plan = std::move(scaled);
  return Status::ok();
}

// The checks every rank makes before allocating anything: the plan, the
// launch against it, the outputs, the (scaled) model and its host memory.
Status read_plan(Session& s) {
  const ExecuteOptions& o = s.o;
  LOOM_ASSIGN_OR_RETURN(s.plan, load_plan(o.plan_path));
  if (!s.plan.hash_checked)
    s.say("notice: %s has no plan_hash, so nothing checks that its model, train spec and layout are the ones its "
          "prediction was made for; the measured-vs-predicted comparison may compare another run (re-run `loom plan` "
          "to get a checked plan)",
          o.plan_path.c_str());
  LOOM_RETURN_IF_ERROR(executor_runs_layout(s.plan.layout));
  if (s.plan.world_size != s.world.size())
    return invalid_argument("the plan is for " + std::to_string(s.plan.world_size) + " ranks but " +
                            std::to_string(s.world.size()) + " were launched; run `mpirun -np " +
                            std::to_string(s.plan.world_size) + " loom execute " + o.plan_path + "`");
  LOOM_RETURN_IF_ERROR(check_outputs(o));
  TrainerConfig& cfg = s.cfg;
  cfg.model = s.plan.model;
  cfg.train = s.plan.train;
  cfg.layout = s.plan.layout;
  cfg.grad_buckets = s.plan.grad_buckets;  // the program the prediction timed
  cfg.record_trace = !o.trace.empty();
  if (!o.scale.empty()) {
    LOOM_ASSIGN_OR_RETURN(ModelScale scale, parse_model_scale(o.scale));
    LOOM_ASSIGN_OR_RETURN(cfg.model, scale_model(s.plan.model, scale));
  }
  if (o.steps >= 0) cfg.train.steps = o.steps;
  if (cfg.train.steps <= 0) cfg.train.steps = kDefaultTrainSteps;
  LOOM_RETURN_IF_ERROR(validate_layout(cfg.layout, cfg.model, cfg.train, s.world.size()));
  // The (scaled) model must fit this host before anything is allocated (CUDA: once the device is open).
  if (o.backend == "cpu")
    LOOM_RETURN_IF_ERROR(check_host_memory(s.plan, cfg.model, cfg.train, cfg.layout, s.world.rank()));
  if (!o.scale.empty()) LOOM_RETURN_IF_ERROR(replan_scaled(s));
  return Status::ok();
}

// Whether any rank failed the checks every rank makes before allocating:
// every rank learns it at once (a collective), so a problem met by some ranks
// only (a file missing on one node) ends the whole job together with one
// exit code, reported once (by the lowest failing rank).
Status agree_on_failure(Communicator& world, const Status& mine, ExecuteFailure* failure) {
  double worst = status_exit_code(mine.code()), first = mine.is_ok() ? 1e18 : double(world.rank());
  LOOM_RETURN_IF_ERROR(world.all_reduce(&worst, 1, ReduceOp::kMax));
  LOOM_RETURN_IF_ERROR(world.all_reduce(&first, 1, ReduceOp::kMin));
  if (worst == 0) return Status::ok();
  failure->together = true;
  failure->report = !mine.is_ok() && double(world.rank()) == first;
  if (failure->report) return world.rank() == 0 ? mine : mine.with_context("rank " + std::to_string(world.rank()));
  // Not this rank's failure (or not the one reported): the same exit code.
  if (!mine.is_ok() && status_exit_code(mine.code()) == int(worst)) return mine;
  return Status(worst == 2 ? StatusCode::kInvalidArgument : StatusCode::kRemoteError,
                "rank " + std::to_string(int64_t(first)) + " failed the checks before the run");
}

// Data, compute threads, the device and its communicator, the profiler, then
// the trainer (which allocates).
Status open_trainer(Session& s) {
  const ExecuteOptions& o = s.o;
  TrainerConfig& cfg = s.cfg;
  DataSpecOptions dopt;
  dopt.seq_len = cfg.train.seq_len;
  dopt.global_batch = cfg.train.global_batch;
  dopt.dp_rank = RankGrid(cfg.layout).coords(s.world.rank()).dp;
  dopt.dp_size = cfg.layout.dp;
  dopt.seed = cfg.train.seed;
  dopt.model_vocab = cfg.model.vocab;
  dopt.cache_dir = o.cache_dir;
  dopt.s3 = o.s3;
  std::string data_spec = o.data;
  if (data_spec.empty()) {
    auto corpus = default_corpus();
    if (!corpus.is_ok()) return corpus.status().with_context("--data not given");
    data_spec = *corpus;
    if (!o.quiet) s.say("data: %s (the sample corpus; --data names yours)", data_spec.c_str());
  }
  LOOM_ASSIGN_OR_RETURN(s.data, open_training_data(data_spec, dopt));
  LOOM_ASSIGN_OR_RETURN(ComputeThreads threads, compute_threads(o.threads, detect_launch_env().local_world));
  cpu::set_num_threads(threads.threads);
  s.compute_threads = threads.threads;
  if (!o.quiet) s.say("threads: %s", threads.describe().c_str());
  if (s.lead() && !threads.warning.empty()) std::fprintf(stderr, "loom execute: warning: %s\n", threads.warning.c_str());
  DeviceRequest dreq;
  dreq.backend = o.backend;
  dreq.precision = o.precision;
  dreq.device = o.device;
  dreq.timeout_s = o.timeout_s;
  LOOM_ASSIGN_OR_RETURN(s.devices, open_devices(s.world, dreq, cfg.train.precision));
  // The per-op profiler in front of the backend's kernel table (the CPU
  // backend is made here instead of by the trainer so it can be wrapped).
  if (o.profile_ops || !o.profile_ops_json.empty()) {
    if (!s.devices.backend) s.devices.backend = make_cpu_backend();
    LOOM_ASSIGN_OR_RETURN(s.profiler, install_kernel_profiler(*s.devices.backend));
  }
  cfg.backend = s.devices.backend.get();
  cfg.device_world = s.devices.world.get();
  if (!o.quiet) s.say("backend: %s", s.devices.description.c_str());
  if (!o.quiet && cfg.train.grad_reduce != GradReduce::kFp32 && cfg.layout.dp > 1)
    s.say("gradient reduction: %s on the wire, received pieces summed in fp32 (the plan's --grad-reduce)",
          grad_reduce_name(cfg.train.grad_reduce));
  if (s.devices.precision != cfg.train.precision && s.lead())
    std::fprintf(stderr,
                 "loom execute: note: the plan is %s but the backend computes in %s: its memory and times are not "
                 "the ones the plan predicts (plan with --precision %s for this backend)\n",
                 precision_name(cfg.train.precision), precision_name(s.devices.precision),
                 precision_name(s.devices.precision));
  size_t free_b = 0, total_b = 0;  // CUDA: this rank's stage against its device's free memory
  if (device_memory(s.devices, &free_b, &total_b))
    LOOM_RETURN_IF_ERROR(check_device_memory(s.plan, cfg.model, cfg.train, cfg.layout, s.world.rank(),
                                             s.devices.precision, free_b, total_b,
                                             "GPU " + std::to_string(s.devices.cuda_device) + "'s free memory"));
  LOOM_ASSIGN_OR_RETURN(s.trainer, Trainer::create(&s.world, cfg, s.data.get()));
  return Status::ok();
}

// What a resume continues with that the checkpoint's run did not have, said
// aloud (a run may change them on purpose: a longer sequence for a
// long-context phase, a new data order): the seed, from which the data order
// derives, and the tokens a step takes (global batch x sequence; the data
// cursor continues by samples).
Status say_what_the_resume_changes(const Session& s, const ckpt::CheckpointReader& r) {
  LOOM_ASSIGN_OR_RETURN(std::string text, r.training_state(0));
  const Json st = Json::parse(text, nullptr, false);
  if (st.is_discarded() || !st.is_object()) return Status::ok();  // restore_trainer has read it already
  const TrainSpec& t = s.cfg.train;
  if (st.contains("rng") && st["rng"].is_object() && st["rng"].contains("seed") &&
      st["rng"]["seed"].is_number_unsigned() && st["rng"]["seed"].get<uint64_t>() != t.seed)
    s.say("notice: the checkpoint's run used seed %llu, this one %llu: the data order from here on is not the one "
          "that run would have seen (a plan made with --seed %llu keeps it)",
          (unsigned long long)st["rng"]["seed"].get<uint64_t>(), (unsigned long long)t.seed,
          (unsigned long long)st["rng"]["seed"].get<uint64_t>());
  if (st.contains("consumed_tokens") && st["consumed_tokens"].is_number_integer() && s.start_step > 0) {
    const int64_t was = st["consumed_tokens"].get<int64_t>() / s.start_step;
    if (was != t.tokens_per_step())
      s.say("notice: the checkpoint's run took %lld tokens a step, this one %lld (global batch %lld x sequence %lld): "
            "the data continues by sample count, cut at the new sequence length",
            (long long)was, (long long)t.tokens_per_step(), (long long)t.global_batch, (long long)t.seq_len);
  }
  return Status::ok();
}

// A resume (any layout's checkpoint of this model; every rank reads its
// slices), then the checkpointer of ckpt_dir.
Status open_checkpoints(Session& s) {
  const ExecuteOptions& o = s.o;
  if (!o.resume.empty()) {
    std::string where = o.resume;
    if (where == "latest") {
      if (o.ckpt_dir.empty()) return invalid_argument("--resume latest needs --ckpt-dir DIR");
      where = o.ckpt_dir;
    }
    auto reader = ckpt::CheckpointReader::open(where);
    if (!reader.is_ok()) return reader.status().with_context("--resume " + o.resume);
    LOOM_RETURN_IF_ERROR(restore_trainer(*s.trainer, **reader, &s.start_step));
    if (s.start_step >= s.cfg.train.steps)
      return invalid_argument("--resume " + o.resume + ": the checkpoint is at step " + std::to_string(s.start_step) +
                              " and the run ends at step " + std::to_string(s.cfg.train.steps) +
                              ": nothing left to train; raise --steps above " + std::to_string(s.start_step));
    s.say("resumed from %s at step %lld", (*reader)->path().c_str(), (long long)s.start_step);
    LOOM_RETURN_IF_ERROR(say_what_the_resume_changes(s, **reader));
    if (s.data && !s.data->resume_notice().empty()) s.say("notice: %s", s.data->resume_notice().c_str());
  }
  if (o.ckpt_dir.empty()) return Status::ok();
  ckpt::CheckpointOptions co;
  co.dir = o.ckpt_dir;
  co.async = !o.sync_save;
  co.keep_last = o.keep_last;
  co.keep_every = o.keep_every;
  OrderedJson meta;
  meta["model"] = OrderedJson::parse(model_spec_to_json(s.cfg.model));
  meta["model_name"] = s.cfg.model.name;
  meta["layout"] = OrderedJson::parse(layout_to_json(s.cfg.layout));
  meta["train"] = OrderedJson::parse(train_spec_to_json(s.cfg.train));
  meta["plan_hash"] = s.plan.plan_hash();
  LOOM_ASSIGN_OR_RETURN(s.checkpointer,
                        ckpt::Checkpointer::create(co, s.world.rank(), s.world.size(), meta.dump()));
  return Status::ok();
}

// Metrics stream line by line (no temporary + rename) from rank 0: to the
// symlink's target, or stdout for `-`; a failed write ends the run (a full disk).
Status open_metrics(Session& s) {
  if (!s.lead() || s.o.metrics.empty()) return Status::ok();
  if (is_stdout_path(s.o.metrics)) {
    s.metrics = &std::cout;
    return Status::ok();
  }
  LOOM_ASSIGN_OR_RETURN(std::string target, resolve_output_path(s.o.metrics, "--metrics"));
  s.metrics_file = std::make_unique<std::ofstream>(target);
  if (!*s.metrics_file) return write_error("open", s.o.metrics, errno);
  s.metrics = s.metrics_file.get();
  return Status::ok();
}

// Rank 0's line per step and its metrics record.
Status report_step(Session& s, const StepFigures& f) {
  const StepResult& r = *f.result;
  const bool fp16 = s.devices.precision == Precision::kFp16;
  const TrainSpec& t = s.plan.train;
  const bool moe = s.plan.model.is_moe();
  if (!s.o.quiet) {
    std::string extra;
    char buf[160];
    if (moe && t.moe_aux_loss_coeff > 0) {
      std::snprintf(buf, sizeof buf, " | lb loss %.5f", r.moe_aux_loss);
      extra += buf;
    }
    if (moe && t.moe_z_loss_coeff > 0) {
      std::snprintf(buf, sizeof buf, " | z loss %.5f", r.moe_z_loss);
      extra += buf;
    }
    if (moe && t.moe_capacity_factor > 0) extra += " | dropped " + std::to_string(r.moe_dropped);
    if (moe && s.plan.layout.ep > 1) {
      std::snprintf(buf, sizeof buf, " | load %.2f", r.moe_max_load);
      extra += buf;
    }
    if (fp16)
      extra += std::string(" | loss scale ") + std::to_string(int64_t(r.loss_scale)) +
               (r.skipped ? " | skipped: fp16 overflow" : "");
    s.say("step %4lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %.1f%%%s", (long long)f.step,
          (long long)f.steps, r.loss, r.lr, r.grad_norm, r.step_time_s * 1e3, f.tokens_per_s, 100 * f.mfu,
          extra.c_str());
  }
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
  // MoE: the router's losses (in the objective, not in "loss"), Megatron's
  // load_balancing_loss / z_loss, and the token copies dropped for capacity.
  if (moe) {
    j["load_balancing_loss"] = r.moe_aux_loss;
    j["z_loss"] = r.moe_z_loss;
    j["dropped_tokens"] = r.moe_dropped;
    j["expert_load_imbalance"] = r.moe_max_load;
  }
  if (fp16) {
    j["loss_scale"] = r.loss_scale;
    j["skipped"] = r.skipped;
  }
  *s.metrics << j.dump() << "\n";
  s.metrics->flush();
  if (!*s.metrics) return write_error("write", s.o.metrics, errno);
  return Status::ok();
}

// After the run: the merged trace (every rank), then rank 0's record and
// per-op profile.
Status write_outputs(Session& s, ExecuteResult& r) {
  if (!s.o.trace.empty())
    LOOM_RETURN_IF_ERROR(write_merged_trace(s.world, s.trainer->last_step_events(), s.o.trace, r.record.plan_hash,
                                            program_hash(s.plan.program_config())));
  if (!s.lead()) return Status::ok();
  if (!s.o.record.empty()) LOOM_RETURN_IF_ERROR(write_text_file(s.o.record, run_record_to_json(r.record)));
  if (s.profiler) {
    r.profile = s.profiler->report();
    r.profile_steps = s.profiler->steps();
    if (!s.o.profile_ops_json.empty())
      LOOM_RETURN_IF_ERROR(write_text_file(s.o.profile_ops_json, op_profile_json(r.profile, r.profile_steps)));
  }
  return Status::ok();
}

}  // namespace

Result<ExecuteResult> execute_plan(Communicator& world, const ExecuteOptions& options, ExecuteFailure* failure) {
  ExecuteFailure ignored;
  if (!failure) failure = &ignored;
  *failure = ExecuteFailure{};
  Session s{options, world};
  LOOM_RETURN_IF_ERROR(agree_on_failure(world, read_plan(s), failure));
  LOOM_RETURN_IF_ERROR(open_trainer(s));
  LOOM_RETURN_IF_ERROR(open_checkpoints(s));
  LOOM_RETURN_IF_ERROR(open_metrics(s));
  ExecuteResult r;
  RunRecord& rec = r.record;
  rec.loom_version = loom_version();
  rec.plan_hash = s.plan.plan_hash();
  rec.model_name = s.cfg.model.name;
  rec.model_config = model_spec_to_json(s.cfg.model);
  rec.hardware_name = s.plan.hw.name;
  rec.backend = s.devices.description;
  rec.layout = s.cfg.layout.to_string();
  rec.world_size = world.size();
  RunControl control;
  control.start_step = s.start_step;
  control.checkpointer = s.checkpointer.get();
  control.save_every = options.save_every;
  control.light_every = options.light_every;
  control.stop_after = options.stop_after;
  control.stop_requested = options.stop_requested;
  control.profiler = s.profiler;
  control.test_slowdown = options.test_slowdown;
  control.on_step = [&](const StepFigures& f) { return s.lead() ? report_step(s, f) : Status::ok(); };
  // MFU against the plan's hardware peak in the precision the run computes in;
  // on CPU ranks, the peak of the threads this rank runs (a profile measured
  // with 1 thread per rank and a run with 2 would read 200%).
  double peak = s.plan.hw.accel.peak_flops(s.devices.precision);
  if (options.backend == "cpu" && s.plan.hw.accel.cpu_threads > 0)
    peak *= double(s.compute_threads) / s.plan.hw.accel.cpu_threads;
  LOOM_ASSIGN_OR_RETURN(RunOutcome outcome,
                        drive_run(world, *s.trainer, s.cfg.train, s.cfg.model.model_flops_per_token_palm(s.cfg.train.seq_len),
                                  peak, control, &rec));
  r.end = outcome.end;
  r.steps_done = outcome.steps_done;
  r.checkpointing = s.checkpointer != nullptr;
  // Above 100% the denominator is wrong, not the run: the profile's peak is
  // below what this run's own FLOP rate proves the hardware does.
  if (rec.mfu > 1.0 && s.lead())
    std::fprintf(stderr,
                 "loom execute: warning: MFU %.0f%%: the hardware profile's peak (%.3g GFLOP/s per rank for %d "
                 "threads) is below what this run achieved (%.3g GFLOP/s); the profile was measured on a busy "
                 "machine or for other hardware: measure it again (`loom calibrate`, or plan again with --hw "
                 "cpu-local after deleting its cache under %s/hw)\n",
                 100 * rec.mfu, peak / 1e9, s.compute_threads, rec.mfu * peak / 1e9, user_cache_dir().c_str());
  if (outcome.end == RunEnd::kCompleted) {
    if (s.checkpointer && !options.quiet) s.say("checkpoint stall: %.3f s in total over the run", rec.checkpoint_stall_s);
    LOOM_RETURN_IF_ERROR(write_outputs(s, r));
  }
  r.plan = std::move(s.plan);
  return r;
}

namespace {

// A free TCP port on the loopback interface (the kernel's pick).
Result<int> free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status(StatusCode::kIoError, std::string("socket(): ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status(StatusCode::kIoError, std::string("no free loopback port: ") + std::strerror(err));
  return int(ntohs(a.sin_port));
}

}  // namespace

Result<ExecuteResult> execute_local(int ranks, const ExecuteOptions& options) {
  if (ranks < 1) return invalid_argument("ranks=" + std::to_string(ranks) + ": at least 1");
  LOOM_ASSIGN_OR_RETURN(int port, free_loopback_port());
  std::vector<Result<ExecuteResult>> results(size_t(ranks), Status(StatusCode::kInternal, "rank did not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      TcpOptions t;
      t.rank = r;
      t.world = ranks;
      t.master_addr = "127.0.0.1";
      t.master_port = port;
      t.timeout_s = options.timeout_s;
      t.rendezvous_timeout_s = 60;
      t.job_id = "loom-local-" + std::to_string(port);
      auto world = tcp_world(t);
      if (!world.is_ok()) {
        results[size_t(r)] = world.status().with_context("rank " + std::to_string(r));
        return;
      }
      auto res = execute_plan(**world, options);
      // A rank that fails leaves its peers waiting in a collective: ending its
      // communicator (destroying it) fails theirs at once.
      results[size_t(r)] = res.is_ok() ? std::move(res) : Result<ExecuteResult>(res.status().with_context("rank " + std::to_string(r)));
    });
  }
  for (std::thread& t : threads) t.join();
  // The first failing rank's error; a peer's "closed its connection" only when
  // nothing better is known.
  const Status* remote = nullptr;
  for (const auto& res : results) {
    if (res.is_ok()) continue;
    if (res.status().code() != StatusCode::kRemoteError) return res.status();
    if (!remote) remote = &res.status();
  }
  if (remote) return *remote;
  return std::move(results[0]);
}

}  // namespace loom::exec
