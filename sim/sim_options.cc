#include "sim/sim_options.h"

namespace loom {

const char* fp8_scaling_name(Fp8Scaling s) { return s == Fp8Scaling::kDelayed ? "delayed" : "current"; }

bool parse_fp8_scaling(const std::string& text, Fp8Scaling* out) {
  if (text == "delayed") {
    *out = Fp8Scaling::kDelayed;
    return true;
  }
  if (text == "current" || text == "tensorwise") {
    *out = Fp8Scaling::kCurrent;
    return true;
  }
  return false;
}

}  // namespace loom
