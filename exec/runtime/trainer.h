// Trainer: runs training steps of one rank under a plan's layout by walking
// the same Program the simulator times (core/program.h) and dispatching each
// op to a module: forward / backward of model chunks (exec/model/chunk.h, in
// the program's parts), pipeline send / recv (exec/runtime/pipeline.h),
// gradient syncs and parameter gathers of the ZeRO stage
// (exec/runtime/data_parallel.h), and the optimizer step
// (exec/runtime/optimizer.h: AdamW, warm-up + cosine LR, global-norm
// clipping across all shards, fp16 loss scaling).
//
// Every rank of the world constructs a Trainer with the same config; the
// layout's groups are split from `world`. Losses are reported identically on
// every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/model_spec.h"
#include "core/phases.h"
#include "core/program.h"
#include "core/train_spec.h"
#include "core/trace.h"
#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"
#include "exec/model/chunk.h"
#include "exec/runtime/loss_scaler.h"
#include "exec/runtime/optimizer.h"
#include "exec/runtime/token_source.h"

namespace loom::ckpt {
struct SaveRequest;
class CheckpointReader;
}  // namespace loom::ckpt

namespace loom::exec {
class Trainer;
// What of a valid layout Loom's executor does not run (Megatron's recompute
// modules): kUnsupported naming the field and the way out; checked before a
// run asks for ranks.
Status executor_runs_layout(const Layout& layout);
Status snapshot_trainer(Trainer& trainer, int64_t next_step, bool light, ckpt::SaveRequest* out);
Status restore_trainer(Trainer& trainer, const ckpt::CheckpointReader& reader, int64_t* next_step);
}  // namespace loom::exec

namespace loom::exec {

struct TrainerConfig {
  ModelSpec model;
  TrainSpec train;
  Layout layout;
  int grad_buckets = kDefaultGradBuckets;  // the plan's (Plan::grad_buckets): the program it predicted
  bool record_trace = false;
  // Where the math runs: null = a CPU backend of the trainer's own. A device
  // backend (CUDA) must outlive the trainer.
  ComputeBackend* backend = nullptr;
  // The communicator over the same ranks as `world` that moves the backend's
  // buffers (NCCL for CUDA); null = `world` itself. The layout's groups are
  // split from it; host scalars (loss, norm, step time) still go over `world`.
  Communicator* device_world = nullptr;
  // Dynamic loss scaling, used when the backend computes in fp16.
  LossScalerOptions loss_scaling;
};

struct StepResult {
  int64_t step = 0;
  double loss = 0;        // mean token loss of the global batch
  double lr = 0;
  double grad_norm = 0;   // before clipping (infinite on a step skipped for fp16 overflow)
  bool skipped = false;   // fp16: the gradients overflowed, no update was made
  double loss_scale = 1;  // the loss scale this step ran with (fp16), else 1
  double step_time_s = 0; // max over ranks
  // MoE: the load-balancing and z-losses added to the objective (summed over
  // the MoE layers, averaged over the step's micro-batches), and the token
  // copies dropped for capacity.
  double moe_aux_loss = 0, moe_z_loss = 0;
  int64_t moe_dropped = 0;
  double moe_max_load = 0;  // the busiest EP rank's expert rows over the balanced share (max over layers)
  // This rank's time per phase (core/phases.h says what each holds on the
  // executor's side): forward and backward ops, pipeline send/recv, DP syncs,
  // gathers and waits for them, the optimizer op less its waits, reading the
  // step's samples. The TP collectives run inside forward/backward and are
  // not timed apart (tp_comm_exposed_s is kNotMeasured).
  StepPhases phases;
  size_t peak_memory_bytes = 0;
  MemoryBreakdown peak_memory_breakdown{};  // what was live at that peak, by class
};

class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> create(Communicator* world, const TrainerConfig& cfg, TokenSource* data);
  ~Trainer();

  Result<StepResult> step(int64_t step);

  const RankCoords& coords() const { return coords_; }
  int stage() const { return coords_.pp; }
  // Measured op timings of the last step (program op ids), for the trace.
  const std::vector<TraceEvent>& last_step_events() const { return events_; }
  // Flat parameters of this rank (for tests).
  const ParamStore& params() const { return *params_; }
  double lr_at(int64_t step) const;

  struct Impl;  // exec/runtime/trainer_impl.h, private to exec/runtime

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  Status run_step(int64_t step, StepResult* out);
  // Checkpoints reach the state through these (exec/runtime/trainer_checkpoint.h).
  friend Status snapshot_trainer(Trainer& trainer, int64_t next_step, bool light, ckpt::SaveRequest* out);
  friend Status restore_trainer(Trainer& trainer, const ckpt::CheckpointReader& reader, int64_t* next_step);
  std::unique_ptr<Impl> impl_;
  RankCoords coords_;
  ParamStore* params_ = nullptr;
  std::vector<TraceEvent> events_;
};

}  // namespace loom::exec
