// Checkpoint snapshots and restores of a Trainer: every tensor goes out under
// its global name as this rank's TP slice, and comes back as whatever slice
// the loading rank needs, whatever the layout that wrote it.
#include <cstdlib>
#include <cstring>

#include "core/json_util.h"
#include "exec/backend/backend_error.h"
#include "exec/backend/memory_ledger.h"
#include "exec/checkpoint/checkpoint.h"
#include "exec/checkpoint/training_state.h"
#include "exec/runtime/trainer_checkpoint.h"
#include "exec/runtime/trainer_impl.h"

namespace loom::exec {

namespace {

// The rectangle of the global tensor a ParamInfo's local data covers.
void slice_of(const ParamInfo& p, std::vector<int64_t>* offset, std::vector<int64_t>* extent) {
  offset->assign(p.global_shape.size(), 0);
  *extent = p.local_shape;
  if (p.shard == ShardKind::kSplitDim0) (*offset)[0] = p.shard_offset;
  if (p.shard == ShardKind::kSplitDim1) (*offset)[1] = p.shard_offset;
}

// A host-readable view of n floats of the backend's memory: the memory itself
// on a host-visible backend, else a copy staged into *staging.
const float* host_view(ComputeBackend* be, const float* src, size_t n, std::vector<float>* staging) {
  if (be->host_visible()) return src;
  staging->resize(n);
  be->copy_to_host(staging->data(), src, n * sizeof(float));
  return staging->data();
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string t = "[";
  for (size_t i = 0; i < d.size(); ++i) t += (i ? ", " : "") + std::to_string(d[i]);
  return t + "]";
}

// A checkpoint loads under any layout of the model that wrote it, and only of
// that model: a restore would otherwise read the top-left corner of every
// tensor of a wider model, or drop layers, without a word. The model recorded
// in metadata.json (the canonical config) must equal this run's in every field
// but the name; then every tensor this rank needs must exist with its global
// shape. Both failures say "checkpoint is for a different model".
Status check_same_model(const ckpt::CheckpointReader& r, const ModelSpec& model, const ParamStore& params) {
  const std::string head = "checkpoint is for a different model (" + r.path() + ")";
  const std::string fix = "; resume with a plan of the model that wrote it (any layout of it loads), or start "
                          "without --resume";
  auto meta = parse_json(r.metadata_json(), r.path() + "/metadata.json");
  if (meta.is_ok() && meta->is_object() && meta->contains("model") && (*meta)["model"].is_object()) {
    const Json& saved = (*meta)["model"];
    LOOM_ASSIGN_OR_RETURN(Json mine_all, parse_json(model_spec_to_json(model), "model"));
    const Json& mine = mine_all;
    // Friendly names of the --scale keys next to the config's.
    auto alias = [](const std::string& k) -> std::string {
      if (k == "num_hidden_layers" || k == "n_layer") return " (layers)";
      if (k == "hidden_size" || k == "n_embd") return " (hidden)";
      if (k == "num_attention_heads" || k == "n_head") return " (heads)";
      if (k == "num_key_value_heads") return " (kv_heads)";
      if (k == "intermediate_size" || k == "n_inner") return " (ffn)";
      if (k == "vocab_size") return " (vocab)";
      return "";
    };
    std::string differs;
    auto note = [&](const std::string& k, const Json* a, const Json* b) {
      differs += (differs.empty() ? "" : "; ") + k + alias(k) + " " + (a ? a->dump() : "absent") + " in the checkpoint, " +
                 (b ? b->dump() : "absent") + " in this run";
    };
    for (auto it = saved.begin(); it != saved.end(); ++it) {
      if (it.key() == "_name_or_path" || it.key() == "name") continue;
      const Json* other = mine.contains(it.key()) ? &mine[it.key()] : nullptr;
      if (!other || *other != it.value()) note(it.key(), &it.value(), other);
    }
    for (auto it = mine.begin(); it != mine.end(); ++it) {
      if (it.key() == "_name_or_path" || it.key() == "name" || saved.contains(it.key())) continue;
      note(it.key(), nullptr, &it.value());
    }
    if (!differs.empty()) return invalid_argument(head + ": " + differs + fix);
  }
  // Older or foreign checkpoints without the model: the tensors themselves.
  for (const std::string& name : r.tensor_names(false)) {
    if (name.rfind("layers.", 0) != 0) continue;
    const int layer = std::atoi(name.c_str() + 7);
    if (layer >= model.num_layers)
      return invalid_argument(head + ": it holds " + name + " but this run's model has " +
                              std::to_string(model.num_layers) + " layers" + fix);
  }
  for (const ParamInfo& p : params.infos()) {
    auto shape = r.global_shape(p.name, false);
    if (!shape.is_ok())
      return invalid_argument(head + ": it has no tensor " + p.name + ", which this run's model has" + fix);
    if (*shape != p.global_shape)
      return invalid_argument(head + ": tensor " + p.name + " is " + dims_text(*shape) + " in the checkpoint, " +
                              dims_text(p.global_shape) + " in this run" + fix);
  }
  return Status::ok();
}

}  // namespace

namespace {

Status snapshot_impl(Trainer::Impl& s, int64_t next_step, bool light, ckpt::SaveRequest* out) {
  const Optimizer& opt = *s.optimizer;
  out->step = next_step;
  out->light = light;
  Json st;
  st["step"] = next_step;
  st["adam_step"] = opt.adam_step();
  st["consumed_samples"] = next_step * s.cfg.train.global_batch;
  st["consumed_tokens"] = next_step * s.cfg.train.tokens_per_step();
  st["lr_schedule_step"] = next_step;
  st["loss_scale"] = opt.loss_scale();  // fp32 and bf16: no loss scaling
  st["loss_scale_good_steps"] = opt.scaling() ? opt.scaler().good_steps() : 0;
  st["precision"] = precision_name(s.backend->kernels().precision());
  st["rng"] = {{"seed", s.cfg.train.seed}, {"note", "parameters and data derive from (seed, global index)"}};
  st["data"] = Json::parse(s.data ? s.data->state_json() : "{}");
  st["rank"] = s.world->rank();
  st["coords"] = {{"dp", s.coords.dp}, {"tp", s.coords.tp}, {"pp", s.coords.pp}, {"cp", s.coords.cp}};
  out->training_state_json = st.dump(2);
  if (light) return Status::ok();

  // With ZeRO each rank has updated only its own shard of the parameters (the
  // all-gather of the rest runs at the start of the next step, or ZeRO-3
  // holds only its shard): gather everything first.
  DataParallel& dp = *s.sharding;
  LOOM_RETURN_IF_ERROR(dp.wait_all());
  LOOM_RETURN_IF_ERROR(dp.gather_all_params());
  // Adam moments: whole local arrays, gathered from the ZeRO shards.
  // Device state is staged to host memory here, before the async writer runs.
  const size_t numel = size_t(s.params.numel());
  std::vector<float> m_host, v_host, p_host;
  const float* m = nullptr;
  const float* v = nullptr;
  if (dp.zero() >= 1) {
    // Gathered straight into host memory on the CPU; through device buffers
    // (then one copy each) on a device backend.
    m_host.resize(numel);
    v_host.resize(numel);
    DeviceBuffer m_full, v_full;
    float* m_dst = m_host.data();
    float* v_dst = v_host.data();
    if (!s.backend->host_visible()) {
      MemoryClassScope charge(MemoryClass::kOptimizer);
      m_full = DeviceBuffer(s.backend, numel * sizeof(float));
      v_full = DeviceBuffer(s.backend, numel * sizeof(float));
      m_dst = m_full.f32();
      v_dst = v_full.f32();
    }
    LOOM_RETURN_IF_ERROR(dp.gather_state(opt.exp_avg(), m_dst));
    LOOM_RETURN_IF_ERROR(dp.gather_state(opt.exp_avg_sq(), v_dst));
    if (!m_full.empty()) {
      s.backend->copy_to_host(m_host.data(), m_full.f32(), numel * sizeof(float));
      s.backend->copy_to_host(v_host.data(), v_full.f32(), numel * sizeof(float));
    }
    m = m_host.data();
    v = v_host.data();
  } else {
    m = host_view(s.backend, opt.exp_avg(), numel, &m_host);
    v = host_view(s.backend, opt.exp_avg_sq(), numel, &v_host);
  }
  const float* params = host_view(s.backend, s.params.params(), numel, &p_host);
  // DP replicas hold the same slices: DP rank 0 writes them. The tied
  // embedding's copy on the last stage equals the first stage's.
  // Routed experts: the expert-DP rank 0 of each expert shard writes them,
  // under their global names, so any EP degree reads them back.
  {
    for (const ParamInfo& p : s.params.infos()) {
      if (p.expert ? !s.expert_dp_rank_zero() : !s.data_rank_zero()) continue;
      if (s.has_embedding_copy_pair && p.name == "embed.wte" && s.coords.pp != 0) continue;
      ckpt::TensorSlice t;
      t.name = p.name;
      t.global_shape = p.global_shape;
      slice_of(p, &t.offset, &t.extent);
      const float* src = params + p.offset;
      t.data.assign(src, src + p.numel);
      out->model.push_back(t);
      for (const char* which : {"exp_avg", "exp_avg_sq"}) {
        ckpt::TensorSlice o = t;
        o.name = std::string(which) + "/" + p.name;
        const float* from = (std::strcmp(which, "exp_avg") == 0 ? m : v) + p.offset;
        o.data.assign(from, from + p.numel);
        out->optimizer.push_back(std::move(o));
      }
    }
  }
  for (int c = 0; c < s.cfg.layout.virtual_stages; ++c) dp.release(c);  // ZeRO-3: back to the own shards
  return Status::ok();
}

Status restore_impl(Trainer::Impl& s, const ckpt::CheckpointReader& r, int64_t* next_step) {
  Optimizer& opt = *s.optimizer;
  DataParallel& dp = *s.sharding;
  if (!r.has_model())
    return invalid_argument("checkpoint " + r.path() + " is a light checkpoint (training state only); resume from a "
                            "full one (they are kept alongside)");
  LOOM_RETURN_IF_ERROR(check_same_model(r, s.cfg.model, s.params));
  LOOM_ASSIGN_OR_RETURN(std::string state_text, r.training_state(0));
  LOOM_ASSIGN_OR_RETURN(ckpt::TrainingState st, ckpt::parse_training_state(state_text, r.path() + ": training state"));
  const int64_t step = st.step;
  // Parameters and moments: this rank's slices, from whichever files hold them.
  std::vector<int64_t> offset, extent;
  // Read into host memory (the backend's own on the CPU, staging otherwise),
  // then move to the device.
  const size_t numel = size_t(s.params.numel());
  const bool direct = s.backend->host_visible();
  std::vector<float> m_full, v_full, p_host;
  if (dp.zero() >= 1 || !direct) {
    m_full.assign(numel, 0.f);
    v_full.assign(numel, 0.f);
  }
  if (!direct) p_host.assign(numel, 0.f);
  LOOM_RETURN_IF_ERROR(dp.wait_all());
  for (int c = 0; c < s.cfg.layout.virtual_stages; ++c) dp.reclaim_released(c);
  float* params = direct ? s.params.params() : p_host.data();
  for (const ParamInfo& p : s.params.infos()) {
    slice_of(p, &offset, &extent);
    LOOM_RETURN_IF_ERROR(
        r.read(p.name, false, offset, extent, params + p.offset).with_context("checkpoint " + r.path()));
    float* m = !m_full.empty() ? m_full.data() + p.offset : opt.exp_avg() + p.offset;
    float* v = !v_full.empty() ? v_full.data() + p.offset : opt.exp_avg_sq() + p.offset;
    LOOM_RETURN_IF_ERROR(r.read("exp_avg/" + p.name, true, offset, extent, m).with_context("checkpoint " + r.path()));
    LOOM_RETURN_IF_ERROR(r.read("exp_avg_sq/" + p.name, true, offset, extent, v).with_context("checkpoint " + r.path()));
  }
  if (!direct) s.backend->copy_to_device(s.params.params(), p_host.data(), numel * sizeof(float));
  if (!m_full.empty()) {  // this rank's shards of the moments (or all of them, staged)
    dp.scatter_state(m_full.data(), opt.exp_avg());
    dp.scatter_state(v_full.data(), opt.exp_avg_sq());
  }
  s.backend->kernels().weights_changed(s.params.params(), s.params.numel());
  for (int c = 0; c < s.cfg.layout.virtual_stages; ++c) dp.release(c);  // ZeRO-3: keep the own shards
  opt.set_adam_step(st.adam_step);
  if (opt.scaling() && st.precision == "fp16" && st.has_loss_scale)
    opt.scaler().restore(st.loss_scale, st.loss_scale_good_steps);
  if (s.data && !st.data_json.empty())
    LOOM_RETURN_IF_ERROR(s.data->restore_state(st.data_json, step * s.cfg.train.global_batch));
  dp.clear_grads();
  *next_step = step;
  return Status::ok();
}

}  // namespace

Status snapshot_trainer(Trainer& t, int64_t next_step, bool light, ckpt::SaveRequest* out) {
  return guard_backend([&] { return snapshot_impl(*t.impl_, next_step, light, out); }, "checkpoint snapshot");
}

Status restore_trainer(Trainer& t, const ckpt::CheckpointReader& r, int64_t* next_step) {
  return guard_backend([&] { return restore_impl(*t.impl_, r, next_step); }, "checkpoint restore");
}

}  // namespace loom::exec
