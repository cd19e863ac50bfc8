#include "sim/framework.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/json_util.h"
#include "sim/export.h"

namespace loom {

namespace {

template <typename T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Result<const Json*> section(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_object())
    return invalid_argument(where + "." + key + " is missing or not an object");
  const Json& s = j[key];
  if (!s.contains("source") || !s["source"].is_string() || s["source"].get<std::string>().empty())
    return invalid_argument(where + "." + key + ".source is missing: say where these defaults were read");
  return &s;
}

Result<std::vector<int>> zero_list(const Json& s, const char* key, const std::string& where) {
  if (!s.contains(key) || !s[key].is_array()) return invalid_argument(where + "." + key + " must be a list of ZeRO stages 0-3");
  std::vector<int> out;
  for (const Json& x : s[key]) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > 3)
      return invalid_argument(where + "." + key + " must hold ZeRO stages 0-3, got " + x.dump());
    out.push_back(int(x.get<int64_t>()));
  }
  return out;
}

Result<std::vector<std::string>> string_list(const Json& s, const char* key, const std::string& where) {
  if (!s.contains(key) || !s[key].is_array() || s[key].empty())
    return invalid_argument(where + "." + key + " must be a non-empty list of names");
  std::vector<std::string> out;
  for (const Json& x : s[key]) {
    if (!x.is_string()) return invalid_argument(where + "." + key + " must hold names, got " + x.dump());
    out.push_back(x.get<std::string>());
  }
  return out;
}

Result<bool> required_bool(const Json& s, const char* key, const std::string& where) {
  if (!s.contains(key) || !s[key].is_boolean()) return invalid_argument(where + "." + key + " must be true or false");
  return s[key].get<bool>();
}

}  // namespace

bool parse_layer_split(const std::string& text, LayerSplitRule* out) {
  if (text == "any") *out = LayerSplitRule::kAny;
  else if (text == "equal_chunks") *out = LayerSplitRule::kEqualChunks;
  else return false;
  return true;
}

// Every key a framework file may hold, per section ("" = the top level): a
// misspelt key would otherwise fall back to its default without a word (e.g.
// "fp32_main_grad" halving the gradients' memory and traffic).
Status check_known_keys(const Json& j, const std::string& w) {
  static const std::map<std::string, std::set<std::string>> kKeys = {
      {"", {"name", "version", "description", "export", "gradients", "overlap", "pipeline", "layouts", "fp8",
            "context_parallel", "loss", "layer", "moe", "optimizer", "dropout", "source", "notes"}},
      {"gradients", {"fp32_main_grads", "zero_each_step", "nan_check", "scale_pass", "hook_add", "gemm_accumulate",
                     "gemm_accumulate_source", "bucket_params", "bucket_params_per_dp_rank", "bucketed_chunks",
                     "bucket_source"}},
      {"overlap", {"grad_reduce_zero_stages", "param_gather", "tp_async_backward", "tp_comm_overlap",
                   "tp_comm_overlap_cfg"}},
      {"pipeline", {"blocking_p2p", "overlap_p2p_comm", "fsdp_once", "layer_split"}},
      {"layouts", {"zero_stages", "pipeline_zero_stages", "schedules", "recompute", "selective_recompute",
                   "sequence_parallel"}},
      {"fp8", {"scaling", "attention", "norm_cast_fused"}},
      {"context_parallel", {"cp_comm"}},
      {"loss", {"cross_entropy"}},
      {"layer", {"ops", "fsdp_copies", "embedding_dense_grad", "qkv_bshd_copies", "fused_backward"}},
      {"moe", {"expert_gemm", "dispatch_sms"}},
      {"optimizer", {"master_bytes", "moment_bytes"}},
  };
  for (const auto& [section_name, keys] : kKeys) {
    const Json* obj = &j;
    if (!section_name.empty()) {
      if (!j.contains(section_name) || !j[section_name].is_object()) continue;  // checked where it is read
      obj = &j[section_name];
    }
    for (const auto& [k, v] : obj->items()) {
      if (keys.count(k) || (!section_name.empty() && (k == "source" || k == "notes"))) continue;
      std::string known;
      for (const auto& x : keys) known += (known.empty() ? "" : ", ") + x;
      return invalid_argument(w + (section_name.empty() ? "" : "." + section_name) + " has no key '" + k +
                              "'; the keys are " + known);
    }
  }
  return Status::ok();
}

