#include "exec/checkpoint/training_state.h"

#include <cmath>

#include "core/json_util.h"

namespace loom::ckpt {

Result<TrainingState> parse_training_state(const std::string& text, const std::string& where) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, where));
  if (!j.is_object()) return invalid_argument(where + ": not a JSON object; the checkpoint is damaged");
  TrainingState s;
  auto step_in_range = [&](const char* key, int64_t v) -> Status {
    if (v < 0 || v > kMaxTrainingStep)
      return invalid_argument(where + "." + key + " = " + std::to_string(v) + " is out of range (0.." +
                              std::to_string(kMaxTrainingStep) + ")");
    return Status::ok();
  };
  if (!j.contains("step") || j["step"].is_null())
    return invalid_argument(where + ": training state has no step; the checkpoint is damaged");
  LOOM_ASSIGN_OR_RETURN(s.step, json_int(j, "step", where));
  LOOM_RETURN_IF_ERROR(step_in_range("step", s.step));
  LOOM_ASSIGN_OR_RETURN(s.adam_step, json_int_or(j, "adam_step", s.step, where));
  LOOM_RETURN_IF_ERROR(step_in_range("adam_step", s.adam_step));
  LOOM_ASSIGN_OR_RETURN(s.precision, json_string_or(j, "precision", "", where));
  if (j.contains("loss_scale") && !j["loss_scale"].is_null()) {
    s.has_loss_scale = true;
    LOOM_ASSIGN_OR_RETURN(s.loss_scale, json_number(j, "loss_scale", where));
    if (!(s.loss_scale > 0) || !std::isfinite(s.loss_scale))
      return invalid_argument(where + ".loss_scale must be a finite number > 0");
    LOOM_ASSIGN_OR_RETURN(s.loss_scale_good_steps, json_int_or(j, "loss_scale_good_steps", 0, where));
    LOOM_RETURN_IF_ERROR(step_in_range("loss_scale_good_steps", s.loss_scale_good_steps));
  }
  if (j.contains("data") && !j["data"].is_null()) {
    if (!j["data"].is_object()) return invalid_argument(where + ".data must be an object (the data cursor)");
    s.data_json = j["data"].dump();
  }
  return s;
}

}  // namespace loom::ckpt
