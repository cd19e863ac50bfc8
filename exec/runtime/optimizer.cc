#include "exec/runtime/optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "exec/backend/memory_ledger.h"

namespace loom::exec {

double lr_schedule(const TrainSpec& t, int64_t step) {
  if (t.warmup_steps > 0 && step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  if (t.lr_schedule == LrSchedule::kConstant || t.steps <= t.warmup_steps) return t.lr;
  double progress = double(step - t.warmup_steps) / double(std::max<int64_t>(1, t.steps - t.warmup_steps));
  progress = std::clamp(progress, 0.0, 1.0);
  double decay = t.lr_schedule == LrSchedule::kCosine ? 0.5 * (1 + std::cos(M_PI * progress)) : 1 - progress;
  return t.min_lr + (t.lr - t.min_lr) * decay;
}

Optimizer::Optimizer(const TrainSpec& train, const LossScalerOptions& scaling_options, bool scaling,
                     ComputeBackend* backend, ParamStore* params, DataParallel* dp, Communicator* world,
                     Communicator* embedding_pair, std::function<bool(const ParamInfo&)> counts)
    : train_(train),
      scaling_options_(scaling_options),
      scaling_(scaling),
      scaler_(scaling_options),
      backend_(backend),
      params_(params),
      dp_(dp),
      world_(world),
      emb_(embedding_pair),
      counts_(std::move(counts)) {}

namespace {

// Device backends: segments of at most this many elements, so a tensor
// larger than this (the embedding) is several entries and the multi-tensor
// kernels' blocks per segment stay few and evenly loaded (elementwise AdamW
// is bit for bit the same however its range is cut; the norm's pieces
// regroup a sum of squares in double, ~1e-16 relative). The CPU keeps one
// segment per tensor: each is one OpenMP loop there, as before, and the step
// stays bit for bit the per-tensor one.
constexpr int64_t kSegmentMax = int64_t(1) << 16;

bool multi_tensor_requested() {
  const char* e = std::getenv("LOOM_MULTI_TENSOR");
  return !(e && std::string(e) == "0");
}

}  // namespace

void Optimizer::allocate() {
  const size_t n = dp_->state_floats();
  MemoryClassScope charge(MemoryClass::kOptimizer);
  m_ = DeviceBuffer(backend_, n * sizeof(float));
  v_ = DeviceBuffer(backend_, n * sizeof(float));
  multi_tensor_ = multi_tensor_requested();
  if (!multi_tensor_) return;
  // The tables: this rank's owned slices, in parameter order (the order of
  // the per-parameter launches they replace), cut at segment_max.
  const int64_t segment_max = backend_->host_visible() ? std::numeric_limits<int64_t>::max() : kSegmentMax;
  std::vector<int64_t> adam, norm;
  int64_t adam_max = 0, norm_max = 0, adam_total = 0, norm_total = 0;
  for (const ParamInfo& p : params_->infos()) {
    auto own = dp_->owned(p);
    if (!own) continue;
    const bool counted = counts_(p);
    for (int64_t at = 0; at < own->size(); at += segment_max) {
      const int64_t len = std::min(segment_max, own->size() - at);
      adam.insert(adam.end(),
                  {int64_t(own->begin) + at, int64_t(own->state_offset) + at, len, p.weight_decay ? 1 : 0});
      adam_max = std::max(adam_max, len);
      adam_total += len;
      if (counted) {
        norm.insert(norm.end(), {int64_t(own->state_offset) + at, len});
        norm_max = std::max(norm_max, len);
        norm_total += len;
      }
    }
  }
  auto upload = [&](const std::vector<int64_t>& host, int per, int64_t max_n, int64_t total) {
    SegmentTable t;
    t.count = int64_t(host.size()) / per;
    t.max_n = max_n;
    t.total = total;
    if (!host.empty()) {
      t.table = DeviceBuffer::uninitialized(backend_, host.size() * sizeof(int64_t));
      backend_->copy_to_device(t.table.f32(), host.data(), host.size() * sizeof(int64_t));
    }
    return t;
  };
  adam_table_ = upload(adam, 4, adam_max, adam_total);
  norm_table_ = upload(norm, 2, norm_max, norm_total);
}

Result<OptimizerResult> Optimizer::step(int64_t step) {
  const TrainSpec& t = train_;
  Kernels& k = backend_->kernels();
  OptimizerResult r;
  // The two copies of a tied embedding (first and last stage) sum their
  // gradients after the DP sync: whole (ZeRO-0) or shard by shard (their
  // units shard identically).
  if (emb_)
    for (const ZeroUnit& u : dp_->units()) {
      if (!u.tied_embedding) continue;
      size_t count = 0;
      float* g = dp_->update_grad(u, &count);
      LOOM_RETURN_IF_ERROR(emb_->all_reduce(g, count, ReduceOp::kSum));
    }
  // The global gradient norm: every element counted once across all ranks.
  // Without ZeRO the DP replicas are equal and DP rank 0 counts (the
  // sharding reports it owning everything on every DP rank, so the caller's
  // `counts` excludes the other replicas); with ZeRO the shards partition.
  if (multi_tensor_) {
    if (norm_table_.count)
      k.add_sum_squares_multi(
          {dp_->update_grad_base(), norm_table_.data(), norm_table_.count, norm_table_.max_n, norm_table_.total});
  } else {
    for (const ParamInfo& p : params_->infos()) {
      if (!counts_(p)) continue;
      auto own = dp_->owned(p);
      if (own) k.add_sum_squares({dp_->update_grad(*own), own->size()});
    }
  }
  double sq = k.take_sum_squares({});
  const auto sync_start = std::chrono::steady_clock::now();
  LOOM_RETURN_IF_ERROR(world_->all_reduce(&sq, 1, ReduceOp::kSum));
  r.norm_sync_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sync_start).count();
  r.lr = lr_schedule(t, step);
  // Every rank holds the same total, so every rank takes the same branch.
  const bool finite = std::isfinite(sq);
  const double S = loss_scale();
  if (scaling_ && !finite && S <= scaling_options_.min_scale)
    return invalid_argument("fp16 gradients overflow at step " + std::to_string(step + 1) +
                            " even with the loss scale at its minimum (" + std::to_string(S) +
                            "): activations or weights exceed fp16's range; train in bf16 (--precision bf16)");
  if (scaling_ && !scaler_.update(finite)) {
    // fp16 overflow: drop this step's gradients, keep the weights, and go on
    // with a smaller scale.
    r.skipped = true;
    r.grad_norm = std::numeric_limits<double>::infinity();
    dp_->clear_grads();
    LOOM_RETURN_IF_ERROR(k.status());
    return r;
  }
  if (!finite)
    return invalid_argument("the gradient norm is " + std::to_string(sq) + " at step " + std::to_string(step + 1) +
                            ": training diverged; lower the learning rate (or warm up longer) and resume from the "
                            "last checkpoint");
  const double norm = std::sqrt(sq) / S;
  r.grad_norm = norm;
  double clip = (t.grad_clip > 0 && norm > t.grad_clip) ? t.grad_clip / norm : 1.0;
  clip /= S;  // one multiplier takes the loss scale out and clips
  ++adam_step_;
  if (multi_tensor_) {
    if (adam_table_.count)
      k.adamw_multi({params_->params(), dp_->update_grad_base(), m_.f32(), v_.f32(), adam_table_.data(),
                     adam_table_.count, adam_table_.max_n, adam_table_.total, float(r.lr), float(t.beta1),
                     float(t.beta2), float(t.adam_eps), float(t.weight_decay), adam_step_, float(clip)});
  } else {
    for (const ParamInfo& p : params_->infos()) {
      auto own = dp_->owned(p);
      if (!own) continue;
      const float wd = p.weight_decay ? float(t.weight_decay) : 0.f;
      float* g = dp_->update_grad(*own);
      k.adamw_update({params_->params() + own->begin, g, m_.f32() + own->state_offset,
                      v_.f32() + own->state_offset, own->size(), float(r.lr), float(t.beta1), float(t.beta2),
                      float(t.adam_eps), wd, adam_step_, float(clip)});
    }
  }
  dp_->clear_grads();
  for (const ZeroUnit& u : dp_->units()) k.weights_changed(params_->params() + u.begin, int64_t(u.size));
  LOOM_RETURN_IF_ERROR(k.status());
  return r;
}

}  // namespace loom::exec
