#include "sim/plan_request.h"

namespace loom {

Result<TrainSpec> make_train_spec(const PlanRequest& req, const HwProfile& hw) {
  TrainSpec train;
  train.global_batch = req.global_batch;
  train.seq_len = req.seq;
  train.steps = req.steps;
  train.lr = req.lr;
  train.min_lr = req.lr / 10;
  train.warmup_steps = req.warmup;
  train.seed = req.seed;
  LOOM_ASSIGN_OR_RETURN(train.precision, parse_precision(req.precision));
  LOOM_RETURN_IF_ERROR(validate_train_spec(train));
  if (req.gpus < 1) return invalid_argument("--gpus=" + std::to_string(req.gpus) + " must be >= 1");
  if (req.dropout < -1 || req.dropout > 1)
    return invalid_argument("--dropout " + std::to_string(req.dropout) +
                            " must be -1 (from the model family), 0 (off) or 1 (on)");
  if (req.grad_buckets < 1 || req.grad_buckets > 32767)
    return invalid_argument("--grad-buckets " + std::to_string(req.grad_buckets) +
                            ": use 1 to 32767 gradient buckets per model chunk");
  Fp8Scaling scaling;
  if (!parse_fp8_scaling(req.fp8_scaling, &scaling))
    return invalid_argument("--fp8-scaling " + req.fp8_scaling +
                            ": use delayed (amax history, Transformer Engine's DelayedScaling) or current "
                            "(per-tensor amax each step: Float8CurrentScaling, torchao tensorwise)");
  if (train.precision == Precision::kFp8 && hw.accel.peak_fp8_flops <= 0)
    return invalid_argument("--precision fp8: " + hw.name + " (" + hw.accel.name + ") has no fp8 tensor cores; use bf16");
  return train;
}

SimOptions make_sim_options(const PlanRequest& req, const HwProfile& hw) {
  SimOptions opt;
  opt.flash_attention = req.flash_attention;
  opt.fp32_main_grads = req.fp32_main_grads;
  opt.tp_async_backward = req.tp_async_backward;
  opt.dropout = req.dropout;
  parse_fp8_scaling(req.fp8_scaling, &opt.fp8_scaling);  // checked by make_train_spec
  opt.fp8_attention = req.fp8_attention;
  opt.grad_buckets = req.grad_buckets;
  if (hw.is_cpu()) {
    // CPU ranks: no device context or allocator pool to reserve for.
    opt.runtime_reserve_bytes = 0;
    opt.flash_attention = true;  // the CPU attention kernel keeps no s*s scores
  }
  return opt;
}

}  // namespace loom
