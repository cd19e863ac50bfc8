#include "sim/sim_options.h"

namespace loom {

const char* fp8_scaling_name(Fp8Scaling s) { return s == Fp8Scaling::kDelayed ? "delayed" : "current"; }

const char* selective_recompute_name(SelectiveRecompute s) {
  return s == SelectiveRecompute::kEveryOtherMatmul ? "every_other_matmul" : "attention_core";
}

bool parse_selective_recompute(const std::string& text, SelectiveRecompute* out) {
  if (text == "attention_core") {
    *out = SelectiveRecompute::kAttentionCore;
    return true;
  }
  if (text == "every_other_matmul") {
    *out = SelectiveRecompute::kEveryOtherMatmul;
    return true;
  }
  return false;
}

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
