// Predicted vs measured rows (core/compare.h).
#include "core/compare.h"

#include <algorithm>

#include "core/json_util.h"

namespace loom {

namespace {

// The run must have trained the plan's model: a run with --scale (or any
// other model) against the unscaled plan would print its timings as huge
// "errors" of a prediction made for another model.
Status check_same_model(const Plan& plan, const RunRecord& rec) {
  std::string differs;
  if (!rec.model_config.empty()) {
    auto ran = parse_json(rec.model_config, "run record model_config");
    auto planned = parse_json(model_spec_to_json(plan.model), "plan model");
    if (ran.is_ok() && planned.is_ok() && ran->is_object() && planned->is_object()) {
      for (auto it = ran->begin(); it != ran->end(); ++it) {
        if (it.key() == "_name_or_path") continue;
        const Json* p = planned->contains(it.key()) ? &(*planned)[it.key()] : nullptr;
        if (!p || *p != it.value())
          differs += std::string(differs.empty() ? "" : ", ") + it.key() + " " + it.value().dump() + " vs " +
                     (p ? p->dump() : "absent");
      }
    }
  }
  const bool name_differs = !rec.model_name.empty() && rec.model_name != plan.model.name;
  if (!name_differs && differs.empty()) return Status::ok();
  return invalid_argument("compare: the run record is of a different model: the run trained " +
                          (rec.model_name.empty() ? std::string("another model") : rec.model_name) +
                          " but the plan is for " + plan.model.name + (differs.empty() ? "" : " (" + differs + ")") +
                          "; the prediction is for the plan's model, so its errors would be meaningless: compare the "
                          "run with a plan of the model it trained (a run with --scale: `loom plan --scale ...` with "
                          "the same scale)");
}

}  // namespace

Result<std::vector<ComparisonRow>> compare_rows(const Plan& plan, const RunRecord& rec, bool other_hardware) {
  LOOM_RETURN_IF_ERROR(check_same_model(plan, rec));
  if (other_hardware) {
    const int64_t tokens = int64_t(plan.train.global_batch) * plan.train.seq_len;
    std::string differs;
    if (rec.model_name != plan.model.name) differs += " model (" + rec.model_name + " vs " + plan.model.name + ")";
    if (rec.layout != plan.layout.to_string())
      differs += " layout (" + rec.layout + " vs " + plan.layout.to_string() + ")";
    if (rec.world_size != plan.world_size)
      differs += " ranks (" + std::to_string(rec.world_size) + " vs " + std::to_string(plan.world_size) + ")";
    if (rec.tokens_per_step != tokens)
      differs += " tokens per step (" + std::to_string(rec.tokens_per_step) + " vs " + std::to_string(tokens) + ")";
    if (!differs.empty())
      return invalid_argument("compare: the run and the plan differ in more than the hardware:" + differs +
                              "; --other-hardware compares a run with the same plan made on another profile");
  } else if (rec.plan_hash != plan.plan_hash()) {
    return invalid_argument("compare: the run record is for plan " + rec.plan_hash + " but the plan's hash is " +
                            plan.plan_hash() + "; compare a run with the plan it executed (or, for the same plan "
                            "made on another hardware profile, pass --other-hardware)");
  }
  Result<PredictedFigures> parsed = parse_predicted_figures(plan.prediction_json);
  if (!parsed.is_ok()) return parsed.status().with_context("compare");
  const PredictedFigures& pred = *parsed;
  std::vector<ComparisonRow> rows;
  for (const FigureSpec& f : comparison_figures()) {
    if (!f.applies(plan.layout)) continue;
    rows.push_back({f.id, f.label, f.unit, f.predicted(pred), f.measured(rec)});
  }
  return rows;
}

}  // namespace loom
