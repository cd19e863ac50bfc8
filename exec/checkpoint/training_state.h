// A rank's training state file (DIR/step_N/training_state/rank_R.json,
// docs/formats/checkpoint.md): what a resume reads besides the tensors.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace loom::ckpt {

// Far above any real run; keeps step * global_batch (samples) and the data
// cursor's replay inside int64 and finite time.
inline constexpr int64_t kMaxTrainingStep = int64_t{1} << 36;

struct TrainingState {
  int64_t step = 0;        // the next step to run
  int64_t adam_step = 0;   // optimizer steps taken (defaults to step)
  std::string precision;   // "fp16", "bf16", "fp32"; empty when not recorded
  bool has_loss_scale = false;
  double loss_scale = 1;   // finite, > 0
  int64_t loss_scale_good_steps = 0;
  std::string data_json;   // the "data" object (the data source's cursor), empty when absent
};

// Errors (kParseError for malformed JSON, kInvalidArgument otherwise) name
// `where` and the field: not an object, a missing or negative step, a step
// beyond kMaxTrainingStep, a loss scale that is not a finite positive number,
// a "data" entry that is not an object.
Result<TrainingState> parse_training_state(const std::string& json_text, const std::string& where);

}  // namespace loom::ckpt
