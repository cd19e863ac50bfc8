// Dynamic loss scaling for fp16 training (Micikevicius et al., "Mixed
// Precision Training", 2018; the rule of PyTorch's GradScaler and Megatron's
// DynamicGradScaler): the loss gradient is multiplied by `scale()` so small
// gradients survive fp16; a step whose gradients overflowed (a non-finite
// gradient norm) is skipped and the scale multiplied by `backoff`; after
// `growth_interval` finite steps in a row the scale is multiplied by `growth`.
// Thread-safety: a plain value.
#pragma once

#include <cstdint>

namespace loom::exec {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, GradScaler's default
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 1000;  // Megatron's loss-scale window
  double min_scale = 1.0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o = {}) : o_(o), scale_(o.initial_scale) {}
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_; }
  // After a step's gradients are complete: false = skip this step's update.
  bool update(bool grads_finite);
  // Restored from a checkpoint.
  void restore(double scale, int64_t good_steps) {
    scale_ = scale;
    good_ = good_steps;
  }

 private:
  LossScalerOptions o_;
  double scale_;
  int64_t good_ = 0;
};

}  // namespace loom::exec