Result<Framework> parse_framework(const std::string& json_text, const std::string& name) {
  const std::string w = "framework " + name;
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(json_text, w));
  if (!j.is_object()) return invalid_argument(w + ": the file must hold a JSON object");
  LOOM_RETURN_IF_ERROR(check_known_keys(j, w));
  Framework f;
  f.name = name;
  LOOM_ASSIGN_OR_RETURN(f.version, json_string(j, "version", w));
  LOOM_ASSIGN_OR_RETURN(f.description, json_string_or(j, "description", "", w));
  LOOM_ASSIGN_OR_RETURN(f.export_kind, json_string(j, "export", w));
  if (f.export_kind != "megatron" && f.export_kind != "deepspeed" && f.export_kind != "torchtitan")
    return invalid_argument(w + ".export must be megatron, deepspeed or torchtitan, got '" + f.export_kind + "'");

  LOOM_ASSIGN_OR_RETURN(const Json* g, section(j, "gradients", w));
  LOOM_ASSIGN_OR_RETURN(f.fp32_main_grads, json_bool_or(*g, "fp32_main_grads", false, w + ".gradients"));
  LOOM_ASSIGN_OR_RETURN(f.grad_buffer_zero, json_bool_or(*g, "zero_each_step", false, w + ".gradients"));
  LOOM_ASSIGN_OR_RETURN(f.grad_nan_check, json_bool_or(*g, "nan_check", false, w + ".gradients"));
  LOOM_ASSIGN_OR_RETURN(f.grad_scale_pass, json_bool_or(*g, "scale_pass", false, w + ".gradients"));
  LOOM_ASSIGN_OR_RETURN(f.grad_hook_add, json_bool_or(*g, "hook_add", false, w + ".gradients"));
  LOOM_ASSIGN_OR_RETURN(f.wgrad_gemm_accumulate, json_bool_or(*g, "gemm_accumulate", false, w + ".gradients"));
  if (f.wgrad_gemm_accumulate && !(g->contains("gemm_accumulate_source") && (*g)["gemm_accumulate_source"].is_string()))
    return invalid_argument(w + ".gradients.gemm_accumulate_source is missing: name the code that accumulates the "
                            "weight gradients in the GEMM");
  LOOM_ASSIGN_OR_RETURN(f.grad_bucket_params, json_number_or(*g, "bucket_params", 0.0, w + ".gradients"));
  LOOM_ASSIGN_OR_RETURN(f.grad_bucket_params_per_dp,
                        json_number_or(*g, "bucket_params_per_dp_rank", 0.0, w + ".gradients"));
  if (f.grad_bucket_params < 0 || f.grad_bucket_params_per_dp < 0)
    return invalid_argument(w + ".gradients.bucket_params and bucket_params_per_dp_rank must be >= 0 (parameters)");
  if (f.grad_bucket_params > 0 && !(g->contains("bucket_source") && (*g)["bucket_source"].is_string()))
    return invalid_argument(w + ".gradients.bucket_source is missing: name the code the bucket size was read from");
  if (f.grad_bucket_params_per_dp > 0 && !(f.grad_bucket_params > 0))
    return invalid_argument(w + ".gradients.bucket_params_per_dp_rank needs bucket_params (the smallest bucket)");
  {
    LOOM_ASSIGN_OR_RETURN(std::string bucketed, json_string_or(*g, "bucketed_chunks", "all", w + ".gradients"));
    if (!parse_bucketed_chunks(bucketed, &f.bucketed_chunks))
      return invalid_argument(w + ".gradients.bucketed_chunks must be all, first or none, got '" + bucketed + "'");
    if (g->contains("bucketed_chunks") && !(f.grad_bucket_params > 0))
      return invalid_argument(w + ".gradients.bucketed_chunks needs bucket_params (the bucket size it splits by)");
  }

  LOOM_ASSIGN_OR_RETURN(const Json* o, section(j, "overlap", w));
  LOOM_ASSIGN_OR_RETURN(f.grad_reduce_overlap_zero_stages, zero_list(*o, "grad_reduce_zero_stages", w + ".overlap"));
  if (o->contains("param_gather") && (*o)["param_gather"].is_array()) {
    LOOM_ASSIGN_OR_RETURN(f.param_gather_overlap_zero_stages, zero_list(*o, "param_gather", w + ".overlap"));
  } else {
    if (o->contains("param_gather") && !(*o)["param_gather"].is_boolean())
      return invalid_argument(w + ".overlap.param_gather must be true, false or a list of ZeRO stages");
    LOOM_ASSIGN_OR_RETURN(bool all, json_bool_or(*o, "param_gather", true, w + ".overlap"));
    if (!all) f.param_gather_overlap_zero_stages.clear();
  }
  LOOM_ASSIGN_OR_RETURN(f.tp_async_backward, json_bool_or(*o, "tp_async_backward", false, w + ".overlap"));
  LOOM_ASSIGN_OR_RETURN(f.tp_comm_overlap, json_bool_or(*o, "tp_comm_overlap", false, w + ".overlap"));
  LOOM_ASSIGN_OR_RETURN(std::string ub_cfg, json_string_or(*o, "tp_comm_overlap_cfg", "te2_defaults", w + ".overlap"));
  {
    auto cfg = load_tp_overlap_config(ub_cfg);
    if (!cfg.is_ok()) return invalid_argument(w + ".overlap.tp_comm_overlap_cfg: " + cfg.status().message());
    f.tp_overlap = std::move(cfg).value();
  }

  LOOM_ASSIGN_OR_RETURN(const Json* pp, section(j, "pipeline", w));
  LOOM_ASSIGN_OR_RETURN(f.pp_blocking_p2p, required_bool(*pp, "blocking_p2p", w + ".pipeline"));
  LOOM_ASSIGN_OR_RETURN(f.pp_overlap_p2p_comm, required_bool(*pp, "overlap_p2p_comm", w + ".pipeline"));
  LOOM_ASSIGN_OR_RETURN(f.pp_fsdp_once, json_bool_or(*pp, "fsdp_once", false, w + ".pipeline"));
  // (A pipelined zero=1 layout is then only ever FSDP's priced form:
  // sim_options.h priced_after_backward. Checked with the layouts below.)
  LOOM_ASSIGN_OR_RETURN(std::string split, json_string_or(*pp, "layer_split", "any", w + ".pipeline"));
  if (!parse_layer_split(split, &f.layer_split))
    return invalid_argument(w + ".pipeline.layer_split must be any or equal_chunks, got '" + split + "'");

  LOOM_ASSIGN_OR_RETURN(const Json* l, section(j, "layouts", w));
  const std::string wl = w + ".layouts";
  LOOM_ASSIGN_OR_RETURN(f.zero_stages, zero_list(*l, "zero_stages", wl));
  if (f.zero_stages.empty()) return invalid_argument(wl + ".zero_stages must name at least one ZeRO stage");
  if (l->contains("pipeline_zero_stages")) {
    LOOM_ASSIGN_OR_RETURN(f.pipeline_zero_stages, zero_list(*l, "pipeline_zero_stages", wl));
    for (int z : f.pipeline_zero_stages)
      if (!contains(f.zero_stages, z))
        return invalid_argument(wl + ".pipeline_zero_stages: ZeRO " + std::to_string(z) +
                                " is not among zero_stages; list a subset of them");
    if (f.pipeline_zero_stages.empty())
      return invalid_argument(wl + ".pipeline_zero_stages must name at least one ZeRO stage, or be left out");
  }
  if (f.pp_fsdp_once && contains(f.zero_stages, 1))
    return invalid_argument(w + ".pipeline.fsdp_once prices a pipelined ZeRO-3 as ZeRO-1's traffic, so the stack "
                            "cannot also offer ZeRO-1 (" + wl + ".zero_stages lists 1); drop one of them");
  LOOM_ASSIGN_OR_RETURN(auto scheds, string_list(*l, "schedules", wl));
  for (const auto& s : scheds) {
    auto r = parse_schedule(s);
    if (!r.is_ok()) return invalid_argument(wl + ".schedules: " + r.status().message());
    f.schedules.push_back(*r);
  }
  LOOM_ASSIGN_OR_RETURN(auto recs, string_list(*l, "recompute", wl));
  for (const auto& s : recs) {
    auto r = parse_recompute(s);
    if (!r.is_ok()) return invalid_argument(wl + ".recompute: " + r.status().message());
    f.recompute.push_back(*r);
  }
  LOOM_ASSIGN_OR_RETURN(std::string sel, json_string_or(*l, "selective_recompute", "attention_core", wl));
  if (!parse_selective_recompute(sel, &f.selective_recompute))
    return invalid_argument(wl + ".selective_recompute must be attention_core or every_other_matmul, got '" + sel + "'");
  LOOM_ASSIGN_OR_RETURN(std::string spr, json_string(*l, "sequence_parallel", wl));
  if (spr == "optional") f.sequence_parallel = SequenceParallelRule::kOptional;
  else if (spr == "always") f.sequence_parallel = SequenceParallelRule::kAlways;
  else if (spr == "never") f.sequence_parallel = SequenceParallelRule::kNever;
  else return invalid_argument(wl + ".sequence_parallel must be optional, always or never, got '" + spr + "'");

  LOOM_ASSIGN_OR_RETURN(const Json* e, section(j, "fp8", w));
  LOOM_ASSIGN_OR_RETURN(std::string scaling, json_string(*e, "scaling", w + ".fp8"));
  if (!parse_fp8_scaling(scaling, &f.fp8_scaling))
    return invalid_argument(w + ".fp8.scaling must be delayed or current, got '" + scaling + "'");
  LOOM_ASSIGN_OR_RETURN(f.fp8_attention, json_bool_or(*e, "attention", false, w + ".fp8"));
  LOOM_ASSIGN_OR_RETURN(f.fp8_norm_cast_fused, json_bool_or(*e, "norm_cast_fused", false, w + ".fp8"));

  // Optional: the K/V exchanges of its context parallelism, with their source.
  if (j.contains("context_parallel")) {
    LOOM_ASSIGN_OR_RETURN(const Json* cpj, section(j, "context_parallel", w));
    LOOM_ASSIGN_OR_RETURN(auto comms, string_list(*cpj, "cp_comm", w + ".context_parallel"));
    if (comms.empty()) return invalid_argument(w + ".context_parallel.cp_comm must name at least one: p2p, all_gather");
    f.cp_comms.clear();
    for (const auto& c : comms) {
      auto r = parse_cp_comm(c);
      if (!r.is_ok()) return invalid_argument(w + ".context_parallel.cp_comm: " + r.status().message());
      f.cp_comms.push_back(*r);
    }
    if (!cpj->contains("source") || !(*cpj)["source"].is_string())
      return invalid_argument(w + ".context_parallel.source is missing: name the code the K/V exchanges were read from");
  }
  // Optional: the loss's implementation, with its source.
  if (j.contains("loss")) {
    LOOM_ASSIGN_OR_RETURN(const Json* lo, section(j, "loss", w));
    LOOM_ASSIGN_OR_RETURN(std::string ce, json_string(*lo, "cross_entropy", w + ".loss"));
    if (!parse_cross_entropy(ce, &f.cross_entropy))
      return invalid_argument(w + ".loss.cross_entropy must be " + cross_entropy_names() + ", got '" + ce + "'");
    if (!lo->contains("source") || !(*lo)["source"].is_string())
      return invalid_argument(w + ".loss.source is missing: name the code the loss's implementation was read from");
  }
  // Optional: how the stack writes a layer's non-GEMM work, and FSDP2's
  // copies, with their source.
  if (j.contains("layer")) {
    LOOM_ASSIGN_OR_RETURN(const Json* ly, section(j, "layer", w));
    LOOM_ASSIGN_OR_RETURN(std::string ops, json_string_or(*ly, "ops", "fused", w + ".layer"));
    if (!parse_layer_ops(ops, &f.layer_ops))
      return invalid_argument(w + ".layer.ops must be fused or torch_eager, got '" + ops + "'");
    LOOM_ASSIGN_OR_RETURN(f.fsdp_copies, json_bool_or(*ly, "fsdp_copies", false, w + ".layer"));
    LOOM_ASSIGN_OR_RETURN(f.embedding_dense_grad, json_bool_or(*ly, "embedding_dense_grad", false, w + ".layer"));
    LOOM_ASSIGN_OR_RETURN(f.qkv_bshd_copies, json_bool_or(*ly, "qkv_bshd_copies", false, w + ".layer"));
    LOOM_ASSIGN_OR_RETURN(f.fused_layer_backward, json_bool_or(*ly, "fused_backward", false, w + ".layer"));
    if (f.fused_layer_backward && f.layer_ops == LayerOps::kTorchEager)
      return invalid_argument(w + ".layer.fused_backward describes fused kernels, but layer.ops is torch_eager; drop one");
  }
  // Optional: how the stack runs a MoE layer's local experts, with its source.
  if (j.contains("moe")) {
    LOOM_ASSIGN_OR_RETURN(const Json* mo, section(j, "moe", w));
    LOOM_ASSIGN_OR_RETURN(std::string eg, json_string_or(*mo, "expert_gemm", "grouped", w + ".moe"));
    if (!parse_expert_gemm(eg, &f.expert_gemm))
      return invalid_argument(w + ".moe.expert_gemm must be grouped or per_expert, got '" + eg + "'");
    LOOM_ASSIGN_OR_RETURN(int64_t sms, json_int_or(*mo, "dispatch_sms", 0, w + ".moe"));
    LOOM_RETURN_IF_ERROR(check_moe_dispatch_sms(sms, w + ".moe.dispatch_sms"));
    f.moe_dispatch_sms = int(sms);
  }
  // Optional: the bytes of Adam's state a parameter, with their source.
  if (j.contains("optimizer")) {
    LOOM_ASSIGN_OR_RETURN(const Json* op, section(j, "optimizer", w));
    LOOM_ASSIGN_OR_RETURN(f.optimizer_master_bytes, json_number_or(*op, "master_bytes", 4.0, w + ".optimizer"));
    LOOM_ASSIGN_OR_RETURN(f.optimizer_moment_bytes, json_number_or(*op, "moment_bytes", 4.0, w + ".optimizer"));
    LOOM_RETURN_IF_ERROR(check_optimizer_state_bytes(f.optimizer_master_bytes, f.optimizer_moment_bytes, w + ".optimizer"));
    if (!op->contains("source") || !(*op)["source"].is_string())
      return invalid_argument(w + ".optimizer.source is missing: name the code or report the optimizer's state dtypes were read from");
  }
  LOOM_ASSIGN_OR_RETURN(int64_t dropout, json_int_or(j, "dropout", -1, w));
  if (dropout < -1 || dropout > 1) return invalid_argument(w + ".dropout must be -1 (from the model), 0 or 1");
  f.dropout = int(dropout);
  if (!j.contains("source") || !j["source"].is_string()) return invalid_argument(w + ".source is missing");
  return f;
}

