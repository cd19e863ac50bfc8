// The optimizer step of one rank: the global gradient norm over every rank's
// owned elements, clipping, fp16 dynamic loss scaling, and AdamW over the
// elements this rank owns (all of them, or its ZeRO shards: the sharding's
// arithmetic comes from DataParallel). Learning rate: linear warm-up, then
// cosine or linear decay to min_lr (or constant).
#pragma once

#include <cstdint>
#include <functional>

#include "core/train_spec.h"
#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"
#include "exec/model/params.h"
#include "exec/runtime/data_parallel.h"
#include "exec/runtime/loss_scaler.h"

namespace loom::exec {

// Learning rate at `step` (0-based): linear warm-up, then cosine or linear
// decay to min_lr at train.steps (constant: lr).
double lr_schedule(const TrainSpec& train, int64_t step);

struct OptimizerResult {
  double grad_norm = 0;  // before clipping; infinite on a step skipped for fp16 overflow
  double lr = 0;
  bool skipped = false;  // fp16: the gradients overflowed, no update was made
  // Seconds in the gradient norm's all-reduce over the world: mostly waiting
  // for the ranks still in their last backward (the other pipeline stages),
  // which the trainer counts as pipeline (or DP) wait, not optimizer time.
  double norm_sync_s = 0;
};

class Optimizer {
 public:
  // `counts(p)`: whether this rank's copy of p enters the global norm (each
  // element must count once over all ranks: TP-replicated parameters on TP
  // rank 0 only, a tied embedding's second copy not at all; DP replicas are
  // handled through the sharding). `world` sums the norm; `embedding_pair`
  // (may be null) sums the gradients of the tied embedding's two copies.
  Optimizer(const TrainSpec& train, const LossScalerOptions& scaling_options, bool scaling, ComputeBackend* backend,
            ParamStore* params, DataParallel* dp, Communicator* world, Communicator* embedding_pair,
            std::function<bool(const ParamInfo&)> counts);

  // Allocates the Adam moments (zeros) for the sharding's state.
  void allocate();
  // The loss scale the next step's backward runs with (1 without scaling).
  double loss_scale() const { return scaling_ ? scaler_.scale() : 1.0; }
  Result<OptimizerResult> step(int64_t step);

  // State for checkpoints.
  float* exp_avg() const { return m_.f32(); }
  float* exp_avg_sq() const { return v_.f32(); }
  int64_t adam_step() const { return adam_step_; }
  void set_adam_step(int64_t s) { adam_step_ = s; }
  bool scaling() const { return scaling_; }
  const LossScaler& scaler() const { return scaler_; }
  LossScaler& scaler() { return scaler_; }

 private:
  TrainSpec train_;
  LossScalerOptions scaling_options_;
  bool scaling_;
  LossScaler scaler_;
  ComputeBackend* backend_;
  ParamStore* params_;
  DataParallel* dp_;
  Communicator* world_;
  Communicator* emb_;
  std::function<bool(const ParamInfo&)> counts_;
  DeviceBuffer m_, v_;
  // The step in a handful of launches (AdamwMulti, AddSumSquaresMulti) over
  // tables built once in allocate(); LOOM_MULTI_TENSOR=0 makes one launch per
  // parameter instead (the A/B switch).
  bool multi_tensor_ = true;
  struct SegmentTable {
    DeviceBuffer table;  // int64 entries in the backend's memory
    int64_t count = 0, max_n = 0, total = 0;
    const int64_t* data() const { return reinterpret_cast<const int64_t*>(table.f32()); }
  };
  SegmentTable adam_table_, norm_table_;
  int64_t adam_step_ = 0;
};

}  // namespace loom::exec
