// Layout sweeps: published measurements of several layouts of one model on
// one cluster with one stack (validation/layout_sweeps.json, format in
// docs/validation.md), to check what a planner is for: does Loom order the
// layouts as they ran, does its pick run near the measured best, and does it
// call the layouts that ran out of memory?
//
// Each run is predicted as a row of the validation table would be
// (predict_run: the sweep's settings, the run's layout and batch). Layouts
// are compared by seconds per sequence (step / global batch), since a sweep
// may vary the batch with the data-parallel size. Nothing in a sweep feeds
// the simulator's constants.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/validation.h"

namespace loom {

struct SweepRun {
  std::string layout;        // the whole layout, loom plan --layout syntax
  int64_t global_batch = 0;  // sequences a step
  double measured_step_s = 0;  // as published; 0 where it ran out of memory
  bool oom = false;            // published as out of memory
  double memory_gib = 0;       // the memory the source reports for it (GiB: nvidia-smi's MiB / 1024), 0 where none
};

struct LayoutSweep {
  std::string id;
  std::string source;
  std::string notes;
  // The settings every run shares, as a validation-table row: model,
  // hardware, GPUs, sequence, precision, framework and its options. Its id,
  // layout, batch and figure are each run's.
  PublishedRun base;
  std::vector<SweepRun> runs;
  // Regression guards (docs/validation.md, "How to read the tolerances"):
  // the sweep holds while its Kendall tau is at least this, Loom's pick among
  // the layouts that ran is within this of the measured best, and at most
  // this many fit verdicts are wrong.
  double min_kendall_tau = -1;
  double max_pick_regret = 0;
  int max_wrong_fit_verdicts = 0;
};

struct SweepPrediction {
  LayoutSweep sweep;
  std::vector<RunPrediction> runs;  // the sweep's order
  std::string error;                // a run that could not be predicted
  // Over the runs that ran and that Loom predicts to fit (`ranked` of them):
  // Kendall's tau-b and Spearman's rho between measured and predicted
  // seconds per sequence.
  int ranked = 0;
  double kendall_tau = 0, spearman = 0;
  int measured_best = -1;       // the fastest run that ran
  int measured_best_place = 0;  // its place in Loom's order of the ranked runs (1: Loom's fastest)
  // Loom's fastest among every run it predicts to fit, and among those that
  // ran; the regret is the latter's measured seconds per sequence over the
  // measured best's, minus 1.
  int pick = -1, pick_that_ran = -1;
  double pick_regret = 0;
  int fit_right = 0, fit_wrong = 0;  // fit verdicts against the measurements
  bool holds() const;
};

// Kendall's tau-b and Spearman's rho (average ranks for ties) of two equally
// long series; 0 for fewer than two points or a constant series.
double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y);
double spearman_rho(const std::vector<double>& x, const std::vector<double>& y);

// `base_dir`: where relative model paths are resolved (the file's folder).
Result<std::vector<LayoutSweep>> parse_layout_sweeps(const std::string& json_text, const std::string& base_dir);
Result<std::vector<LayoutSweep>> load_layout_sweeps(const std::string& path);
SweepPrediction predict_sweep(const LayoutSweep& sweep);
// Each sweep's runs (measured, predicted, places, memory) and its summary
// line, as Markdown.
std::string format_sweeps_markdown(const std::vector<SweepPrediction>& sweeps);

}  // namespace loom