Result<Framework> load_framework(const std::string& path_or_name) {
  LOOM_ASSIGN_OR_RETURN(std::string path, find_description_file(path_or_name, "frameworks"));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_framework(text, std::filesystem::path(path).stem().string());
}

void apply_framework(const Framework& f, SimOptions* opt) {
  opt->framework = f.name;
  opt->fp32_main_grads = f.fp32_main_grads;
  opt->tp_async_backward = f.tp_async_backward;
  opt->tp_comm_overlap = f.tp_comm_overlap;
  opt->tp_overlap = f.tp_overlap;
  opt->pp_blocking_p2p = f.pp_blocking_p2p;
  opt->pp_overlap_p2p_comm = f.pp_overlap_p2p_comm;
  opt->pp_fsdp_once = f.pp_fsdp_once;
  opt->fp8_scaling = f.fp8_scaling;
  opt->fp8_attention = f.fp8_attention;
  opt->fp8_norm_cast_fused = f.fp8_norm_cast_fused;
  opt->selective_recompute = f.selective_recompute;
  opt->cross_entropy = f.cross_entropy;
  opt->layer_ops = f.layer_ops;
  opt->fsdp_copies = f.fsdp_copies;
  opt->embedding_dense_grad = f.embedding_dense_grad;
  opt->qkv_bshd_copies = f.qkv_bshd_copies;
  opt->fused_layer_backward = f.fused_layer_backward;
  opt->grad_buffer_zero = f.grad_buffer_zero;
  opt->grad_nan_check = f.grad_nan_check;
  opt->grad_scale_pass = f.grad_scale_pass;
  opt->grad_hook_add = f.grad_hook_add;
  opt->wgrad_gemm_accumulate = f.wgrad_gemm_accumulate;
  opt->optimizer_master_bytes = f.optimizer_master_bytes;
  opt->optimizer_moment_bytes = f.optimizer_moment_bytes;
  opt->grad_bucket_params = f.grad_bucket_params;
  opt->grad_bucket_params_per_dp = f.grad_bucket_params_per_dp;
  opt->bucketed_chunks = f.bucketed_chunks;
  opt->expert_gemm = f.expert_gemm;
  opt->moe_dispatch_sms = f.moe_dispatch_sms;
  opt->dropout = f.dropout;
}

