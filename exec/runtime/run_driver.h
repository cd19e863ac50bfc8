// The run driver: the step loop of a training run around a Trainer, the same
// for every caller (`loom execute`; tests/unit/exec/run_driver_test.cc in-process): steps
// from a start step to the train spec's last, the per-step figures, the
// checkpoint cadence, stopping on request (a signal on any rank, or a planned
// stop) with every rank stopping after the same step, and the run record's
// measured figures from the typed phases (core/phases.h) of the critical
// rank, with MFU from the simulator's formula (core/throughput.h).
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>

#include "core/run_record.h"
#include "exec/backend/kernel_profile.h"
#include "exec/checkpoint/checkpoint.h"
#include "exec/comm/communicator.h"
#include "exec/runtime/trainer.h"

namespace loom::exec {

// One finished step, on every rank.
struct StepFigures {
  int64_t step = 0;  // 1-based: steps done
  int64_t steps = 0;  // of the run's schedule
  const StepResult* result = nullptr;
  double tokens_per_s = 0;
  double mfu = 0;
};

struct RunControl {
  int64_t start_step = 0;  // 0, or where a resume continues
  // Checkpoints: null for none. A full one every `save_every` steps, at the
  // end and at a stop; a light one (training state only) every `light_every`.
  ckpt::Checkpointer* checkpointer = nullptr;
  int64_t save_every = 0, light_every = 0;
  // Stop after this many steps of the schedule (0: run to the end), keeping
  // the learning-rate schedule of all of them: an interruption on purpose.
  int64_t stop_after = 0;
  // Set (by a signal handler) to stop after the current step.
  const volatile std::sig_atomic_t* stop_requested = nullptr;
  // Times every kernel call; reset after the warm-up steps.
  KernelProfiler* profiler = nullptr;
  // Test only: every step takes this many times as long (counted as forward).
  double test_slowdown = 1.0;
  // After every step on every rank (printing, metrics); an error ends the run.
  std::function<Status(const StepFigures&)> on_step;
};

enum class RunEnd { kCompleted, kStoppedAsAsked, kStoppedBySignal };

struct RunOutcome {
  RunEnd end = RunEnd::kCompleted;
  int64_t steps_done = 0;  // of the schedule, when the run ended
};

// Runs trainer steps [control.start_step, train.steps) and fills the measured
// part of *record (losses, step times, the critical rank's phases, memory per
// rank, throughput, MFU against `peak_flops_per_rank`, checkpoint stall);
// identity fields (plan hash, model, layout) are the caller's. Collective:
// every rank calls it with the same control.
Result<RunOutcome> drive_run(Communicator& world, Trainer& trainer, const TrainSpec& train,
                             double palm_flops_per_token, double peak_flops_per_rank, const RunControl& control,
                             RunRecord* record);

}  // namespace loom::exec
