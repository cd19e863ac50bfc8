// Predicted vs measured rows (core/compare.h).
#include "core/compare.h"

#include <algorithm>
#include <limits>

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

MemoryComparison compare_memory(const Plan& plan, const RunRecord& rec) {
  MemoryComparison out;
  if (rec.peak_memory_by_class.empty() || rec.peak_memory_by_class.size() != rec.peak_memory_bytes.size())
    return out;
  Result<Json> pred = parse_json(plan.prediction_json, "prediction");
  if (!pred.is_ok() || !pred->contains("memory_per_stage") || !(*pred)["memory_per_stage"].is_array()) return out;
  const Json& stages = (*pred)["memory_per_stage"];
  const auto peak = std::max_element(rec.peak_memory_bytes.begin(), rec.peak_memory_bytes.end());
  out.rank = int(peak - rec.peak_memory_bytes.begin());
  const RankGrid grid(plan.layout);  // a loaded plan's layout is validated
  if (out.rank < grid.world()) out.stage = grid.coords(out.rank).pp;
  if (out.stage >= int(stages.size()) || !stages[size_t(out.stage)].is_object()) return out;
  const Json& s = stages[size_t(out.stage)];
  static const char* const kKeys[kNumMemoryClasses] = {"weights_bytes",     "grads_bytes",       "optimizer_bytes",
                                                       "activations_bytes", "comm_buffer_bytes", "workspace_bytes",
                                                       "inputs_bytes",      nullptr};
  for (int c = 0; c < kNumMemoryClasses; ++c) {
    MemoryClassRow row{std::string(memory_class_name(c)), std::numeric_limits<double>::quiet_NaN(),
                       rec.peak_memory_by_class[size_t(out.rank)][size_t(c)]};
    if (kKeys[c]) {
      if (!s.contains(kKeys[c]) || !s[kKeys[c]].is_number()) return MemoryComparison{};  // a plan of another version
      row.predicted = s[kKeys[c]].get<double>();
    }
    out.rows.push_back(row);
  }
  out.available = true;
  return out;
}

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