void apply_framework(const Framework& f, SearchSpace* sp) {
  sp->zero_stages = f.zero_stages;
  sp->pipeline_zero_stages = f.pipeline_zero_stages;
  sp->schedules = f.schedules;
  sp->recompute = f.recompute;
  sp->try_sequence_parallel = f.sequence_parallel != SequenceParallelRule::kNever;
  sp->sequence_parallel_required = f.sequence_parallel == SequenceParallelRule::kAlways;
  sp->overlap_grad_zero_stages = f.grad_reduce_overlap_zero_stages;
  sp->overlap_grad_reduce = !f.grad_reduce_overlap_zero_stages.empty();
  sp->overlap_param_gather = !f.param_gather_overlap_zero_stages.empty();
  sp->overlap_param_zero_stages = f.param_gather_overlap_zero_stages;
  // Pinned first/last chunks only where the stack can state them: Megatron's
  // --pipeline-model-parallel-layout (any schedule; before core_v0.13.0
  // --decoder-first/last-pipeline-num-layers, not with the interleaved
  // --num-layers-per-virtual-pipeline-stage), torchtitan's
  // module_fqns_per_model_part (any schedule); DeepSpeed's config cannot.
  // DeepSpeed has no context parallelism (its Ulysses sequence parallelism
  // is another scheme); Megatron-Core and torchtitan ring attention, and
  // Megatron-Core the all-gathered K/V too.
  if (f.export_kind == "deepspeed") sp->max_cp = 1;
  sp->cp_comms = f.cp_comms;
  const bool equal_chunks = f.export_kind == "megatron" && f.layer_split == LayerSplitRule::kEqualChunks;
  sp->try_uneven_ends = f.export_kind != "deepspeed";
  sp->uneven_ends_interleaved = f.export_kind != "deepspeed" && !equal_chunks;
  // Older Megatron states a split by layers per virtual stage or by the
  // first and last stage's layers (the rest equal): other splits cannot be
  // run there.
  sp->megatron_splits = equal_chunks;
  // Megatron recomputes the first N layers of each chunk (--recompute-method
  // block --recompute-num-layers N), as Loom's executor does; the other
  // stacks whole blocks or none.
  sp->partial_recompute = f.export_kind == "megatron" && contains(f.recompute, Recompute::kFull);
  // Megatron-core's --recompute-modules: the search adds the cheap ones that
  // apply (enumerate_layouts), --fix recompute_modules pins any set.
  sp->recompute_modules = f.export_kind == "megatron" && contains(f.recompute, Recompute::kSelective);
}

