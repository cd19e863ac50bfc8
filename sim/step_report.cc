// What a layout's step reports beside its time (sim/evaluate.h): the
// figures (tokens/s, model and hardware TFLOP/s, MFU, HFU) and the traffic
// one rank sends per step, by collective kind and link class.
#include <algorithm>

#include "core/throughput.h"
#include "sim/evaluate.h"

namespace loom {

Figures Evaluator::figures(const Layout& l, double step_time_s, double executed_flops_per_step) const {
  Figures f;
  f.step_time_s = step_time_s;
  if (step_time_s <= 0) return f;
  const double world = l.world();
  const double tokens = double(train_.tokens_per_step());
  // MFU against the 16-bit peak for FP8 runs as well (NVIDIA's and Meta's
  // convention); the FP8-peak figure apart.
  const bool fp8 = train_.precision == Precision::kFp8;
  const double peak = hw_.accel.peak_flops(fp8 ? Precision::kBf16 : train_.precision);
  const Throughput t = throughput(tokens, step_time_s, palm_flops_per_token_, l.world(), peak);
  f.tokens_per_s = t.tokens_per_s;
  f.tokens_per_s_per_gpu = f.tokens_per_s / world;
  f.model_tflops_per_gpu = t.model_tflops_per_rank;
  f.hardware_tflops_per_gpu = executed_flops_per_step / step_time_s / world / 1e12;
  f.mfu = t.mfu;
  f.hfu = f.hardware_tflops_per_gpu * 1e12 / peak;
  if (fp8) f.mfu_fp8_peak = f.model_tflops_per_gpu * 1e12 / hw_.accel.peak_flops(Precision::kFp8);
  return f;
}

Traffic Evaluator::step_traffic(const Layout& l, const std::vector<StageCosts>& stages) const {
  // Report the busiest stage's rank (stage 0 carries the embedding).
  Traffic t;
  const int64_t m = l.num_micro_batches(train_.global_batch);
  int worst = 0;
  for (size_t s = 0; s < stages.size(); ++s)
    if (stages[s].flops_per_micro > stages[worst].flops_per_micro) worst = int(s);
  const StageCosts& sc = stages[worst];
  for (int k : {static_cast<int>(CommKind::kTp), static_cast<int>(CommKind::kEp), static_cast<int>(CommKind::kCp)}) {
    for (int c = 0; c < kNumLinkClasses; ++c) t.bytes[k][c] = sc.traffic_per_micro.bytes[k][c] * m;
    t.time_s[k] = sc.traffic_per_micro.time_s[k] * m;
    t.calls[k] = sc.traffic_per_micro.calls[k] * m;
  }
  auto typical = [&](CommKind kind, const CollectiveCost& c, double bytes) {
    int k = static_cast<int>(kind);
    t.call_bytes[k] = bytes;
    t.busbw_bytes_per_s[k] = c.busbw_bytes_per_s;
    t.algo[k] = c.algo;
    t.proto[k] = c.proto;
  };
  const ComputeShape shape = compute_shape(l, train_.seq_len, hw_);
  const double act_bytes = double(shape.tokens) * model_.hidden * element_bytes(train_.precision);
  if (l.tp > 1) {
    Collective c = l.sequence_parallel ? Collective::kAllGather : Collective::kAllReduce;
    typical(CommKind::kTp, collective_cost(hw_, c, shape.tp_group, act_bytes), act_bytes);
  }
  if (l.cp > 1) {
    // The typical call: one ring step (this rank's K and V), the gather of
    // the whole sequence's K, or the all-to-all of this rank's Q.
    const double kv_heads = model_.mla.enabled ? model_.num_heads : model_.num_kv_heads;
    const double qk = model_.mla.enabled ? double(model_.mla.qk_nope_head_dim + model_.mla.qk_rope_head_dim)
                                         : double(model_.head_dim);
    const double qkv = model_.mla.enabled ? qk + double(model_.mla.v_head_dim) : 2.0 * double(model_.head_dim);
    const double e = element_bytes(train_.precision), T = double(shape.tokens);
    if (l.cp_comm == CpComm::kAllGather) {
      const double k_total = l.cp * T * kv_heads / l.tp * qk * e;
      typical(CommKind::kCp, collective_cost(hw_, Collective::kAllGather, shape.cp_group, k_total), k_total);
    } else if (l.cp_comm == CpComm::kA2a) {
      const double q = T * double(model_.num_heads) / l.tp * qk * e;
      typical(CommKind::kCp, collective_cost(hw_, Collective::kAllToAll, shape.cp_group, q), q);
    } else {
      const double kv_bytes = T * kv_heads / l.tp * qkv * e;
      const bool net = shape.cp_group.nodes > 1;
      typical(CommKind::kCp,
              collective_cost(hw_, Collective::kSendRecv, GroupShape{2, net ? 2 : 1, net ? 1 : 2}, kv_bytes), kv_bytes);
    }
  }
  if (l.ep > 1 && model_.is_moe()) {
    // The typical exchange: the 16-bit combine at balanced load.
    const MoeExchange x = moe_exchange(model_, hw_, opt_, shape, element_bytes(train_.precision), 1.0);
    typical(CommKind::kEp, x.cost, x.bytes);
  }
  if (l.pp > 1) {
    CollectiveCost c;
    double t_p2p = p2p_time_s(l, &c);
    typical(CommKind::kPp, c, act_bytes / l.tp);
    // Each micro-batch and chunk: one activation out, one gradient back (interior stages send both ways).
    double sends = 2.0 * m * l.virtual_stages;
    int k = static_cast<int>(CommKind::kPp);
    for (int cl = 0; cl < kNumLinkClasses; ++cl) t.bytes[k][cl] = c.sent_bytes[cl] * sends;
    t.time_s[k] = t_p2p * sends;
    t.calls[k] = sends;
  }
  if (l.dp * l.cp > 1) {
    DpCollectives d = dp_collectives(l, sc);
    int k = static_cast<int>(CommKind::kDp);
    double per_step_sync = l.zero >= 2 ? double(m) : 1.0;
    double gathers = l.zero == 3 ? 2.0 * m : (l.zero >= 1 ? 1.0 : 0.0);
    for (int cl = 0; cl < kNumLinkClasses; ++cl) {
      t.bytes[k][cl] = (d.grad_sync.sent_bytes[cl] + d.grad_sync_expert.sent_bytes[cl]) * per_step_sync +
                       (d.param_gather.sent_bytes[cl] + d.param_gather_expert.sent_bytes[cl]) * gathers;
    }
    t.time_s[k] = d.grad_sync_s * per_step_sync + d.param_gather_s * gathers;
    // ZeRO-3 runs its collectives one layer at a time (compute_dp_collectives):
    // that many calls, each of a layer's bytes (busbw is per call already).
    const double units = l.zero == 3 ? std::max(1, sc.layers) : 1;
    typical(CommKind::kDp, d.grad_sync, sc.grad_bytes / units);
    t.calls[k] = (per_step_sync + gathers) * units;
  }
  return t;
}

}  // namespace loom
