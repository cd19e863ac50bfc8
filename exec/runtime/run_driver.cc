#include "exec/runtime/run_driver.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/phases.h"
#include "core/throughput.h"
#include "exec/runtime/trainer_checkpoint.h"

namespace loom::exec {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The critical rank's phases: every rank's means; the rank with the largest
// compute (forward + backward) wins. Peak memory of every rank, and what was
// live at it by class.
Status gather_figures(Communicator& world, const StepPhases& mean, size_t peak_mem, const MemoryBreakdown& at_peak,
                      RunRecord* rec) {
  const size_t rank = size_t(world.rank()), ranks = size_t(world.size());
  std::vector<double> all(kNumPhases * ranks, 0.0), mem(ranks, 0.0), classes(ranks * kNumMemoryClasses, 0.0);
  const PhaseArray mine = flatten(mean);
  std::copy(mine.begin(), mine.end(), all.begin() + ptrdiff_t(rank * kNumPhases));
  mem[rank] = double(peak_mem);
  std::copy(at_peak.begin(), at_peak.end(), classes.begin() + ptrdiff_t(rank * kNumMemoryClasses));
  LOOM_RETURN_IF_ERROR(world.all_reduce(all.data(), all.size()));
  LOOM_RETURN_IF_ERROR(world.all_reduce(mem.data(), mem.size()));
  LOOM_RETURN_IF_ERROR(world.all_reduce(classes.data(), classes.size()));
  rec->peak_memory_by_class.assign(ranks, MemoryBreakdown{});
  for (size_t r = 0; r < ranks; ++r)
    std::copy_n(classes.begin() + ptrdiff_t(r * kNumMemoryClasses), kNumMemoryClasses,
                rec->peak_memory_by_class[r].begin());
  std::vector<StepPhases> per_rank(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    PhaseArray slot;
    std::copy_n(all.begin() + ptrdiff_t(r * kNumPhases), kNumPhases, slot.begin());
    per_rank[r] = unflatten(slot);
  }
  size_t crit = 0;
  for (size_t r = 1; r < ranks; ++r)
    if (per_rank[r].compute_s() > per_rank[crit].compute_s()) crit = r;
  rec->phases = per_rank[crit];
  rec->peak_memory_bytes = mem;
  return Status::ok();
}

}  // namespace

Result<RunOutcome> drive_run(Communicator& world, Trainer& trainer, const TrainSpec& train,
                             double palm_flops_per_token, double peak, const RunControl& c, RunRecord* rec) {
  using Clock = std::chrono::steady_clock;
  const double tokens = double(train.tokens_per_step());
  const int64_t first = c.start_step, last = train.steps;
  rec->steps = last - first;
  rec->tokens_per_step = int64_t(tokens);
  rec->mfu_formula = kMfuFormula;
  rec->peak_flops_per_rank = peak;
  rec->warmup_steps = last - first > 3 ? 2 : 0;
  StepPhases sum;
  sum.tp_comm_exposed_s = kNotMeasured;  // what the trainer does not measure stays so
  double ckpt_stall_s = 0, time_sum = 0;
  int64_t measured = 0;
  size_t peak_mem = 0;
  MemoryBreakdown at_peak{};
  RunOutcome out;
  for (int64_t step = first; step < last; ++step) {
    LOOM_ASSIGN_OR_RETURN(StepResult r, trainer.step(step));
    if (c.profiler) {
      c.profiler->step_done();
      if (step - first + 1 == rec->warmup_steps) c.profiler->reset();  // the measured steps only
    }
    if (c.test_slowdown > 1.0) {
      // Test-only injected slowdown (tests/e2e/regress.sh proves `loom regress
      // check` catches it): every rank idles the same extra time, counted as
      // forward compute.
      const double extra = (c.test_slowdown - 1.0) * r.step_time_s;
      std::this_thread::sleep_for(std::chrono::duration<double>(extra));
      r.step_time_s += extra;
      r.phases.forward_s += extra;
    }
    rec->losses.push_back(r.loss);
    rec->step_times_s.push_back(r.step_time_s);
    if (r.peak_memory_bytes >= peak_mem) {
      peak_mem = r.peak_memory_bytes;
      at_peak = r.peak_memory_breakdown;
    }
    if (step - first >= rec->warmup_steps) {
      ++measured;
      time_sum += r.step_time_s;
      sum += r.phases;
    }
    const Throughput t = throughput(tokens, r.step_time_s, palm_flops_per_token, world.size(), peak);
    if (c.on_step) LOOM_RETURN_IF_ERROR(c.on_step(StepFigures{step + 1, last, &r, t.tokens_per_s, t.mfu}));
    // Checkpoints after step + 1 completed steps; a stop request on any rank
    // stops every rank after the same step, with a final save.
    const int64_t done = step + 1;
    const bool planned = c.stop_after > 0 && done >= c.stop_after && done < last;
    double stop = ((c.stop_requested && *c.stop_requested) || planned) ? 1 : 0;
    LOOM_RETURN_IF_ERROR(world.all_reduce(&stop, 1, ReduceOp::kMax));
    if (c.checkpointer) {
      const bool full = stop > 0 || (c.save_every > 0 && done % c.save_every == 0) || done == last;
      const bool light = !full && c.light_every > 0 && done % c.light_every == 0;
      if (full || light) {
        // The training thread's stall: the snapshot copy, plus waiting for the
        // previous save still in flight.
        const auto t0 = Clock::now();
        ckpt::SaveRequest req;
        LOOM_RETURN_IF_ERROR(snapshot_trainer(trainer, done, light, &req));
        LOOM_RETURN_IF_ERROR(c.checkpointer->save(std::move(req)));
        ckpt_stall_s += std::chrono::duration<double>(Clock::now() - t0).count();
      }
    }
    out.steps_done = done;
    if (stop > 0) {
      if (c.checkpointer) LOOM_RETURN_IF_ERROR(c.checkpointer->wait());
      out.end = planned ? RunEnd::kStoppedAsAsked : RunEnd::kStoppedBySignal;
      rec->checkpoint_stall_s = ckpt_stall_s;
      return out;
    }
  }
  if (c.checkpointer) LOOM_RETURN_IF_ERROR(c.checkpointer->wait());
  rec->checkpoint_stall_s = ckpt_stall_s;
  const double n = double(std::max<int64_t>(1, measured));
  LOOM_RETURN_IF_ERROR(gather_figures(world, sum / n, peak_mem, at_peak, rec));
  rec->step_time_s = measured ? time_sum / n : (rec->step_times_s.empty() ? 0 : rec->step_times_s.back());
  const auto from = rec->step_times_s.begin() + std::min<ptrdiff_t>(rec->warmup_steps, ptrdiff_t(rec->step_times_s.size()));
  rec->step_time_median_s = from == rec->step_times_s.end() ? rec->step_time_s
                                                            : median(std::vector<double>(from, rec->step_times_s.end()));
  const Throughput t = throughput(tokens, rec->step_time_s, palm_flops_per_token, world.size(), peak);
  rec->tokens_per_s = t.tokens_per_s;
  rec->model_tflops_per_gpu = t.model_tflops_per_rank;
  rec->mfu = t.mfu;
  return out;
}

}  // namespace loom::exec