Status check_layout_for_framework(const Framework& f, const ModelSpec& model, const Layout& l) {
  auto names = [](const auto& v, auto name_of) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + std::string(name_of(x));
    return s;
  };
  if (!contains(f.zero_stages, l.zero))
    return invalid_argument("zero=" + std::to_string(l.zero) + ": " + f.name + " offers ZeRO " +
                            names(f.zero_stages, [](int z) { return std::to_string(z); }));
  if (l.pp > 1 && !f.pipeline_zero_stages.empty() && !contains(f.pipeline_zero_stages, l.zero))
    return invalid_argument("zero=" + std::to_string(l.zero) + " with pp=" + std::to_string(l.pp) + ": " + f.name +
                            " runs ZeRO " + names(f.pipeline_zero_stages, [](int z) { return std::to_string(z); }) +
                            " under a pipeline; use one of them, or pp=1");
  if (l.pp > 1 && !contains(f.schedules, l.schedule))
    return invalid_argument(std::string("schedule=") + schedule_name(l.schedule) + ": " + f.name + " offers " +
                            names(f.schedules, [](Schedule s) { return schedule_name(s); }));
  if (!contains(f.recompute, l.recompute))
    return invalid_argument(std::string("recompute=") + recompute_name(l.recompute) + ": " + f.name + " offers " +
                            names(f.recompute, [](Recompute r) { return recompute_name(r); }));
  if (l.tp > 1 && f.sequence_parallel == SequenceParallelRule::kAlways && !l.sequence_parallel)
    return invalid_argument("sp=0: " + f.name + "'s tensor parallelism always shards the sequence; use sp=1");
  if (l.sequence_parallel && f.sequence_parallel == SequenceParallelRule::kNever)
    return invalid_argument("sp=1: " + f.name + " has no sequence parallelism; use sp=0");
  if (l.cp > 1 && f.export_kind == "deepspeed")
    return invalid_argument("cp=" + std::to_string(l.cp) + ": " + f.name +
                            " has no context parallelism (ring attention); use cp=1, or megatron / torchtitan");
  if (l.cp > 1 && !contains(f.cp_comms, l.cp_comm))
    return invalid_argument(std::string("cp_comm=") + cp_comm_name(l.cp_comm) + ": " + f.name + " exchanges K/V by " +
                            names(f.cp_comms, [](CpComm c) { return cp_comm_name(c); }) + "; use that cp_comm");
  if ((l.first_stage_layers > 0 || l.last_stage_layers > 0) && f.export_kind == "deepspeed")
    return invalid_argument("first=/last=: " + f.name + " cannot pin the first and last pipeline chunk; drop first=/last=");
  if (l.recompute_modules && f.export_kind != "megatron")
    return invalid_argument("recompute_modules=" + recompute_modules_text(l.recompute_modules) + ": " + f.name +
                            " has no selective recompute by module (Megatron's --recompute-modules); drop "
                            "recompute_modules");
  if (l.recompute_layers > 0 && f.export_kind != "megatron")
    return invalid_argument("recompute_layers=" + std::to_string(l.recompute_layers) + ": " + f.name +
                            " recomputes every layer or none (recompute_layers is Megatron's --recompute-method "
                            "block); drop recompute_layers");
  // Megatron before core_v0.13.0 states a layer split only one way
  // (sim/export.h); since then --pipeline-model-parallel-layout states any.
  if (f.export_kind == "megatron" && f.layer_split == LayerSplitRule::kEqualChunks) {
    Status s = megatron_split_status(model, l);
    if (!s.is_ok()) return Status(s.code(), s.message() + " (" + f.name + " with pipeline.layer_split equal_chunks)");
  }
  return Status::ok();
}

