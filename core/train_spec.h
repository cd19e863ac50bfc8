// TrainSpec: what is trained, independent of how it is laid out.
#pragma once

#include <cstdint>
#include <string>

#include "core/hw_profile.h"
#include "core/status.h"

namespace loom {

enum class LrSchedule { kConstant, kCosine, kLinear };

// The element type of the data-parallel gradient reduction (`loom plan
// --grad-reduce`): fp32 (the gradients as kept), bf16 (2 bytes, round to
// nearest even) or fp8 (E4M3, 1 byte, one fp32 scale per block). Each rank
// accumulates the pieces it receives in fp32, so rounding does not compound
// across ranks (docs/executor.md, "Compressed gradient reduction").
enum class GradReduce { kFp32, kBf16, kFp8 };
const char* grad_reduce_name(GradReduce g);
Result<GradReduce> parse_grad_reduce(const std::string& text);
inline double grad_reduce_element_bytes(GradReduce g) {
  return g == GradReduce::kFp32 ? 4.0 : g == GradReduce::kBf16 ? 2.0 : 1.0;
}

// The optimizer steps `loom execute` runs, and `--export` writes, when the
// plan names none (`loom plan --steps 0`).
inline constexpr int64_t kDefaultTrainSteps = 20;

struct TrainSpec {
  int64_t global_batch = 0;  // sequences per optimizer step over all DP ranks (the kernels' B is the micro-batch)
  int64_t seq_len = 0;       // tokens per sequence (s)
  Precision precision = Precision::kBf16;
  std::string optimizer = "adamw";
  int64_t steps = 0;         // optimizer steps to run (executor)
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 0;
  LrSchedule lr_schedule = LrSchedule::kCosine;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;    // global-norm clipping; 0 = off
  uint64_t seed = 1234;
  GradReduce grad_reduce = GradReduce::kFp32;
  // Mixture-of-experts training (Megatron's --moe-aux-loss-coeff,
  // --moe-z-loss-coeff, --moe-expert-capacity-factor): the load-balancing
  // loss coefficient (loom plan defaults it to the config's
  // router_aux_loss_coef, else 0, Megatron's default), the router z-loss
  // coefficient (0: off), the capacity factor (0: dropless).
  double moe_aux_loss_coeff = 0;
  double moe_z_loss_coeff = 0;
  double moe_capacity_factor = 0;
  int64_t tokens_per_step() const { return global_batch * seq_len; }
};

// Checks sizes are positive and the optimizer is known.
Status validate_train_spec(const TrainSpec& train);

}  // namespace loom
