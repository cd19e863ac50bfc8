// The regression suite file (bench/suites/*.json, docs/formats/regress.md).
#include <algorithm>
#include <set>

#include "cli/regress.h"
#include "cli/regress_json.h"
#include "core/json_util.h"
#include "core/layout.h"
#include "core/train_spec.h"

namespace loom::cli {

Result<Suite> parse_suite(const std::string& text, const std::string& w) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, w));
  if (!j.is_object()) return parse_error(w + ": not a JSON object (docs/formats/regress.md)");
  Suite s;
  LOOM_ASSIGN_OR_RETURN(s.name, json_string(j, "name", w));
  LOOM_ASSIGN_OR_RETURN(s.description, json_string_or(j, "description", "", w));
  LOOM_ASSIGN_OR_RETURN(s.tolerance_note, json_string_or(j, "tolerance_note", "", w));
  LOOM_ASSIGN_OR_RETURN(s.throughput_margin, json_number_or(j, "throughput_margin", 0.25, w));
  if (!(s.throughput_margin > 0 && s.throughput_margin < 1))
    return invalid_argument(w + ".throughput_margin must be a fraction in (0, 1), e.g. 0.25");
  LOOM_ASSIGN_OR_RETURN(s.steps, json_int_or(j, "steps", 16, w));
  if (s.steps < 4) return invalid_argument(w + ".steps must be >= 4 (2 warm-up steps are not measured)");
  LOOM_ASSIGN_OR_RETURN(int64_t threads, json_int_or(j, "threads", 1, w));
  if (threads > 4096) return invalid_argument(w + ".threads = " + std::to_string(threads) + " is out of range (1..4096)");
  s.threads = int(std::max<int64_t>(1, threads));
  LOOM_ASSIGN_OR_RETURN(auto suite_tol, parse_tolerances(j, w));
  SuiteCase defaults;
  LOOM_ASSIGN_OR_RETURN(defaults.model, json_string(j, "model", w));
  LOOM_ASSIGN_OR_RETURN(defaults.scale, json_string_or(j, "scale", "", w));
  LOOM_ASSIGN_OR_RETURN(defaults.precision, json_string_or(j, "precision", "fp32", w));
  LOOM_ASSIGN_OR_RETURN(defaults.global_batch, json_int(j, "global_batch", w));
  LOOM_ASSIGN_OR_RETURN(defaults.seq, json_int(j, "seq", w));
  if (!j.contains("cases") || !j["cases"].is_array() || j["cases"].empty())
    return invalid_argument(w + ".cases must be a non-empty array of {\"name\", \"ranks\", \"layout\"}");
  std::set<std::string> names;
  for (size_t i = 0; i < j["cases"].size(); ++i) {
    const Json& cj = j["cases"][i];
    const std::string wc = w + ".cases[" + std::to_string(i) + "]";
    if (!cj.is_object()) return invalid_argument(wc + " must be an object {\"name\", \"ranks\", \"layout\"}");
    SuiteCase c = defaults;
    LOOM_ASSIGN_OR_RETURN(c.name, json_string(cj, "name", wc));
    if (!names.insert(c.name).second) return invalid_argument(wc + ": the name '" + c.name + "' is used twice");
    if (c.name.empty() || c.name == "." || c.name == ".." || c.name.find_first_of("/ \t") != std::string::npos)
      return invalid_argument(wc + ".name '" + c.name + "' must not contain '/' or spaces (it names files)");
    LOOM_ASSIGN_OR_RETURN(int64_t ranks, json_positive_int(cj, "ranks", wc));
    if (ranks > kMaxLayoutValue)
      return invalid_argument(wc + ".ranks = " + std::to_string(ranks) + " is out of range (at most " +
                              std::to_string(kMaxLayoutValue) + ")");
    c.ranks = int(ranks);
    LOOM_ASSIGN_OR_RETURN(c.layout, json_string(cj, "layout", wc));
    LOOM_ASSIGN_OR_RETURN(c.model, json_string_or(cj, "model", c.model, wc));
    LOOM_ASSIGN_OR_RETURN(c.scale, json_string_or(cj, "scale", c.scale, wc));
    LOOM_ASSIGN_OR_RETURN(c.precision, json_string_or(cj, "precision", c.precision, wc));
    LOOM_ASSIGN_OR_RETURN(c.grad_reduce, json_string_or(cj, "grad_reduce", c.grad_reduce, wc));
    if (auto g = parse_grad_reduce(c.grad_reduce); !g.is_ok()) return g.status().with_context(wc);
    LOOM_ASSIGN_OR_RETURN(c.moe_load_imbalance, json_string_or(cj, "moe_load_imbalance", c.moe_load_imbalance, wc));
    if (!c.moe_load_imbalance.empty() && c.moe_load_imbalance != "measured")
      return invalid_argument(wc + ".moe_load_imbalance '" + c.moe_load_imbalance +
                              "' is unknown; use \"measured\" (a probe run measures it) or leave it out (balanced)");
    LOOM_ASSIGN_OR_RETURN(c.global_batch, json_int_or(cj, "global_batch", c.global_batch, wc));
    LOOM_ASSIGN_OR_RETURN(c.seq, json_int_or(cj, "seq", c.seq, wc));
    LOOM_ASSIGN_OR_RETURN(auto case_tol, parse_tolerances(cj, wc));
    c.tolerances = suite_tol;
    for (const auto& [k, v] : case_tol) c.tolerances[k] = v;
    if (c.tolerances.empty())
      return invalid_argument(wc + ": no tolerance; give \"tolerances\": {\"step_time\": F} on the suite or the case");
    s.cases.push_back(std::move(c));
  }
  return s;
}

}  // namespace loom::cli