Status check_layout_for_stack(const Framework* f, const ModelSpec& model, const Layout& l) {
  if (l.schedule == Schedule::kDualPipeV && !dualpipev_runs_zero(l.zero, f && f->pp_fsdp_once))
    return invalid_argument("schedule=dualpipev with zero=" + std::to_string(l.zero) +
                            " is not modelled for " + (f ? f->name : std::string("Loom's executor")) +
                            ": its deferred weight gradients finish a chunk's gradients after the backward that a "
                            "ZeRO-2/3 reduce-scatter follows; use zero=0 or zero=1 (DeepSeek-V3 ran ZeRO-1), or "
                            "--framework torchtitan, whose FSDP reduces once a step under a pipeline (zero=3)");
  if (f) return check_layout_for_framework(*f, model, l);
  // Loom's executor (no framework) runs every layout validate_layout
  // accepts, but for Megatron's recompute modules.
  if (l.recompute_modules)
    return invalid_argument("recompute_modules=" + recompute_modules_text(l.recompute_modules) +
                            ": Loom's executor re-runs the attention core only under recompute=selective; plan with "
                            "--framework megatron-core (Megatron's --recompute-modules), or drop recompute_modules");
  return Status::ok();
}

void apply_framework_overlap(const Framework& f, const std::string& layout_text, Layout* l) {
  if (layout_text.find("overlap_") != std::string::npos) return;
  l->overlap_grad_reduce = contains(f.grad_reduce_overlap_zero_stages, l->zero);
  l->overlap_param_gather = contains(f.param_gather_overlap_zero_stages, l->zero);
}

}  // namespace loom
