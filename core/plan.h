// Plan: the one structure that flows from planner to executor (and the GUI).
//
// A versioned JSON document (docs/formats/plan.md) holding the inputs — the
// model config and hardware profile embedded whole, each with its content
// hash — the training spec, the world size, the layout, and the simulator's
// prediction. `loom plan` writes it; `loom execute` and the GUI read it.
// Reading checks the schema version, the embedded hashes (a hand-edited input
// is reported, not silently used) and the layout against the model.
#pragma once

#include <string>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/program.h"
#include "core/status.h"
#include "core/train_spec.h"

namespace loom {

// 2: model.config carries rope_theta, the norm epsilon, rope_scaling, the
// activation and the attention window (version 1 dropped them, so a version-1
// Llama-3 plan would train with the default RoPE base).
// 3: a "program" section: the configuration of the op program the prediction
// timed (gradient buckets, micro-batches, schedule) and its hash, which the
// executor runs (version 2 left the buckets to each interpreter's default).
inline constexpr int kPlanSchemaVersion = 3;

struct Plan {
  int schema_version = kPlanSchemaVersion;
  std::string loom_version;
  std::string created_by = "loom plan";
  ModelSpec model;
  HwProfile hw;
  TrainSpec train;
  int world_size = 1;
  Layout layout;
  // The program's one free parameter beyond layout and train spec; the rest
  // of program_config() follows from them.
  int grad_buckets = kDefaultGradBuckets;
  // Written by sim, opaque to core: modelling options and the prediction
  // (figures, breakdown, memory per stage, traffic) as JSON objects.
  std::string sim_options_json = "{}";
  std::string prediction_json = "{}";
  // Whether the file carried plan_hash (and so had its train spec, layout
  // and world size checked against what was planned); set by parse_plan.
  bool hash_checked = true;

  std::string model_hash() const;   // of the embedded config (canonical form)
  std::string hw_hash() const;
  // Hash of model, hardware, train spec, world and layout: what a RunRecord
  // and a checkpoint refer to. The prediction does not enter it.
  std::string plan_hash() const;
  // The op program the prediction timed and the executor runs.
  ProgramConfig program_config() const;
};

std::string plan_to_json(const Plan& plan);
// Errors: kParseError (line/column) for malformed JSON; kInvalidArgument for a
// wrong schema version, a missing section, a hash mismatch or a layout that
// does not fit the model / world size, each naming the field.
Result<Plan> parse_plan(const std::string& json_text, const std::string& what = "plan");
Result<Plan> load_plan(const std::string& path);
Status save_plan(const Plan& plan, const std::string& path);

// Training spec and layout as JSON objects (text), shared with run records.
std::string train_spec_to_json(const TrainSpec& train);
std::string layout_to_json(const Layout& layout);

const char* loom_version();

}  // namespace loom
