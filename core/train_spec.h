// TrainSpec: what is trained, independent of how it is laid out.
#pragma once

#include <cstdint>
#include <string>

#include "core/hw_profile.h"
#include "core/status.h"

namespace loom {

enum class LrSchedule { kConstant, kCosine, kLinear };

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
  int64_t tokens_per_step() const { return global_batch * seq_len; }
};

// Checks sizes are positive and the optimizer is known.
Status validate_train_spec(const TrainSpec& train);

}  // namespace loom
