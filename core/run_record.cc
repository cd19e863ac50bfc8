#include "core/run_record.h"

#include <limits>

#include "core/json_util.h"

namespace loom {

namespace {

// Version 1 "phases": forward_s, backward_s, pp_comm_s (all time in pipeline
// send/recv ops: now pipeline_wait_s), dp_comm_s (now dp_comm_exposed_s),
// optimizer_s, data_wait_s; absent keys were 0. TP was never timed apart.
Result<StepPhases> parse_v1_phases(const Json& j, const std::string& what) {
  StepPhases p;
  p.tp_comm_exposed_s = kNotMeasured;
  if (!j.contains("phases")) return p;
  const Json& ph = j["phases"];
  const std::string w = what + ": phases";
  LOOM_ASSIGN_OR_RETURN(p.forward_s, json_number_or(ph, "forward_s", 0, w));
  LOOM_ASSIGN_OR_RETURN(p.backward_s, json_number_or(ph, "backward_s", 0, w));
  LOOM_ASSIGN_OR_RETURN(p.pipeline_wait_s, json_number_or(ph, "pp_comm_s", 0, w));
  LOOM_ASSIGN_OR_RETURN(p.dp_comm_exposed_s, json_number_or(ph, "dp_comm_s", 0, w));
  LOOM_ASSIGN_OR_RETURN(p.optimizer_s, json_number_or(ph, "optimizer_s", 0, w));
  LOOM_ASSIGN_OR_RETURN(p.data_wait_s, json_number_or(ph, "data_wait_s", 0, w));
  return p;
}

}  // namespace

std::string run_record_to_json(const RunRecord& r) {
  OrderedJson j;
  j["schema_version"] = kRunRecordSchemaVersion;
  j["loom_version"] = r.loom_version;
  j["plan_hash"] = r.plan_hash;
  j["model"] = r.model_name;
  if (!r.model_config.empty()) j["model_config"] = OrderedJson::parse(r.model_config);
  j["hardware"] = r.hardware_name;
  j["backend"] = r.backend;
  j["layout"] = r.layout;
  j["world_size"] = r.world_size;
  j["steps"] = r.steps;
  j["tokens_per_step"] = r.tokens_per_step;
  j["warmup_steps"] = r.warmup_steps;
  j["step_time_s"] = r.step_time_s;
  j["step_time_median_s"] = r.step_time_median_s;
  j["phases"] = OrderedJson::parse(phases_to_json(r.phases));
  j["checkpoint_stall_s"] = r.checkpoint_stall_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_tflops_per_gpu"] = r.model_tflops_per_gpu;
  j["mfu"] = r.mfu;
  j["mfu_formula"] = r.mfu_formula;
  j["peak_flops_per_rank"] = r.peak_flops_per_rank;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  if (!r.peak_memory_by_class.empty()) {
    OrderedJson per_rank = OrderedJson::array();
    for (const MemoryBreakdown& b : r.peak_memory_by_class) {
      OrderedJson o;
      for (int c = 0; c < kNumMemoryClasses; ++c) o[std::string(memory_class_name(c))] = b[size_t(c)];
      per_rank.push_back(o);
    }
    j["peak_memory_by_class"] = per_rank;
  }
  j["losses"] = r.losses;
  j["step_times_s"] = r.step_times_s;
  return j.dump(2) + "\n";
}

Result<RunRecord> parse_run_record(const std::string& text, const std::string& what) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  if (!j.is_object()) return invalid_argument(what + ": a run record must be a JSON object");
  if (j.contains("layout") && j.contains("hardware") && !j.contains("step_time_s"))
    return invalid_argument(what + " is a plan, not a run record: give the file `loom execute --record` wrote");
  RunRecord r;
  LOOM_ASSIGN_OR_RETURN(int64_t version, json_int(j, "schema_version", what));
  if (version != 1 && version != kRunRecordSchemaVersion)
    return invalid_argument(what + ": schema_version " + std::to_string(version) +
                            " is not supported (this Loom reads 1 and " + std::to_string(kRunRecordSchemaVersion) +
                            "); read it with the Loom that wrote it (loom_version), or re-run `loom execute --record`");
  r.schema_version = int(version);
  LOOM_ASSIGN_OR_RETURN(r.loom_version, json_string_or(j, "loom_version", "", what));
  LOOM_ASSIGN_OR_RETURN(r.plan_hash, json_string(j, "plan_hash", what));
  LOOM_ASSIGN_OR_RETURN(r.model_name, json_string_or(j, "model", "", what));
  if (j.contains("model_config")) {
    if (!j["model_config"].is_object()) return invalid_argument(what + ": model_config must be an object");
    r.model_config = j["model_config"].dump();
  }
  LOOM_ASSIGN_OR_RETURN(r.hardware_name, json_string_or(j, "hardware", "", what));
  LOOM_ASSIGN_OR_RETURN(r.backend, json_string_or(j, "backend", "", what));
  LOOM_ASSIGN_OR_RETURN(r.layout, json_string_or(j, "layout", "", what));
  LOOM_ASSIGN_OR_RETURN(int64_t world, json_positive_int(j, "world_size", what));
  if (world > (int64_t{1} << 24))
    return invalid_argument(what + ": world_size = " + std::to_string(world) + " is out of range (at most 2^24 ranks)");
  r.world_size = int(world);
  LOOM_ASSIGN_OR_RETURN(r.steps, json_int(j, "steps", what));
  LOOM_ASSIGN_OR_RETURN(r.tokens_per_step, json_int_or(j, "tokens_per_step", 0, what));
  LOOM_ASSIGN_OR_RETURN(r.warmup_steps, json_int_or(j, "warmup_steps", 1, what));
  LOOM_ASSIGN_OR_RETURN(r.step_time_s, json_number(j, "step_time_s", what));
  LOOM_ASSIGN_OR_RETURN(r.step_time_median_s, json_number_or(j, "step_time_median_s", r.step_time_s, what));
  if (version == 1) {
    LOOM_ASSIGN_OR_RETURN(r.phases, parse_v1_phases(j, what));
  } else {
    if (!j.contains("phases") || !j["phases"].is_object())
      return invalid_argument(what + ": phases is missing (an object of phase times); the record is incomplete, "
                              "re-run `loom execute --record`");
    LOOM_ASSIGN_OR_RETURN(r.phases, parse_phases(j["phases"].dump(), what + ": phases",
                                                 "the record is incomplete, re-run `loom execute --record`"));
  }
  LOOM_ASSIGN_OR_RETURN(r.checkpoint_stall_s, json_number_or(j, "checkpoint_stall_s", 0, what));
  LOOM_ASSIGN_OR_RETURN(r.tokens_per_s, json_number_or(j, "tokens_per_s", 0, what));
  LOOM_ASSIGN_OR_RETURN(r.model_tflops_per_gpu, json_number_or(j, "model_tflops_per_gpu", 0, what));
  LOOM_ASSIGN_OR_RETURN(r.mfu, json_number_or(j, "mfu", 0, what));
  LOOM_ASSIGN_OR_RETURN(r.mfu_formula, json_string_or(j, "mfu_formula", "", what));
  LOOM_ASSIGN_OR_RETURN(r.peak_flops_per_rank, json_number_or(j, "peak_flops_per_rank", 0, what));
  auto numbers = [&](const char* key, std::vector<double>& out) -> Status {
    if (!j.contains(key)) return Status::ok();
    if (!j[key].is_array()) return invalid_argument(what + ": " + key + " must be an array of numbers");
    for (const Json& x : j[key]) {
      // null is how JSON writers (run_record_to_json included) store a NaN or
      // an infinity: a diverged run's loss stays readable, as NaN.
      if (x.is_null()) {
        out.push_back(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      if (!x.is_number()) return invalid_argument(what + ": " + key + " must be an array of numbers (null for NaN)");
      out.push_back(x.get<double>());
    }
    return Status::ok();
  };
  LOOM_RETURN_IF_ERROR(numbers("losses", r.losses));
  LOOM_RETURN_IF_ERROR(numbers("step_times_s", r.step_times_s));
  LOOM_RETURN_IF_ERROR(numbers("peak_memory_bytes", r.peak_memory_bytes));
  if (j.contains("peak_memory_by_class")) {
    const Json& a = j["peak_memory_by_class"];
    if (!a.is_array() || a.size() != r.peak_memory_bytes.size())
      return invalid_argument(what + ": peak_memory_by_class must be an array with one object per rank, as "
                              "peak_memory_bytes (" + std::to_string(r.peak_memory_bytes.size()) + " ranks)");
    for (const Json& o : a) {
      if (!o.is_object()) return invalid_argument(what + ": peak_memory_by_class holds a non-object");
      MemoryBreakdown b{};
      for (int c = 0; c < kNumMemoryClasses; ++c) {
        const std::string key(memory_class_name(c));
        if (!o.contains(key)) continue;  // a class a later version added reads as 0
        if (!o[key].is_number() || o[key].get<double>() < 0)
          return invalid_argument(what + ": peak_memory_by_class." + key + " must be a number of bytes >= 0");
        b[size_t(c)] = o[key].get<double>();
      }
      r.peak_memory_by_class.push_back(b);
    }
  }
  return r;
}

Result<RunRecord> load_run_record(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_run_record(text, path);
}

}  // namespace loom
