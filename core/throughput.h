// Throughput figures from a step time, one formula for the simulator's
// prediction (sim/evaluate.cc) and the executor's measurement
// (exec/runtime/run_driver.cc): model FLOPs per token in the PaLM convention
// (6N + 12·L·H·Q·T, ModelSpec::model_flops_per_token_palm), against the peak
// of every rank in the precision the math runs in.
#pragma once

namespace loom {

inline constexpr const char* kMfuFormula =
    "PaLM: (6*N + 12*L*H*Q*T) * tokens/s / (ranks * peak_flops_per_rank); N = active non-embedding params + LM head";

struct Throughput {
  double tokens_per_s = 0;
  double model_tflops_per_rank = 0;
  double mfu = 0;  // model FLOPs utilization, 0..1
};

inline Throughput throughput(double tokens_per_step, double step_time_s, double palm_flops_per_token, int ranks,
                             double peak_flops_per_rank) {
  Throughput t;
  if (step_time_s <= 0 || ranks <= 0) return t;
  t.tokens_per_s = tokens_per_step / step_time_s;
  t.model_tflops_per_rank = t.tokens_per_s * palm_flops_per_token / ranks / 1e12;
  t.mfu = peak_flops_per_rank > 0 ? t.model_tflops_per_rank * 1e12 / peak_flops_per_rank : 0;
  return t;
}

}  // namespace loom
