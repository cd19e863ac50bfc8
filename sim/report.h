// Reports of simulator results: the `--json` figures (unit-suffixed keys,
// docs/formats/plan.md "prediction"), human tables, and the plan a result
// becomes.
#pragma once

#include <string>

#include "core/plan.h"
#include "sim/search.h"
#include "sim/simulate.h"

namespace loom {

// The prediction object: figures, breakdown, per-stage memory by component,
// traffic by category and link class. Keys carry units (`step_time_s`,
// `tokens_per_s`, `peak_memory_bytes`, ...). Pretty-printed when indent >= 0.
std::string prediction_json(const SimResult& result, int indent = -1);
std::string sim_options_json(const SimOptions& opt);
Result<SimOptions> parse_sim_options(const std::string& json_text);

// A plan for a simulated layout.
Plan make_plan(const Evaluator& eval, const SimResult& result, int world_size);

// Multi-line text: layout, figures, step-time breakdown, memory per stage,
// traffic per link class.
std::string format_result(const SimResult& result, const HwProfile& hw);
// The candidate table (top `rows`), with a '*' on Pareto-front layouts.
std::string format_candidates(const SearchResult& result, int rows);
// Memory-vs-throughput Pareto front.
std::string format_pareto(const SearchResult& result, int rows);

// Human units: "12.3 GB", "1.23 ms".
std::string human_bytes(double bytes);
std::string human_seconds(double s);

}  // namespace loom
