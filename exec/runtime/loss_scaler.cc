#include "exec/runtime/loss_scaler.h"

#include <algorithm>

namespace loom::exec {

bool LossScaler::update(bool grads_finite) {
  if (!grads_finite) {
    scale_ = std::max(o_.min_scale, scale_ * o_.backoff);
    good_ = 0;
    return false;
  }
  if (++good_ >= o_.growth_interval) {
    scale_ *= o_.growth;
    good_ = 0;
  }
  return true;
}

}  // namespace loom::exec
