#include "core/plan.h"

#include "core/json_util.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "0.0.0"
#endif

namespace loom {

const char* loom_version() { return LOOM_VERSION; }

namespace {

const char* lr_schedule_name(LrSchedule s) {
  switch (s) {
    case LrSchedule::kConstant: return "constant";
    case LrSchedule::kCosine: return "cosine";
    case LrSchedule::kLinear: return "linear";
  }
  return "?";
}

OrderedJson train_json(const TrainSpec& t) {
  OrderedJson j;
  j["global_batch"] = t.global_batch;
  j["seq_len"] = t.seq_len;
  j["precision"] = precision_name(t.precision);
  j["optimizer"] = t.optimizer;
  j["steps"] = t.steps;
  j["lr"] = t.lr;
  j["min_lr"] = t.min_lr;
  j["warmup_steps"] = t.warmup_steps;
  j["lr_schedule"] = lr_schedule_name(t.lr_schedule);
  j["weight_decay"] = t.weight_decay;
  j["beta1"] = t.beta1;
  j["beta2"] = t.beta2;
  j["adam_eps"] = t.adam_eps;
  j["grad_clip"] = t.grad_clip;
  j["seed"] = t.seed;
  // Written only when compressed, so that an fp32 plan's hash is unchanged.
  if (t.grad_reduce != GradReduce::kFp32) j["grad_reduce"] = grad_reduce_name(t.grad_reduce);
  // MoE training options, likewise written only when set.
  if (t.moe_aux_loss_coeff != 0) j["moe_aux_loss_coeff"] = t.moe_aux_loss_coeff;
  if (t.moe_z_loss_coeff != 0) j["moe_z_loss_coeff"] = t.moe_z_loss_coeff;
  if (t.moe_capacity_factor != 0) j["moe_capacity_factor"] = t.moe_capacity_factor;
  return j;
}

OrderedJson layout_json(const Layout& l) {
  OrderedJson j;
  j["dp"] = l.dp;
  j["tp"] = l.tp;
  j["pp"] = l.pp;
  j["ep"] = l.ep;
  j["cp"] = l.cp;
  // Written only when folded, so that other plans are unchanged.
  if (l.folded_experts()) j["expert_tensor_parallel"] = l.etp;
  j["zero"] = l.zero;
  j["micro_batch"] = l.micro_batch;
  j["schedule"] = schedule_name(l.schedule);
  j["virtual_stages"] = l.virtual_stages;
  // Written only when pinned, so that an even split's plan is unchanged.
  if (l.first_stage_layers > 0) j["first_stage_layers"] = l.first_stage_layers;
  if (l.last_stage_layers > 0) j["last_stage_layers"] = l.last_stage_layers;
  j["sequence_parallel"] = l.sequence_parallel;
  j["recompute"] = recompute_name(l.recompute);
  if (l.recompute_layers > 0) j["recompute_layers"] = l.recompute_layers;  // written only when partial
  if (l.recompute_modules) j["recompute_modules"] = recompute_modules_text(l.recompute_modules);  // only when named
  j["overlap_grad_reduce"] = l.overlap_grad_reduce;
  j["overlap_param_gather"] = l.overlap_param_gather;
  if (l.cp_comm != CpComm::kP2p) j["cp_comm"] = cp_comm_name(l.cp_comm);  // written only when not the ring
  j["rank_order"] = l.rank_order;
  return j;
}

Result<TrainSpec> parse_train(const Json& j) {
  const std::string w = "plan: train";
  if (!j.is_object()) return invalid_argument(w + " must be an object");
  TrainSpec t;
  LOOM_ASSIGN_OR_RETURN(t.global_batch, json_positive_int(j, "global_batch", w));
  LOOM_ASSIGN_OR_RETURN(t.seq_len, json_positive_int(j, "seq_len", w));
  LOOM_ASSIGN_OR_RETURN(std::string prec, json_string_or(j, "precision", "bf16", w));
  LOOM_ASSIGN_OR_RETURN(t.precision, parse_precision(prec));
  LOOM_ASSIGN_OR_RETURN(t.optimizer, json_string_or(j, "optimizer", "adamw", w));
  LOOM_ASSIGN_OR_RETURN(t.steps, json_int_or(j, "steps", 0, w));
  LOOM_ASSIGN_OR_RETURN(t.lr, json_number_or(j, "lr", t.lr, w));
  // Absent: a tenth of the peak, as `loom plan` sets it (sim/plan_request.cc).
  LOOM_ASSIGN_OR_RETURN(t.min_lr, json_number_or(j, "min_lr", t.lr / 10, w));
  LOOM_ASSIGN_OR_RETURN(t.warmup_steps, json_int_or(j, "warmup_steps", 0, w));
  LOOM_ASSIGN_OR_RETURN(std::string sched, json_string_or(j, "lr_schedule", "cosine", w));
  if (sched == "constant") t.lr_schedule = LrSchedule::kConstant;
  else if (sched == "cosine") t.lr_schedule = LrSchedule::kCosine;
  else if (sched == "linear") t.lr_schedule = LrSchedule::kLinear;
  else return invalid_argument(w + ".lr_schedule '" + sched + "' is unknown; use constant, cosine or linear");
  LOOM_ASSIGN_OR_RETURN(t.weight_decay, json_number_or(j, "weight_decay", t.weight_decay, w));
  LOOM_ASSIGN_OR_RETURN(t.beta1, json_number_or(j, "beta1", t.beta1, w));
  LOOM_ASSIGN_OR_RETURN(t.beta2, json_number_or(j, "beta2", t.beta2, w));
  LOOM_ASSIGN_OR_RETURN(t.adam_eps, json_number_or(j, "adam_eps", t.adam_eps, w));
  LOOM_ASSIGN_OR_RETURN(t.grad_clip, json_number_or(j, "grad_clip", t.grad_clip, w));
  LOOM_ASSIGN_OR_RETURN(int64_t seed, json_int_or(j, "seed", 1234, w));
  t.seed = static_cast<uint64_t>(seed);
  LOOM_ASSIGN_OR_RETURN(std::string reduce, json_string_or(j, "grad_reduce", "fp32", w));
  auto gr = parse_grad_reduce(reduce);
  if (!gr.is_ok()) return gr.status().with_context(w);
  t.grad_reduce = *gr;
  LOOM_ASSIGN_OR_RETURN(t.moe_aux_loss_coeff, json_number_or(j, "moe_aux_loss_coeff", 0, w));
  LOOM_ASSIGN_OR_RETURN(t.moe_z_loss_coeff, json_number_or(j, "moe_z_loss_coeff", 0, w));
  LOOM_ASSIGN_OR_RETURN(t.moe_capacity_factor, json_number_or(j, "moe_capacity_factor", 0, w));
  LOOM_RETURN_IF_ERROR(validate_train_spec(t));
  return t;
}

Result<Layout> parse_layout_json(const Json& j) {
  const std::string w = "plan: layout";
  if (!j.is_object()) return invalid_argument(w + " must be an object");
  Layout l;
  auto get_int = [&](const char* key, int& field) -> Status {
    auto r = json_int_or(j, key, field, w);
    if (!r.is_ok()) return r.status();
    // The --layout parser's bounds: a value that does not fit an int must not
    // wrap into a small one (dp 4294967298 read as 2).
    if (*r < 0 || *r > kMaxLayoutValue)
      return invalid_argument(w + "." + key + " = " + std::to_string(*r) + " is out of range (0.." +
                              std::to_string(kMaxLayoutValue) + ")");
    field = static_cast<int>(*r);
    return Status::ok();
  };
  LOOM_RETURN_IF_ERROR(get_int("dp", l.dp));
  LOOM_RETURN_IF_ERROR(get_int("tp", l.tp));
  LOOM_RETURN_IF_ERROR(get_int("pp", l.pp));
  LOOM_RETURN_IF_ERROR(get_int("ep", l.ep));
  LOOM_RETURN_IF_ERROR(get_int("cp", l.cp));
  if (j.contains("expert_tensor_parallel")) LOOM_RETURN_IF_ERROR(get_int("expert_tensor_parallel", l.etp));
  if (l.etp == l.tp) l.etp = 0;  // the default's one spelling (core/layout.cc)
  LOOM_RETURN_IF_ERROR(get_int("zero", l.zero));
  LOOM_RETURN_IF_ERROR(get_int("micro_batch", l.micro_batch));
  LOOM_RETURN_IF_ERROR(get_int("virtual_stages", l.virtual_stages));
  LOOM_RETURN_IF_ERROR(get_int("first_stage_layers", l.first_stage_layers));
  LOOM_RETURN_IF_ERROR(get_int("recompute_layers", l.recompute_layers));
  LOOM_RETURN_IF_ERROR(get_int("last_stage_layers", l.last_stage_layers));
  LOOM_ASSIGN_OR_RETURN(std::string sched, json_string_or(j, "schedule", "1f1b", w));
  LOOM_ASSIGN_OR_RETURN(l.schedule, parse_schedule(sched));
  LOOM_ASSIGN_OR_RETURN(std::string rc, json_string_or(j, "recompute", "none", w));
  LOOM_ASSIGN_OR_RETURN(l.recompute, parse_recompute(rc));
  if (j.contains("recompute_modules")) {
    LOOM_ASSIGN_OR_RETURN(std::string mods, json_string(j, "recompute_modules", w));
    LOOM_ASSIGN_OR_RETURN(l.recompute_modules, parse_recompute_modules(mods));
  }
  LOOM_ASSIGN_OR_RETURN(l.sequence_parallel, json_bool_or(j, "sequence_parallel", false, w));
  LOOM_ASSIGN_OR_RETURN(l.overlap_grad_reduce, json_bool_or(j, "overlap_grad_reduce", true, w));
  LOOM_ASSIGN_OR_RETURN(l.overlap_param_gather, json_bool_or(j, "overlap_param_gather", true, w));
  LOOM_ASSIGN_OR_RETURN(std::string cpc, json_string_or(j, "cp_comm", "p2p", w));
  LOOM_ASSIGN_OR_RETURN(l.cp_comm, parse_cp_comm(cpc));
  LOOM_ASSIGN_OR_RETURN(l.rank_order, json_string_or(j, "rank_order", l.rank_order, w));
  return l;
}

}  // namespace

std::string train_spec_to_json(const TrainSpec& train) { return train_json(train).dump(); }
std::string layout_to_json(const Layout& layout) { return layout_json(layout).dump(); }

std::string Plan::model_hash() const { return content_hash(model_spec_to_json(model)); }
std::string Plan::hw_hash() const { return content_hash(hw_profile_to_json(hw)); }

ProgramConfig Plan::program_config() const { return program_config_for(layout, train.global_batch, grad_buckets); }

std::string Plan::plan_hash() const {
  std::string canon = model_hash() + hw_hash() + train_json(train).dump() + std::to_string(world_size) +
                      layout_json(layout).dump() + program_hash(program_config());
  return content_hash(canon);
}

std::string plan_to_json(const Plan& p) {
  OrderedJson j;
  j["schema_version"] = p.schema_version;
  j["loom_version"] = p.loom_version.empty() ? loom_version() : p.loom_version;
  j["created_by"] = p.created_by;
  j["plan_hash"] = p.plan_hash();
  j["model"] = {{"name", p.model.name}, {"hash", p.model_hash()},
                {"config", OrderedJson::parse(model_spec_to_json(p.model))}};
  j["hardware"] = {{"name", p.hw.name}, {"hash", p.hw_hash()},
                   {"profile", OrderedJson::parse(hw_profile_to_json(p.hw))}};
  j["train"] = train_json(p.train);
  j["world_size"] = p.world_size;
  j["layout"] = layout_json(p.layout);
  {
    const ProgramConfig pc = p.program_config();
    OrderedJson prog = OrderedJson::parse(program_config_to_json(pc));
    prog["hash"] = program_hash(pc);
    j["program"] = prog;
  }
  j["sim_options"] = OrderedJson::parse(p.sim_options_json.empty() ? "{}" : p.sim_options_json);
  j["prediction"] = OrderedJson::parse(p.prediction_json.empty() ? "{}" : p.prediction_json);
  return j.dump(2) + "\n";
}

Result<Plan> parse_plan(const std::string& text, const std::string& what) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  if (!j.is_object()) return invalid_argument(what + ": a plan must be a JSON object");
  Plan p;
  LOOM_ASSIGN_OR_RETURN(int64_t version, json_int(j, "schema_version", what));
  if (version != kPlanSchemaVersion)
    return invalid_argument(what + ": schema_version " + std::to_string(version) + " is not supported by Loom " +
                            loom_version() + " (it reads version " + std::to_string(kPlanSchemaVersion) +
                            "); re-create the plan with this `loom plan`");
  p.schema_version = static_cast<int>(version);
  LOOM_ASSIGN_OR_RETURN(p.loom_version, json_string_or(j, "loom_version", "", what));
  LOOM_ASSIGN_OR_RETURN(p.created_by, json_string_or(j, "created_by", "", what));
  for (const char* section : {"model", "hardware", "train", "layout", "program"}) {
    if (!j.contains(section) || !j[section].is_object())
      return invalid_argument(what + ": section '" + section + "' is missing; re-create the plan with `loom plan`");
  }
  const Json& jm = j["model"];
  if (!jm.contains("config") || !jm["config"].is_object())
    return invalid_argument(what + ": model.config is missing (the embedded config.json)");
  LOOM_ASSIGN_OR_RETURN(p.model, parse_model_spec(jm["config"].dump(), what + ": model.config"));
  LOOM_ASSIGN_OR_RETURN(std::string mname, json_string_or(jm, "name", p.model.name, what + ": model"));
  p.model.name = mname;
  const Json& jh = j["hardware"];
  if (!jh.contains("profile") || !jh["profile"].is_object())
    return invalid_argument(what + ": hardware.profile is missing (the embedded hardware profile)");
  LOOM_ASSIGN_OR_RETURN(p.hw, parse_hw_profile(jh["profile"].dump(), what + ": hardware.profile"));
  LOOM_ASSIGN_OR_RETURN(std::string hname, json_string_or(jh, "name", p.hw.name, what + ": hardware"));
  p.hw.name = hname;
  LOOM_ASSIGN_OR_RETURN(std::string mhash, json_string_or(jm, "hash", "", what + ": model"));
  if (!mhash.empty() && mhash != p.model_hash())
    return invalid_argument(what + ": model.hash " + mhash + " does not match the embedded config (" +
                            p.model_hash() + "); the config was edited after planning: re-run `loom plan`");
  LOOM_ASSIGN_OR_RETURN(std::string hhash, json_string_or(jh, "hash", "", what + ": hardware"));
  if (!hhash.empty() && hhash != p.hw_hash())
    return invalid_argument(what + ": hardware.hash " + hhash + " does not match the embedded profile (" +
                            p.hw_hash() + "); the profile was edited after planning: re-run `loom plan`");
  LOOM_ASSIGN_OR_RETURN(p.train, parse_train(j["train"]));
  LOOM_ASSIGN_OR_RETURN(p.layout, parse_layout_json(j["layout"]));
  LOOM_ASSIGN_OR_RETURN(int64_t world, json_positive_int(j, "world_size", what));
  if (world > kMaxLayoutValue)
    return invalid_argument(what + ": world_size = " + std::to_string(world) + " is out of range (at most " +
                            std::to_string(kMaxLayoutValue) + " ranks)");
  p.world_size = static_cast<int>(world);
  LOOM_RETURN_IF_ERROR(validate_layout(p.layout, p.model, p.train, p.world_size).with_context(what));
  LOOM_ASSIGN_OR_RETURN(int64_t buckets, json_int(j["program"], "grad_buckets", what + ": program"));
  if (buckets < 1 || buckets > 32767)
    return invalid_argument(what + ": program.grad_buckets = " + std::to_string(buckets) + " is out of range [1, 32767]");
  p.grad_buckets = int(buckets);
  LOOM_ASSIGN_OR_RETURN(std::string stored_hash, json_string_or(j, "plan_hash", "", what));
  p.hash_checked = !stored_hash.empty();
  if (!stored_hash.empty() && stored_hash != p.plan_hash())
    return invalid_argument(what + ": plan_hash " + stored_hash + " does not match the plan's contents (" +
                            p.plan_hash() + "); train, layout or world_size were edited after planning: re-run "
                            "`loom plan` (or `loom plan --layout ...` for a hand-chosen layout)");
  {
    // The program section must be the one layout, train spec and buckets
    // give: a hand-edited section would run another program than predicted.
    Json jp = j["program"];
    LOOM_ASSIGN_OR_RETURN(std::string phash, json_string(jp, "hash", what + ": program"));
    jp.erase("hash");
    LOOM_ASSIGN_OR_RETURN(ProgramConfig stored, parse_program_config(jp.dump(), what + ": program"));
    p.grad_buckets = stored.grad_buckets;
    const ProgramConfig derived = p.program_config();
    if (std::string diff = program_config_diff(stored, derived); !diff.empty())
      return invalid_argument(what + ": the program section disagrees with the layout and train spec (" + diff +
                              ", stored vs implied); it was edited after planning: re-run `loom plan`");
    if (phash != program_hash(stored))
      return invalid_argument(what + ": program.hash " + phash + " does not match the program section (" +
                              program_hash(stored) + "); re-run `loom plan`");
  }
  // The opaque sections keep their key order (the text already parsed once).
  OrderedJson ordered = OrderedJson::parse(text);
  if (ordered.contains("sim_options") && ordered["sim_options"].is_object())
    p.sim_options_json = ordered["sim_options"].dump();
  if (ordered.contains("prediction") && ordered["prediction"].is_object())
    p.prediction_json = ordered["prediction"].dump();
  return p;
}

Result<Plan> load_plan(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_plan(text, path);
}

Status save_plan(const Plan& plan, const std::string& path) { return write_text_file(path, plan_to_json(plan)); }

}  // namespace loom
