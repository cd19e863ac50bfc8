// RunRecord: what one `loom execute` run measured, tied to its plan by hash.
// Written as JSON (docs/formats/run_record.md); read by `loom compare`, the
// regression suite and the GUI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_class.h"
#include "core/phases.h"
#include "core/status.h"

namespace loom {

// 2: "phases" holds the typed StepPhases (core/phases.h): pipeline_wait_s,
// dp_comm_exposed_s and tp_comm_exposed_s (null: the executor does not time it
// apart) instead of version 1's pp_comm_s and dp_comm_s. Version-1 records are
// still read (their phases mapped; parse_run_record upgrades them in memory).
inline constexpr int kRunRecordSchemaVersion = 2;

struct RunRecord {
  // The version the record was read from (1 or 2); what a record holds is
  // always the current structure, and it is written as the current version.
  int schema_version = kRunRecordSchemaVersion;
  std::string loom_version;
  std::string plan_hash;
  std::string model_name;     // the model that ran ("-scaled" with --scale)
  std::string model_config;   // its canonical config (model_spec_to_json); empty in older records
  std::string hardware_name;  // the profile the plan was made for
  std::string backend;        // "cpu", "cuda"
  std::string layout;         // Layout::to_string()
  int world_size = 1;
  int64_t steps = 0;
  int64_t tokens_per_step = 0;
  std::vector<double> losses;          // per step, mean token loss
  std::vector<double> step_times_s;    // per step (max over ranks)
  // Mean over the measured steps (the first `warmup_steps` excluded), of the
  // critical rank (the one with the largest compute time).
  int64_t warmup_steps = 1;
  double step_time_s = 0;
  // Median of the same steps: robust to the odd step a shared machine stalls
  // (what `loom regress` checks).
  double step_time_median_s = 0;
  // Mean phase times of the same steps on the critical rank.
  StepPhases phases;
  double checkpoint_stall_s = 0;       // training-thread time spent starting checkpoint saves, whole run
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  std::string mfu_formula;
  double peak_flops_per_rank = 0;      // the peak MFU is measured against
  std::vector<double> peak_memory_bytes;  // per rank
  // Per rank, what was live at that rank's peak by class (core/memory_class.h);
  // empty in records written before the executor kept a memory ledger.
  std::vector<MemoryBreakdown> peak_memory_by_class;
};

// Always writes the current schema version.
std::string run_record_to_json(const RunRecord& r);
// Reads versions 1 and 2; the result is a current (version 2) record.
Result<RunRecord> parse_run_record(const std::string& json_text, const std::string& what = "run record");
Result<RunRecord> load_run_record(const std::string& path);

}  // namespace loom
