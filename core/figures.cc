// The comparison figures (core/figures.h).
#include "core/figures.h"

#include <algorithm>

#include "core/json_util.h"

namespace loom {

namespace {

const char* const kRemake =
    "the plan was made by another version of `loom plan`; re-create it with this `loom plan` (the same arguments)";

Result<double> required_number(const Json& obj, const std::string& where, const char* key) {
  if (!obj.is_object() || !obj.contains(key))
    return invalid_argument("the plan's prediction has no " + where + key + ": " + kRemake);
  const Json& v = obj[key];
  if (!v.is_number())
    return invalid_argument("the plan's prediction has " + where + key + " = " + v.dump() + ", not a number: " +
                            kRemake);
  return v.get<double>();
}

bool always(const Layout&) { return true; }

double median_tokens_per_s(const RunRecord& r) {
  if (r.step_time_median_s > 0 && r.tokens_per_step > 0) return double(r.tokens_per_step) / r.step_time_median_s;
  return r.tokens_per_s;
}

double peak_memory(const RunRecord& r) {
  return r.peak_memory_bytes.empty() ? 0 : *std::max_element(r.peak_memory_bytes.begin(), r.peak_memory_bytes.end());
}

}  // namespace

Result<PredictedFigures> parse_predicted_figures(const std::string& prediction_json) {
  LOOM_ASSIGN_OR_RETURN(Json p, parse_json(prediction_json, "plan prediction"));
  if (!p.is_object() || p.empty())
    return invalid_argument("the plan has no prediction; re-create it with `loom plan`");
  PredictedFigures f;
  LOOM_ASSIGN_OR_RETURN(f.step_time_s, required_number(p, "", "step_time_s"));
  LOOM_ASSIGN_OR_RETURN(f.tokens_per_s, required_number(p, "", "tokens_per_s"));
  if (!p.contains("phases") || !p["phases"].is_object())
    return invalid_argument(std::string("the plan's prediction has no phases object: ") + kRemake);
  LOOM_ASSIGN_OR_RETURN(f.phases, parse_phases(p["phases"].dump(), "the plan's prediction phases", kRemake));
  for (const PhaseField& k : kPhaseFields)
    if (!std::isfinite(f.phases.*k.member))
      return invalid_argument(std::string("the plan's prediction phases.") + k.key + " is null: " + kRemake);
  if (!p.contains("memory_per_stage") || !p["memory_per_stage"].is_array() || p["memory_per_stage"].empty())
    return invalid_argument(std::string("the plan's prediction has no memory_per_stage array: ") + kRemake);
  const Json& stages = p["memory_per_stage"];
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string where = "memory_per_stage[" + std::to_string(i) + "].";
    LOOM_ASSIGN_OR_RETURN(double total, required_number(stages[i], where, "total_bytes"));
    LOOM_ASSIGN_OR_RETURN(double overhead, required_number(stages[i], where, "overhead_bytes"));
    f.peak_tensor_bytes = std::max(f.peak_tensor_bytes, total - overhead);
  }
  return f;
}

const std::vector<FigureSpec>& comparison_figures() {
  using P = const PredictedFigures&;
  using R = const RunRecord&;
  static const std::vector<FigureSpec> table = {
      {"step_time", "step time (median)", "s", always, [](P p) { return p.step_time_s; },
       [](R r) { return r.step_time_median_s; }},
      {"step_time_mean", "step time (mean)", "s", always, [](P p) { return p.step_time_s; },
       [](R r) { return r.step_time_s; }},
      {"compute", "compute (forward + backward)", "s", always, [](P p) { return p.phases.compute_s(); },
       [](R r) { return r.phases.compute_s(); }},
      {"forward", "forward", "s", always, [](P p) { return p.phases.forward_s; },
       [](R r) { return r.phases.forward_s; }},
      {"backward", "backward (+ recompute)", "s", always, [](P p) { return p.phases.backward_s; },
       [](R r) { return r.phases.backward_s; }},
      {"pipeline_wait", "pipeline wait (bubble + p2p)", "s", [](const Layout& l) { return l.pp > 1; },
       [](P p) { return p.phases.pipeline_wait_s; }, [](R r) { return r.phases.pipeline_wait_s; }},
      {"dp_comm", "DP communication (exposed)", "s", [](const Layout& l) { return l.dp > 1; },
       [](P p) { return p.phases.dp_comm_exposed_s; }, [](R r) { return r.phases.dp_comm_exposed_s; }},
      {"optimizer", "optimizer", "s", always, [](P p) { return p.phases.optimizer_s; },
       [](R r) { return r.phases.optimizer_s; }},
      {"tokens_per_s", "tokens/s (at the median step)", "tokens/s", always, [](P p) { return p.tokens_per_s; },
       median_tokens_per_s},
      {"peak_memory", "peak memory (tensors)", "bytes", always, [](P p) { return p.peak_tensor_bytes; },
       peak_memory},
  };
  return table;
}

const FigureSpec* find_figure(std::string_view id) {
  for (const FigureSpec& f : comparison_figures())
    if (id == f.id) return &f;
  return nullptr;
}

double relative_error(double predicted, double measured) {
  if (std::isnan(predicted) || std::isnan(measured)) return std::numeric_limits<double>::quiet_NaN();
  if (predicted == measured) return 0;
  if (predicted == 0) return measured > 0 ? std::numeric_limits<double>::infinity()
                                          : -std::numeric_limits<double>::infinity();
  return measured / predicted - 1;
}

}  // namespace loom
