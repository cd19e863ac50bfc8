// Checkpoint snapshots and restores of a Trainer: every tensor goes out under
// its global name as this rank's TP slice, and comes back as whatever slice
// the loading rank needs, whatever the layout that wrote it.
#include <cstring>

#include "core/json_util.h"
#include "exec/checkpoint/checkpoint.h"
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

}  // namespace

Status Trainer::snapshot(int64_t next_step, bool light, ckpt::SaveRequest* out) {
  Impl& s = *impl_;
  const Layout& l = s.cfg.layout;
  out->step = next_step;
  out->light = light;
  Json st;
  st["step"] = next_step;
  st["adam_step"] = s.adam_step;
  st["consumed_samples"] = next_step * s.cfg.train.global_batch;
  st["consumed_tokens"] = next_step * s.cfg.train.tokens_per_step();
  st["lr_schedule_step"] = next_step;
  st["loss_scale"] = 1.0;  // fp32: no loss scaling
  st["rng"] = {{"seed", s.cfg.train.seed}, {"note", "parameters and data derive from (seed, global index)"}};
  st["data"] = Json::parse(s.data ? s.data->state_json() : "{}");
  st["rank"] = s.world->rank();
  st["coords"] = {{"dp", s.coords.dp}, {"tp", s.coords.tp}, {"pp", s.coords.pp}};
  out->training_state_json = st.dump(2);
  if (light) return Status::ok();

  // With ZeRO each rank has updated only its own shard of the parameters (the
  // all-gather of the rest runs at the start of the next step, or ZeRO-3
  // holds only its shard): gather everything first.
  if (l.zero >= 1 && l.dp > 1)
    for (int c = 0; c < l.virtual_stages; ++c) LOOM_RETURN_IF_ERROR(s.param_gather(c));
  // Adam moments: whole local arrays, gathered from the ZeRO shards.
  std::vector<float> m_full, v_full;
  const float* m = s.m.f32();
  const float* v = s.v.f32();
  if (l.zero >= 1) {
    m_full.assign(size_t(s.params.numel()), 0.f);
    v_full.assign(size_t(s.params.numel()), 0.f);
    for (const Unit& u : s.units) {
      LOOM_RETURN_IF_ERROR(s.dp->all_gather(s.m.f32() + u.shard_offset, m_full.data() + u.begin, u.shard));
      LOOM_RETURN_IF_ERROR(s.dp->all_gather(s.v.f32() + u.shard_offset, v_full.data() + u.begin, u.shard));
    }
    m = m_full.data();
    v = v_full.data();
  }
  // DP replicas hold the same slices: DP rank 0 writes them. The tied
  // embedding's copy on the last stage equals the first stage's.
  if (s.coords.dp == 0) {
    for (const ParamInfo& p : s.params.infos()) {
      if (s.has_embedding_copy_pair && p.name == "embed.wte" && s.coords.pp != 0) continue;
      ckpt::TensorSlice t;
      t.name = p.name;
      t.global_shape = p.global_shape;
      slice_of(p, &t.offset, &t.extent);
      const float* src = s.params.params() + p.offset;
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
  if (l.zero == 3 && l.dp > 1)
    for (int c = 0; c < l.virtual_stages; ++c) s.release(c);
  return Status::ok();
}

Status Trainer::restore(const ckpt::CheckpointReader& r, int64_t* next_step) {
  Impl& s = *impl_;
  const Layout& l = s.cfg.layout;
  if (!r.has_model())
    return invalid_argument("checkpoint " + r.path() + " is a light checkpoint (training state only); resume from a "
                            "full one (they are kept alongside)");
  LOOM_ASSIGN_OR_RETURN(std::string state_text, r.training_state(0));
  LOOM_ASSIGN_OR_RETURN(Json st, parse_json(state_text, r.path() + ": training state"));
  const int64_t step = st.value("step", int64_t(-1));
  if (step < 0) return invalid_argument(r.path() + ": training state has no step");
  // Parameters and moments: this rank's slices, from whichever files hold them.
  std::vector<int64_t> offset, extent;
  std::vector<float> m_full, v_full;
  if (l.zero >= 1) {
    m_full.assign(size_t(s.params.numel()), 0.f);
    v_full.assign(size_t(s.params.numel()), 0.f);
  }
  for (int c = 0; c < l.virtual_stages; ++c) s.reclaim_released(c);
  for (const ParamInfo& p : s.params.infos()) {
    slice_of(p, &offset, &extent);
    LOOM_RETURN_IF_ERROR(r.read(p.name, false, offset, extent, s.params.params() + p.offset)
                             .with_context("checkpoint " + r.path()));
    float* m = l.zero >= 1 ? m_full.data() + p.offset : s.m.f32() + p.offset;
    float* v = l.zero >= 1 ? v_full.data() + p.offset : s.v.f32() + p.offset;
    LOOM_RETURN_IF_ERROR(r.read("exp_avg/" + p.name, true, offset, extent, m).with_context("checkpoint " + r.path()));
    LOOM_RETURN_IF_ERROR(r.read("exp_avg_sq/" + p.name, true, offset, extent, v).with_context("checkpoint " + r.path()));
  }
  if (l.zero >= 1) {
    // Keep this rank's ZeRO shards of the moments.
    for (const Unit& u : s.units) {
      size_t own = u.begin + size_t(s.coords.dp) * u.shard;
      std::memcpy(s.m.f32() + u.shard_offset, m_full.data() + own, u.shard * sizeof(float));
      std::memcpy(s.v.f32() + u.shard_offset, v_full.data() + own, u.shard * sizeof(float));
    }
  }
  if (l.zero == 3 && l.dp > 1)
    for (int c = 0; c < l.virtual_stages; ++c) s.release(c);
  s.adam_step = st.value("adam_step", step);
  if (s.data && st.contains("data"))
    LOOM_RETURN_IF_ERROR(s.data->restore_state(st["data"].dump(), step * s.cfg.train.global_batch));
  s.params.zero_grads();
  *next_step = step;
  return Status::ok();
}

}  // namespace loom::exec
