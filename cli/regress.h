// loom regress: a predicted-vs-measured regression suite.
//
//   loom regress run SUITE   calibrate this machine (once per world size),
//                            plan and execute every (model, layout) case of
//                            the suite, record predicted and measured figures
//                            in a results file (machine, commit, date).
//   loom regress check FILE  fail when a prediction error exceeds its
//                            tolerance, or measured throughput fell more than
//                            the margin below this machine's stored baseline;
//                            print the table and write an SVG plot.
//
// Formats: docs/formats/regress.md. Suites: bench/suites/*.json.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom {
struct Plan;
struct RunRecord;
}  // namespace loom

namespace loom::cli {

// What one figure was predicted and measured to be.
struct Figure {
  double predicted = 0, measured = 0;
  // loom::relative_error (core/figures.h): not finite when only the
  // prediction is 0, which `loom regress check` fails.
  double rel_error() const;
};

struct CaseResult {
  std::string name, layout, model;
  int ranks = 1;
  std::string error;                    // non-empty: the case did not run
  std::map<std::string, double> tolerances;  // figure -> max |rel_error| (checked)
  // By figure id (core/figures.h): "step_time" (median step), "step_time_mean",
  // "compute", "forward", "backward", "pipeline_wait", "dp_comm", "optimizer",
  // "tokens_per_s", "peak_memory".
  std::map<std::string, Figure> figures;
  // The machine's speed while the case ran: reference workload runs per
  // second (cli/machine_speed.h), the mean of a timing just before and just
  // after it; 0 = not measured (results of older versions).
  double machine_speed = 0;
  // The same reference timed just after the calibration whose profile the
  // case was planned on (its world size's): machine_speed / calibration_speed
  // - 1 is how much faster the machine ran the case than when it was
  // measured, which the prediction cannot know. 0 = not measured.
  double calibration_speed = 0;
};

struct MachineInfo {
  std::string key;       // baselines are stored per key: "amd-epyc-2c-24g"
  std::string hostname, cpu_model;
  int cores = 0;
  double memory_gib = 0;
};

struct RegressResults {
  int schema_version = 1;
  std::string suite, suite_description, tolerance_note;
  double throughput_margin = 0.25;  // allowed fall below the baseline's tokens/s
  MachineInfo machine;
  std::string commit, date, loom_version, launcher;
  std::vector<CaseResult> cases;
};

// A suite file (bench/suites/*.json, docs/formats/regress.md): cases to plan,
// execute and compare. Case fields left out take the suite's values.
struct SuiteCase {
  std::string name, layout, model, scale, precision;
  std::string grad_reduce = "fp32";  // loom plan --grad-reduce
  // "measured": a short probe run of the case measures its MoE routing's load
  // imbalance first, and the plan takes it (--moe-load-imbalance-from);
  // empty: the planner's default (balanced).
  std::string moe_load_imbalance;
  int ranks = 1;
  int64_t global_batch = 0, seq = 0;
  std::map<std::string, double> tolerances;
};

struct Suite {
  std::string name, description, tolerance_note;
  double throughput_margin = 0.25;
  int64_t steps = 16;
  int threads = 1;
  std::vector<SuiteCase> cases;
};

// Parses a suite's text; errors name `what` and the field. (regress_suite.cc,
// in the small library loom_regress_io with the results reader, so that tests
// and fuzzers call the parsers without the rest of the CLI.)
Result<Suite> parse_suite(const std::string& json_text, const std::string& what);

// A case's figures: the rows of compare_rows (core/compare.h) by figure id.
// Errors: those of compare_rows (a prediction lacking a figure's key among
// them), which make the case fail. (regress_figures.cc, in loom_regress_io.)
Result<std::map<std::string, Figure>> case_figures(const Plan& plan, const RunRecord& record);

MachineInfo this_machine();
std::string results_to_json(const RegressResults& r);
Result<RegressResults> parse_results(const std::string& json_text, const std::string& what);

// The SVG scatter of predicted vs measured step time (log-log, y = x and the
// tolerance band), one labelled point per case.
std::string results_svg(const RegressResults& r);

int cmd_regress(int argc, char** argv);
int regress_run(int argc, char** argv);
int regress_check(int argc, char** argv);

}  // namespace loom::cli
