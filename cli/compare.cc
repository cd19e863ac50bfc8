#include "cli/compare.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "core/json_util.h"

namespace loom::cli {

std::string error_text(double e) {
  if (std::isnan(e)) return "n/a";
  if (std::isinf(e)) return e > 0 ? "+inf" : "-inf";
  const long pct = std::lround(100 * e);
  return (pct > 0 ? "+" : "") + std::to_string(pct) + "%";
}

std::string format_comparison(const Plan& plan, const RunRecord& rec, bool other_hardware) {
  auto rows = compare_rows(plan, rec, other_hardware);
  if (!rows.is_ok()) return "predicted vs measured: " + rows.status().message() + "\n";
  std::string out = "predicted vs measured (" + rec.layout + ", " + std::to_string(rec.world_size) + " ranks, " +
                    std::to_string(std::max<int64_t>(0, rec.steps - rec.warmup_steps)) + " steps after " +
                    std::to_string(rec.warmup_steps) + " warm-up)\n";
  char buf[320];
  std::snprintf(buf, sizeof buf, "  %-15s %-30s %14s %14s %9s\n", "figure", "", "predicted", "measured", "error");
  out += buf;
  for (const ComparisonRow& r : *rows) {
    auto fmt = [&](double v) {
      char b[64];
      if (r.unit == "s") std::snprintf(b, sizeof b, "%.4g s", v);
      else if (r.unit == "bytes") std::snprintf(b, sizeof b, "%.4g MB", v / 1e6);
      else std::snprintf(b, sizeof b, "%.4g", v);
      return std::string(b);
    };
    std::snprintf(buf, sizeof buf, "  %-15s %-30s %14s %14s %9s\n", r.id.c_str(), r.label.c_str(),
                  fmt(r.predicted).c_str(), fmt(r.measured).c_str(), error_text(r.rel_error()).c_str());
    out += buf;
  }
  out += format_memory_comparison(compare_memory(plan, rec));
  // Shapes the prediction priced beyond its profile's measurements (sim/coverage.h).
  Result<Json> pred = parse_json(plan.prediction_json, "prediction");
  if (pred.is_ok() && pred->contains("outside_measured") && (*pred)["outside_measured"].is_array())
    for (const Json& note : (*pred)["outside_measured"])
      if (note.is_string()) out += "  note: outside the measured range: " + note.get<std::string>() + "\n";
  return out;
}

std::string format_memory_comparison(const MemoryComparison& m) {
  if (!m.available) return "";
  char buf[320];
  std::snprintf(buf, sizeof buf, "peak memory by class (rank %d, stage %d, what was live at its peak)\n", m.rank,
                m.stage);
  std::string out = buf;
  for (const MemoryClassRow& r : m.rows) {
    if (std::isnan(r.predicted) && r.measured == 0) continue;  // nothing outside the ledger's classes
    auto mb = [](double v) {
      char b[64];
      if (std::isnan(v)) return std::string("-");
      std::snprintf(b, sizeof b, "%.4g MB", v / 1e6);
      return std::string(b);
    };
    std::snprintf(buf, sizeof buf, "  %-46s %14s %14s %9s\n", r.name.c_str(), mb(r.predicted).c_str(),
                  mb(r.measured).c_str(), error_text(relative_error(r.predicted, r.measured)).c_str());
    out += buf;
  }
  return out;
}

std::string comparison_json(const std::vector<ComparisonRow>& rows, const MemoryComparison& memory) {
  OrderedJson j;
  for (const ComparisonRow& r : rows) {
    j[r.id] = {{"predicted", r.predicted}, {"measured", r.measured}, {"unit", r.unit}, {"label", r.label}};
    // null when it is not finite (a prediction of 0 against a measured figure)
    const double e = r.rel_error();
    j[r.id + "_rel_error"] = std::isfinite(e) ? OrderedJson(e) : OrderedJson(nullptr);
  }
  if (memory.available) {
    OrderedJson classes;
    for (const MemoryClassRow& r : memory.rows)
      classes[r.name] = {{"predicted", std::isnan(r.predicted) ? OrderedJson(nullptr) : OrderedJson(r.predicted)},
                         {"measured", r.measured}};
    j["peak_memory_by_class"] = {{"rank", memory.rank}, {"stage", memory.stage}, {"classes", classes}};
  }
  return j.dump(2);
}

int cmd_compare(int argc, char** argv) {
  // loom compare --ops PREDICTED_TRACE MEASURED_TRACE: op by op (cli/compare_ops.cc).
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--ops") return cmd_compare_ops(argc, argv);
  CLI::App app{"Predicted (plan) vs measured (run record) with relative errors; with --ops, a predicted trace vs a "
               "measured one op by op (`loom compare --ops --help`).",
               "loom compare"};
  std::string plan_path, record_path;
  bool json = false, other_hardware = false;
  app.add_option("plan", plan_path, "plan JSON")->required();
  app.add_option("run", record_path, "run record JSON written by `loom execute --record`")->required();
  app.add_flag("--json", json, "print the figures as JSON keyed by figure id, with <id>_rel_error keys");
  bool ops_help = false;
  app.add_flag("--ops", ops_help, "compare PREDICTED_TRACE MEASURED_TRACE op by op instead (see --ops --help)");
  app.add_flag("--other-hardware", other_hardware,
               "the plan is the run's plan made on another hardware profile (a calibrated one, say): model, layout, "
               "ranks and tokens per step must match, the hash need not");
  if (int rc = parse_args(app, "compare", argc, argv); rc >= 0) return rc;
  auto plan = load_plan(plan_path);
  if (!plan.is_ok()) return fail("compare", plan.status());
  auto rec = load_run_record(record_path);
  if (!rec.is_ok()) return fail("compare", rec.status());
  auto rows = compare_rows(*plan, *rec, other_hardware);
  if (!rows.is_ok()) return fail("compare", rows.status());
  if (json) std::printf("%s\n", comparison_json(*rows, compare_memory(*plan, *rec)).c_str());
  else std::printf("%s", format_comparison(*plan, *rec, other_hardware).c_str());
  return 0;
}

}  // namespace loom::cli
