#include "sim/evaluate.h"

#include "core/executor_head.h"
#include "sim/compute_parts.h"
#include "sim/dp_exposure.h"
#include "sim/dualpipev_time.h"
#include "sim/lru_sets.h"
#include "core/throughput.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <cmath>

namespace loom {

namespace {
std::atomic<uint64_t> g_next_evaluator_id{1};
}  // namespace

const char* comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::kTp: return "tp";
    case CommKind::kPp: return "pp";
    case CommKind::kDp: return "dp";
    case CommKind::kEp: return "ep";
    case CommKind::kCp: return "cp";
  }
  return "?";
}

double Traffic::link_bytes(LinkClass l) const {
  double sum = 0;
  for (int k = 0; k < kNumCommKinds; ++k) sum += bytes[k][static_cast<int>(l)];
  return sum;
}

Evaluator::Evaluator(const ModelSpec& model, const HwProfile& hw, const TrainSpec& train, const SimOptions& opt)
    : model_(model), hw_(hw), train_(train), opt_(opt),
      palm_flops_per_token_(model_.model_flops_per_token_palm(train_.seq_len)),
      params_(model_param_counts(model_)),
      id_(g_next_evaluator_id.fetch_add(1)) {}

namespace {

double grad_elem_bytes(Precision p, const SimOptions& opt) { return compute_parts::main_grad_bytes(opt, p); }

// Bytes of one gradient element in the DP reduction: as kept (fp32), or the
// plan's --grad-reduce type (bf16 2, fp8 1; the fp8 scale, 4 bytes per rank's
// block of a bucket, is left out).
double reduce_elem_bytes(const TrainSpec& t, const SimOptions& opt) {
  return t.grad_reduce == GradReduce::kFp32 ? grad_elem_bytes(t.precision, opt) : grad_reduce_element_bytes(t.grad_reduce);
}

// The compressed reduction's own passes over `bytes` of fp32 gradients (Loom's
// executor, exec/runtime/grad_compress.cc): quantizing the other ranks'
// blocks (read 4, write b), summing the received ones into the owned block
// in fp32 (read b, read and write 4) after copying it (8); an all-reduce then
// quantizes the reduced block and every rank dequantizes all blocks (b + 4).
// Memory-bound, at the streaming rate.
double compress_time_s(const HwProfile& hw, const SimOptions& opt, const TrainSpec& t, double grad_bytes, int dp,
                       bool all_reduce) {
  if (t.grad_reduce == GradReduce::kFp32 || dp <= 1 || grad_bytes <= 0) return 0;
  const double b = grad_reduce_element_bytes(t.grad_reduce), n = grad_bytes / b, others = double(dp - 1) / dp;
  double bytes = n * others * (4 + b) + n * others * (b + 8) + n / dp * 8;
  int kernels = 2 * dp;
  if (all_reduce) {
    bytes += n / dp * (4 + b) + n * (b + 4);
    kernels += 1 + dp;
  }
  return bytes / (hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency) + kernels * opt.kernel_overhead_s;
}

// Bytes of one weight in the ZeRO parameter all-gather: the 16-bit (or
// fp32) weight, or 1 with FP8 parameters.
double gathered_weight_bytes(Precision p, const SimOptions& opt) {
  return p == Precision::kFp8 && opt.fp8_params ? 1.0 : element_bytes(p);
}

// The all-reduce of the squared gradient norm before the update: one fp32
// scalar, latency only. Every stack computes the norm each step (Megatron's
// get_grad_norm_fp32 logs it even without --clip-grad; torchtitan's
// clip_grad_norm_, DeepSpeed's get_global_norm; Loom's executor,
// exec/runtime/optimizer.cc). Its group: every rank when the optimizer state
// is sharded (Megatron's distributed optimizer sums the shards' norms over
// the data- and model-parallel ranks; FSDP's DTensor norm over its whole
// mesh) and in Loom's executor (a world all-reduce), else Megatron's
// model-parallel group (TP x PP), whose DP replicas hold the same reduced
// gradients. Memoized on the evaluator (whose profile it is: an address
// could be a later profile's) and the group (the search prices a few stage
// kinds per layout).
double grad_norm_sync_s(uint64_t evaluator, const HwProfile& hw, const Layout& l, const SimOptions& opt) {
  const int dpn = hw.node.devices_per_node;
  GroupShape g;
  if (opt.for_loom_executor() || l.zero >= 1) {
    g.ranks = l.world();
    g.nodes = dpn > 0 ? (g.ranks + dpn - 1) / dpn : 1;
    g.ranks_per_node = dpn > 0 ? std::min(g.ranks, dpn) : g.ranks;
  } else {
    const GroupShape tp = group_shape(l, Dim::kTp, dpn), pp = group_shape(l, Dim::kPp, dpn);
    g.ranks = tp.ranks * pp.ranks;
    g.nodes = tp.nodes * pp.nodes;
    g.ranks_per_node = std::max(1, g.ranks / g.nodes);
  }
  if (g.ranks <= 1) return 0;
  struct Key {
    uint64_t evaluator = 0;
    int ranks = 0, nodes = 0, per_node = 0;
    bool operator==(const Key&) const = default;
  };
  thread_local LruSets<Key, double, 16> memo;
  return memo.get(mix_fields({int64_t(evaluator), g.ranks, g.nodes, g.ranks_per_node}),
                  Key{evaluator, g.ranks, g.nodes, g.ranks_per_node},
                  [&] { return collective_cost(hw, Collective::kAllReduce, g, 4).time_s; });
}

void add_piece(StageCosts& sc, const PieceCost& pc, double count, int chunk) {
  sc.fwd_s += pc.fwd_s * count;
  sc.bwd_s += pc.bwd_s * count;
  sc.recompute_s += pc.recompute_s * count;
  sc.weight_cast_s += pc.weight_cast_s * count;
  if (!sc.chunk_fwd_s.empty()) {
    sc.chunk_fwd_s[chunk] += pc.fwd_s * count;
    sc.chunk_bwd_s[chunk] += (pc.bwd_s + pc.recompute_s) * count;
    sc.chunk_wgrad_s[chunk] += pc.wgrad_s * count;
  }
  sc.tp_s += (pc.fwd_tp_s + pc.bwd_tp_s + pc.recompute_tp_s) * count;
  sc.ep_s += (pc.fwd_ep_s + pc.bwd_ep_s) * count;
  sc.cp_s += (pc.fwd_cp_s + pc.bwd_cp_s + pc.recompute_cp_s) * count;
  sc.flops_per_micro += (pc.fwd_flops + pc.bwd_flops + pc.recompute_flops) * count;
  auto& tr = sc.traffic_per_micro;
  for (int l = 0; l < kNumLinkClasses; ++l) {
    tr.bytes[static_cast<int>(CommKind::kTp)][l] += pc.tp_bytes.bytes[l] * count;
    tr.bytes[static_cast<int>(CommKind::kEp)][l] += pc.ep_bytes.bytes[l] * count;
    tr.bytes[static_cast<int>(CommKind::kCp)][l] += pc.cp_bytes.bytes[l] * count;
  }
  tr.time_s[static_cast<int>(CommKind::kCp)] += pc.cp_comm_total_s * count;
  tr.calls[static_cast<int>(CommKind::kCp)] += pc.cp_calls * count;
  tr.time_s[static_cast<int>(CommKind::kTp)] += pc.tp_comm_total_s * count;
  tr.time_s[static_cast<int>(CommKind::kEp)] += pc.ep_comm_total_s * count;
  tr.calls[static_cast<int>(CommKind::kTp)] += pc.tp_calls * count;
  tr.calls[static_cast<int>(CommKind::kEp)] += pc.ep_calls * count;
}

}  // namespace

Evaluator::Pieces Evaluator::compute_pieces(const Layout& l) const {
  ComputeShape shape = compute_shape(l, train_.seq_len, hw_);
  shape.head_grad_in_forward = opt_.for_loom_executor() && executor_head_grad_in_forward(l.zero);
  const Precision p = train_.precision;
  Pieces pc;
  pc.nccl_fixed_bytes = nccl_fixed_p2p_bytes(model_, hw_, l, opt_, shape.cp_group, shape.ep_group);
  pc.dense = layer_cost(model_, hw_, opt_, p, shape, false);
  SimOptions alone = opt_;
  alone.ep_comm_overlap = false;
  if (model_.is_moe()) {
    pc.moe = layer_cost(model_, hw_, opt_, p, shape, true);
    if (opt_.ep_comm_overlap) pc.moe_unpaired = layer_cost(model_, hw_, alone, p, shape, true);
  }
  if (l.recompute_layers > 0) {
    ComputeShape kept = shape;
    kept.recompute = Recompute::kNone;
    pc.dense_kept = layer_cost(model_, hw_, opt_, p, kept, false);
    if (model_.is_moe()) {
      pc.moe_kept = layer_cost(model_, hw_, opt_, p, kept, true);
      if (opt_.ep_comm_overlap) pc.moe_unpaired_kept = layer_cost(model_, hw_, alone, p, kept, true);
    }
  }
  pc.emb = embedding_cost(model_, hw_, opt_, p, shape);
  pc.head = head_cost(model_, hw_, opt_, p, shape);
  pc.tp_net = shape.tp_group.nodes > 1;
  pc.cp_net = shape.cp_group.nodes > 1;
  pc.ep_net = shape.ep_group.nodes > 1;
  if (model_.num_mtp_layers > 0) {
    // DeepSeek-V3's MTP modules: a block like the model's last layer, the
    // shared output head again, and the module's projection.
    pc.mtp_block = model_.is_moe_layer(model_.num_layers - 1) ? pc.moe : pc.dense;
    pc.mtp_projection = mtp_projection_cost(model_, hw_, opt_, p, shape);
  }
  return pc;
}

namespace {

// Per-thread caches for the closed form: the search evaluates many layouts
// that share their split and their per-layer costs.
struct PieceKey {
  uint64_t evaluator = 0;
  int tp = 0, ep = 0, etp = 0, cp = 0, micro = 0, sp = 0, recompute = 0;
  int dp = 0, pp = 0;  // the TP / EP groups' placement depends on them under a non-default rank order
  int head_fwd = 0;    // Loom's executor's fused head (ZeRO 0-1)
  std::string order;
  int partial = 0;  // recompute_layers set: the kept layers' pieces too
  unsigned modules = 0;  // Megatron's recompute modules (their re-runs differ)
  int cp_comm = 0;       // ring or all-gathered K/V
  bool operator==(const PieceKey&) const = default;
};

}  // namespace

const Evaluator::Pieces& Evaluator::pieces(const Layout& l) const {
  thread_local LruSets<PieceKey, Pieces, 256> memo;
  const bool default_order = l.rank_order == Layout{}.rank_order;  // tp, ep innermost: placement fixed by tp, ep
  PieceKey k{id_, l.tp, l.ep, l.expert_tp(), l.cp, l.micro_batch, l.sequence_parallel ? 1 : 0, static_cast<int>(l.recompute),
             default_order ? 0 : l.dp, default_order ? 0 : l.pp, 0, l.rank_order};
  k.head_fwd = executor_head_grad_in_forward(l.zero) ? 1 : 0;
  k.partial = l.recompute_layers > 0 ? 1 : 0;
  k.modules = l.recompute_modules;
  k.cp_comm = static_cast<int>(l.cp_comm);
  const uint64_t h = mix_fields({l.tp, l.ep, k.etp, l.cp, l.micro_batch, k.sp, k.recompute, k.dp, k.pp, k.head_fwd,
                                 k.partial, int64_t(k.modules), k.cp_comm});
  return memo.get(h, k, [&] { return compute_pieces(l); });
}

const StageSplit& Evaluator::split(const Layout& l) const {
  struct Key {
    uint64_t evaluator = 0;
    int pp = 0, v = 0, first = 0, last = 0;
    bool operator==(const Key&) const = default;
  };
  thread_local LruSets<Key, StageSplit, 64> memo;
  // The V placement (DualPipeV) sums other chunks into a stage: part of the key.
  const int v_key = l.virtual_stages + (l.schedule == Schedule::kDualPipeV ? 1 << 20 : 0);
  const Key k{id_, l.pp, v_key, l.first_stage_layers, l.last_stage_layers};
  return memo.get(mix_fields({l.pp, v_key, l.first_stage_layers, l.last_stage_layers}), k,
                  [&] { return split_layers(model_, l); });
}

void Evaluator::fill_stage(const Layout& l, const Pieces& pc, const StageSplit& split, int s, StageCosts& sc) const {
  const Precision p = train_.precision;
  sc.stage = s;
  int total_layers = split.stage_layers(s);
  sc.layers = total_layers;
  sc.moe_layers = split.stage_moe_layers(s);
  // The all-to-all overlap pairs a forward with another micro-batch's
  // backward; the schedule's warmup forwards and cooldown backwards run alone.
  const double alone = opt_.ep_comm_overlap && sc.moe_layers > 0
                           ? ep_unpaired_fraction(l, l.num_micro_batches(train_.global_batch), s)
                           : 0.0;
  sc.chunk_max_s = sc.chunk0_fwd_s = 0;
  for (int c = 0; c < l.virtual_stages; ++c) {
    const double before = sc.fwd_s + sc.bwd_s + sc.recompute_s, fwd_before = sc.fwd_s;
    int g = l.global_chunk(s, c);
    int moe_layers = split.chunk_moe_layers[g];
    int dense_layers = split.chunk_layers[g] - moe_layers;
    // Partial recompute: the first recompute_layers of the chunk recompute,
    // the rest keep their activations.
    int dense_kept = 0, moe_kept = 0;
    if (l.recompute_layers > 0) {
      const RecomputedLayers rc = chunk_recomputed_layers(model_, l, split, g);
      dense_kept = dense_layers - rc.dense;
      moe_kept = moe_layers - rc.moe;
    }
    add_piece(sc, pc.dense, dense_layers - dense_kept, c);
    if (dense_kept) add_piece(sc, pc.dense_kept, dense_kept, c);
    if (moe_layers) {
      const int moe_rc = moe_layers - moe_kept;
      add_piece(sc, pc.moe, moe_rc * (1 - alone), c);
      if (alone > 0) add_piece(sc, pc.moe_unpaired, moe_rc * alone, c);
      if (moe_kept) {
        add_piece(sc, pc.moe_kept, moe_kept * (1 - alone), c);
        if (alone > 0) add_piece(sc, pc.moe_unpaired_kept, moe_kept * alone, c);
      }
    }
    if (g == 0) add_piece(sc, pc.emb, 1, c);
    if (g == l.pp * l.virtual_stages - 1) {
      add_piece(sc, pc.head, 1, c);
      // Multi-token prediction runs on the last stage, after the head
      // (DeepSeek-V3's DualPipe places it there; Megatron-core's MTP too).
      const int mtp = model_.num_mtp_layers;
      if (mtp > 0) {
        add_piece(sc, pc.mtp_block, mtp, c);
        add_piece(sc, pc.head, mtp, c);
        add_piece(sc, pc.mtp_projection, mtp, c);
      }
    }
    if (!sc.chunk_grad_fraction.empty())
      sc.chunk_grad_fraction[c] = total_layers ? double(split.chunk_layers[g]) / total_layers : 1.0 / l.virtual_stages;
    sc.chunk_max_s = std::max(sc.chunk_max_s, sc.fwd_s + sc.bwd_s + sc.recompute_s - before);
    if (c == 0) sc.chunk0_fwd_s = sc.fwd_s - fwd_before;
  }
  const double t_stage = sc.fwd_s + sc.bwd_s + sc.recompute_s;
  sc.net_share =
      t_stage > 0
          ? ((pc.tp_net ? sc.tp_s : 0.0) + (pc.ep_net ? sc.ep_s : 0.0) + (pc.cp_net ? sc.cp_s : 0.0)) / t_stage
          : 0.0;
  StageParams params = stage_params(model_, params_, l, split, s);
  sc.chunk_buckets.assign(size_t(l.virtual_stages), std::max(1, opt_.grad_buckets));
  if (opt_.states_grad_buckets())
    for (int c = 0; c < l.virtual_stages; ++c) {
      // (The chunk's share of the stage's parameters by its layers; the
      // closed form's stage costs keep no chunk_grad_fraction.)
      const int layers = split.chunk_layers[size_t(split.global(s, c))];
      const double share = total_layers ? double(layers) / total_layers : 1.0 / l.virtual_stages;
      sc.chunk_buckets[size_t(c)] = chunk_gradient_buckets(opt_, l, s, c, params.total() * share, layers);
    }
  sc.grad_bytes = params.dense * reduce_elem_bytes(train_, opt_);
  sc.expert_grad_bytes = params.expert * reduce_elem_bytes(train_, opt_);
  // ZeRO shards over the DP x CP group (CP ranks hold the same weights).
  double local_params =
      l.zero >= 1 ? params.dense / (l.dp * l.cp) + params.expert / (double(l.dp * l.cp) / l.ep) : params.total();
  sc.optimizer_s = optimizer_time_s(hw_, opt_, p, local_params) + sc.weight_cast_s;
  // Loom's executor under ZeRO-2/3 discards a chunk's full fp32 gradient
  // after each micro-batch's reduce-scatter, and the next backward writes it
  // again (exec/runtime/data_parallel.cc Zero2::after_reduce): every
  // micro-batch. ZeRO-3 also discards the parameters it does not own after
  // the update (trainer_state.cc: back to the own shards), which the next
  // step's gathers write again: once a step. (The releases between a
  // multi-chunk stage's ops under ZeRO-3 are not counted.)
  if (opt_.for_loom_executor() && l.zero >= 2 && l.dp * l.cp > 1) {
    const double grads = 4 * params.total();
    const double per_micro = discard_time_s(hw_, opt_, grads);
    sc.bwd_s += per_micro;
    sc.chunk_max_s += per_micro / l.virtual_stages;
    for (size_t c = 0; c < sc.chunk_bwd_s.size(); ++c)
      sc.chunk_bwd_s[c] += per_micro * (sc.chunk_grad_fraction.empty() ? 1.0 / sc.chunk_bwd_s.size()
                                                                       : sc.chunk_grad_fraction[c]);
    if (l.zero == 3) sc.optimizer_s += discard_time_s(hw_, opt_, grads * (1 - 1.0 / (l.dp * l.cp)));
  }
  // FSDP2's copies (SimOptions::fsdp_copies) under ZeRO-3, per micro-batch:
  // each all-gather's flat output is copied into the parameters' own tensors
  // on the compute stream (foreach_all_gather_copy_out: read and write the
  // gathered weights), in forward and again in backward; each
  // reduce-scatter's input is copied in from the 16-bit gradients and cast to
  // the reduction dtype (foreach_reduce's copy-in, which the compute stream
  // waits for before it frees the gradients).
  if (opt_.fsdp_copies && l.zero == 3 && l.dp * l.cp > 1) {
    const double n = params.total(), sixteen = element_bytes(sixteen_bit(p));
    const double copy_out = memory_pass_time_s(hw_, 2 * n * gathered_weight_bytes(p, opt_)) + opt_.kernel_overhead_s;
    const double copy_in = memory_pass_time_s(hw_, n * (sixteen + reduce_elem_bytes(train_, opt_))) + opt_.kernel_overhead_s;
    sc.fwd_s += copy_out;
    sc.bwd_s += copy_out + copy_in;
    sc.chunk_max_s += (2 * copy_out + copy_in) / l.virtual_stages;
    sc.chunk0_fwd_s += copy_out / l.virtual_stages;
    for (size_t c = 0; c < sc.chunk_bwd_s.size(); ++c) {
      const double share = sc.chunk_grad_fraction.empty() ? 1.0 / sc.chunk_bwd_s.size() : sc.chunk_grad_fraction[c];
      sc.chunk_fwd_s[c] += copy_out * share;
      sc.chunk_bwd_s[c] += (copy_out + copy_in) * share;
    }
  }
  // The stack's passes over the rank's whole gradient buffer, once a step on
  // the compute stream (SimOptions::grad_buffer_zero, grad_nan_check,
  // grad_scale_pass; Megatron-core's DistributedDataParallel): the buffer
  // zeroed before the first micro-batch, one norm read per bucket, and the
  // 1/dp scaling read and written where data parallelism sums.
  if (!opt_.for_loom_executor()) {
    // (Sharded under ZeRO-2/3: Megatron-FSDP's gradient buffer holds the rank's shard.)
    const double buffer = (l.zero >= 2 ? local_params : params.total()) * grad_elem_bytes(p, opt_);
    int buckets = 0;
    for (int b : sc.chunk_buckets) buckets += b;
    double bytes = 0;
    int kernels = 0;
    if (opt_.grad_buffer_zero) bytes += buffer, kernels += 1;
    if (opt_.grad_nan_check) bytes += buffer, kernels += 2 * buckets;  // the norm's two reduction kernels
    if (opt_.grad_scale_pass && l.dp * l.cp > 1) bytes += 2 * buffer, kernels += buckets;
    if (kernels > 0) sc.optimizer_s += memory_pass_time_s(hw_, bytes) + kernels * opt_.kernel_overhead_s;
  }
  // Loom's executor zeroes its fp32 gradients for the next step inside the
  // update (exec/runtime/data_parallel.cc clear_grads): the full gradient
  // (ZeRO-2/3 gave it back after its reduce-scatter: nothing to zero) and,
  // under ZeRO, the owned shard's buffer.
  if (opt_.for_loom_executor())
    sc.optimizer_s +=
        memory_pass_time_s(hw_, 4 * ((l.zero >= 2 ? 0.0 : params.total()) + (l.zero >= 1 ? local_params : 0.0)));
  // A tied embedding split over the pipeline: the first and the last stage
  // each hold a copy and all-reduce its gradient before the update
  // (Megatron's _allreduce_embedding_grads; the executor sums the pair in
  // its optimizer step), on nodes apart when the pipeline spans nodes.
  // Multi-token prediction keeps a copy of the embedding on the last stage
  // too (Megatron-core's gpt_model.py builds it where mtp_process), reduced
  // with the first stage's the same way.
  if (embedding_copy_on_last_stage(model_, l) && (s == 0 || s == l.pp - 1)) {
    const GroupShape pp = group_shape(l, Dim::kPp, hw_.node.devices_per_node);
    GroupShape pair;
    pair.ranks = 2;
    pair.nodes = pp.nodes > 1 ? 2 : 1;
    pair.ranks_per_node = pp.nodes > 1 ? 1 : 2;
    const double bytes = double(model_.vocab) / l.tp * double(model_.hidden) * grad_elem_bytes(p, opt_);
    sc.optimizer_s += collective_cost(hw_, Collective::kAllReduce, pair, bytes).time_s;
  }
}

int chunk_gradient_buckets(const SimOptions& opt, const Layout& l, int stage, int chunk, double params, int layers) {
  if (!opt.states_grad_buckets()) return std::max(1, opt.grad_buckets);
  const bool bucketed = opt.bucketed_chunks == BucketedChunks::kAll ||
                        (opt.bucketed_chunks == BucketedChunks::kFirst && stage == 0 && chunk == 0);
  if (!bucketed) return 1;
  if (opt.grad_bucket_layers) return std::clamp(layers, 1, 32767);
  const double size = std::max(opt.grad_bucket_params, opt.grad_bucket_params_per_dp * l.dp);
  return int(std::clamp(std::ceil(params / size), 1.0, 32767.0));
}

std::vector<StageCosts> Evaluator::stage_costs(const Layout& l) const {
  const Pieces pc = compute_pieces(l);
  const StageSplit split = split_layers(model_, l);
  std::vector<StageCosts> out(l.pp);
  // Every stage's update waits for the gradient norm's all-reduce (the
  // closed form adds it once per layout, estimate()).
  const double norm_s = grad_norm_sync_s(id_, hw_, l, opt_);
  for (int s = 0; s < l.pp; ++s) {
    StageCosts& sc = out[s];
    sc.chunk_fwd_s.assign(l.virtual_stages, 0);
    sc.chunk_bwd_s.assign(l.virtual_stages, 0);
    sc.chunk_wgrad_s.assign(l.virtual_stages, 0);
    sc.chunk_grad_fraction.assign(l.virtual_stages, 0);
    fill_stage(l, pc, split, s, sc);
    sc.norm_sync_s = norm_s;
    sc.optimizer_s += norm_s;
  }
  return out;
}

namespace {

// The DP collectives of a stage depend on the group shapes and the bytes
// only: layouts that differ in micro-batch, schedule or recompute share them.
struct DpKey {
  uint64_t evaluator = 0;
  int dp = 0, cp = 0, tp = 0, pp = 0, ep = 0, etp = 0, zero = 0, layers = 0, moe_layers = 0;
  double grad_bytes = 0, expert_grad_bytes = 0;
  std::string order;
  bool operator==(const DpKey&) const = default;
};

}  // namespace

DpCollectives Evaluator::dp_collectives(const Layout& l, const StageCosts& sc) const {
  thread_local LruSets<DpKey, DpCollectives, 1024> memo;
  const DpKey k{id_,      l.dp,      l.cp,          l.tp,          l.pp,          l.ep,         l.expert_tp(),
                l.zero,   sc.layers, sc.moe_layers, sc.grad_bytes, sc.expert_grad_bytes, l.rank_order};
  const uint64_t h = mix_fields({std::bit_cast<int64_t>(sc.grad_bytes), std::bit_cast<int64_t>(sc.expert_grad_bytes), l.dp,
                                 l.cp, l.tp, l.pp, l.ep, k.etp, l.zero, sc.layers, sc.moe_layers});
  return memo.get(h, k, [&] { return compute_dp_collectives(l, sc); });
}

namespace {

// The gradient (DP x CP) and expert-DP group shapes depend on the layout's
// sizes, its order and the node size only, so every stage and every
// micro-batch, schedule or recompute variant of a layout shares them. They
// enumerate the group's members (thousands at 16k ranks), so they are
// memoized per thread (a search meets a few hundred distinct groups).
struct ShapeKey {
  int dp = 0, cp = 0, tp = 0, pp = 0, ep = 0, etp = 0, dpn = 0;
  std::string order;
  bool operator==(const ShapeKey&) const = default;
};
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    return size_t(mix_fields({int64_t(std::hash<std::string>{}(k.order)), k.dp, k.cp, k.tp, k.pp, k.ep, k.etp, k.dpn}));
  }
};

std::pair<GroupShape, GroupShape> gradient_shapes(const Layout& l, int dpn) {
  thread_local std::unordered_map<ShapeKey, std::pair<GroupShape, GroupShape>, ShapeKeyHash> memo;
  ShapeKey k{l.dp, l.cp, l.tp, l.pp, l.ep, l.expert_tp(), dpn, l.rank_order};
  auto it = memo.find(k);
  if (it != memo.end()) return it->second;
  if (memo.size() > 8192) memo.clear();
  const GroupShape dp = gradient_group_shape(l, dpn);
  // Without EP the expert-DP group is the DP x CP group itself.
  const GroupShape edp = l.ep <= 1 && !l.folded_experts() ? dp : expert_dp_group_shape(l, dpn);
  return memo.emplace(std::move(k), std::make_pair(dp, edp)).first->second;
}

}  // namespace

DpCollectives Evaluator::compute_dp_collectives(const Layout& l, const StageCosts& sc) const {
  DpCollectives d;
  if (l.dp * l.cp <= 1) return d;
  const int dpn = hw_.node.devices_per_node;
  // Gradients sum over DP x CP (Megatron's dp-cp group). Expert gradients
  // are reduced over the expert-DP group: dp cp/ep ranks (x tp under
  // parallel folding).
  const auto [dp_shape, edp_shape] = gradient_shapes(l, dpn);
  d.crosses_nodes = dp_shape.nodes > 1;
  const double w_over_g = gathered_weight_bytes(train_.precision, opt_) / reduce_elem_bytes(train_, opt_);
  // ZeRO-3 gathers and reduce-scatters one layer at a time (FSDP2 wraps each
  // transformer block, DeepSpeed stage 3 fetches per submodule, Megatron's
  // FSDP per module): `units` collectives of 1/units of the bytes, each with
  // its own latency and at its own message size. ZeRO 0-2 move the chunk in
  // its gradient buckets, as one stream of bandwidth.
  // Expert weights live in the MoE layers only.
  const int units_dense = l.zero == 3 ? std::max(1, sc.layers) : 1;
  const int units_expert = l.zero == 3 ? std::max(1, sc.moe_layers) : 1;
  auto cost = [&](Collective coll, const GroupShape& shape, double bytes, int units) {
    CollectiveCost c = collective_cost(hw_, coll, shape, bytes / units);
    c.time_s *= units;
    for (double& b : c.sent_bytes) b *= units;
    return c;
  };
  Collective grad_coll = l.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter;
  d.grad_sync = cost(grad_coll, dp_shape, sc.grad_bytes, units_dense);
  d.grad_sync.time_s += compress_time_s(hw_, opt_, train_, sc.grad_bytes, dp_shape.ranks, l.zero == 0);
  d.grad_sync_s = d.grad_sync.time_s;
  if (sc.expert_grad_bytes > 0 && edp_shape.ranks > 1) {
    d.grad_sync_expert = cost(grad_coll, edp_shape, sc.expert_grad_bytes, units_expert);
    d.grad_sync_expert.time_s += compress_time_s(hw_, opt_, train_, sc.expert_grad_bytes, edp_shape.ranks, l.zero == 0);
    d.grad_sync_s += d.grad_sync_expert.time_s;
  }
  if (l.zero >= 1) {
    double dense_w = sc.grad_bytes * w_over_g, expert_w = sc.expert_grad_bytes * w_over_g;
    d.param_gather = cost(Collective::kAllGather, dp_shape, dense_w, units_dense);
    d.param_gather_s = d.param_gather.time_s;
    if (expert_w > 0 && edp_shape.ranks > 1) {
      d.param_gather_expert = cost(Collective::kAllGather, edp_shape, expert_w, units_expert);
      d.param_gather_s += d.param_gather_expert.time_s;
    }
  }
  return d;
}

const Evaluator::P2pEntry& Evaluator::p2p_entry(const Layout& l) const {
  // The transfer depends on the PP group's placement and the micro-batch.
  struct Key {
    uint64_t evaluator = 0;
    int dp = 0, tp = 0, pp = 0, ep = 0, cp = 0, micro = 0;
    std::string order;
    bool operator==(const Key&) const = default;
  };
  thread_local LruSets<Key, P2pEntry, 64> memo;
  return memo.get(mix_fields({l.dp, l.tp, l.pp, l.ep, l.cp, l.micro_batch}),
                  Key{id_, l.dp, l.tp, l.pp, l.ep, l.cp, l.micro_batch, l.rank_order}, [&] { return p2p_cost(l); });
}

double Evaluator::p2p_time_s(const Layout& l, CollectiveCost* cost) const {
  if (l.pp <= 1) return 0;
  const CollectiveCost& c = p2p_entry(l).cost;
  if (cost) *cost = c;
  return c.time_s;
}

Evaluator::P2pEntry Evaluator::p2p_cost(const Layout& l) const {
  GroupShape pp_shape = group_shape(l, Dim::kPp, hw_.node.devices_per_node);
  GroupShape pair{2, pp_shape.nodes > 1 ? 2 : 1, pp_shape.nodes > 1 ? 1 : 2};
  // One micro-batch's activation; Megatron's scatter-gather optimization (and
  // sequence parallelism) sends 1/tp of it from each TP rank.
  double bytes = double(l.micro_batch) * double(train_.seq_len / l.cp) * model_.hidden *
                 element_bytes(train_.precision) / l.tp;
  return {collective_cost(hw_, Collective::kSendRecv, pair, bytes), nccl_pp_peer_bytes(hw_, pp_shape)};
}

void split_compute(const StageCosts& c, int64_t m, StepBreakdown* tb) {
  tb->tp_comm_s = double(m) * c.tp_s;
  tb->ep_comm_s = double(m) * c.ep_s;
  tb->cp_comm_s = double(m) * c.cp_s;
  const double per_micro = c.fwd_s + c.bwd_s + c.recompute_s;
  const double compute_total = double(m) * per_micro - tb->tp_comm_s - tb->ep_comm_s - tb->cp_comm_s;
  if (per_micro > 0) {
    tb->forward_s = compute_total * (c.fwd_s / per_micro);
    tb->backward_s = compute_total * (c.bwd_s / per_micro);
    tb->recompute_s = c.recompute_s > 0 ? compute_total - tb->forward_s - tb->backward_s : 0.0;
  }
}

double ep_unpaired_fraction(const Layout& l, int64_t micro_batches, int stage) {
  const double chunks = double(micro_batches) * l.virtual_stages;
  if (l.schedule == Schedule::kDualPipeV && chunks > 0) {
    // DualPipeV pairs a forward with a backward in its steps 4 (two pairs an
    // iteration, m - 2p + s + 1 of them; the last stage runs its first pair
    // apart) and 5 (one pair, p - s - 1 times): of its 2m forwards
    // 3p - s - 1 run alone, one more on the last stage (core/program.cc
    // dualpipev_order); as many backwards.
    const int64_t p = l.pp;
    const double alone = double(3 * p - stage - 1 + (stage == p - 1 ? 1 : 0));
    return std::min(1.0, alone / chunks);
  }
  return chunks > 0 ? std::min(1.0, double(in_flight_micro_batches(l, micro_batches, stage)) / chunks) : 0.0;
}

Estimate Evaluator::estimate(const Layout& l) const {
  if (fsdp_once_per_step(l, opt_)) return estimate(priced_layout(l, opt_));
  Estimate est;
  const StageSplit& split = this->split(l);
  const Pieces& pc = pieces(l);
  // Memory per stage (the same terms memory_report() uses) and stage costs,
  // without per-call allocation: the buffer is reused by this thread.
  ActivationTerms act = activation_terms(model_, l, train_, opt_, &params_);
  // NCCL's point-to-point buffers, from the groups' memoized placements.
  act.nccl.fixed_bytes = pc.nccl_fixed_bytes;
  if (l.pp > 1) act.nccl.per_pp_peer_bytes = p2p_entry(l).nccl_peer_bytes;
  thread_local std::vector<StageCosts> stages;
  thread_local std::vector<int> kind;  // stage -> the stage whose costs it shares
  stages.resize(l.pp);
  kind.resize(l.pp);
  est.fits = true;
  // Interior stages with the same layer counts cost the same: compute each
  // kind once. Their memory differs only by the micro-batches in flight and
  // the executor's pipeline buffers (sim/memory_model.h), and grows with
  // both: an interior stage that has no more of either than an earlier one
  // of its kind cannot hold more, nor become the (first) worst stage.
  // (Partial recompute: the stage's recomputed layers too, which chunks of
  // different sizes can make differ between stages of equal layers.)
  int prev_layers = -1, prev_moe = -1;
  int64_t mem_in_flight = -1;
  int mem_p2p = -1, mem_layers = -1, mem_moe = -1;
  RecomputedLayers prev_rec{-1, -1}, mem_rec{-1, -1};
  const int64_t micro_batches = l.num_micro_batches(train_.global_batch);
  const std::vector<P2pBuffers>* p2p = act.executor.p2p;
  // DualPipeV's pipeline time needs each stage's chunks apart.
  const bool v_shape = l.schedule == Schedule::kDualPipeV;
  for (int s = 0; s < l.pp; ++s) {
    const int layers = split.stage_layers(s), moe = split.stage_moe_layers(s);
    const RecomputedLayers rec = l.recompute_layers > 0 ? stage_recomputed_layers(model_, l, split, s) : RecomputedLayers{};
    const bool ends = s == 0 || s == l.pp - 1;
    StageCosts& sc = stages[s];
    const int64_t in_flight = in_flight_micro_batches(l, micro_batches, s, ep_overlap_applies(model_, opt_));
    const int p2p_most = p2p ? (*p2p)[size_t(s)].at_most : 0;
    if (ends || layers != mem_layers || moe != mem_moe || rec != mem_rec || in_flight > mem_in_flight ||
        p2p_most > mem_p2p) {
      const double total = stage_memory(model_, l, train_, opt_, split, s, act).total_bytes();
      if (total > est.peak_memory_bytes) {
        est.peak_memory_bytes = total;
        est.worst_stage = s;
      }
      if (!ends) {
        mem_layers = layers;
        mem_moe = moe;
        mem_rec = rec;
        mem_in_flight = in_flight;
        mem_p2p = p2p_most;
      }
    }
    // (Under the all-to-all overlap each stage has its own unpaired share.
    // DualPipeV: an interior stage shares the previous one's costs when each
    // of its two chunks has the layers of the other's same chunk.)
    auto same_chunk = [&](int c) {
      const size_t g = size_t(split.global(s, c)), h = size_t(split.global(s - 1, c));
      return split.chunk_layers[g] == split.chunk_layers[h] && split.chunk_moe_layers[g] == split.chunk_moe_layers[h];
    };
    const bool same_chunks = !v_shape || (s > 0 && same_chunk(0) && same_chunk(1));
    if (!ends && same_chunks && s > 1 && layers == prev_layers && moe == prev_moe && rec == prev_rec &&
        !(opt_.ep_comm_overlap && moe > 0)) {
      kind[s] = kind[s - 1];
      continue;
    }
    kind[s] = s;
    prev_layers = ends ? -1 : layers;
    prev_moe = ends ? -1 : moe;
    prev_rec = ends ? RecomputedLayers{-1, -1} : rec;
    sc.fwd_s = sc.bwd_s = sc.recompute_s = sc.tp_s = sc.ep_s = sc.cp_s = sc.flops_per_micro = sc.weight_cast_s = 0;
    sc.traffic_per_micro = Traffic{};
    if (v_shape) {
      sc.chunk_fwd_s.assign(2, 0);
      sc.chunk_bwd_s.assign(2, 0);
      sc.chunk_wgrad_s.assign(2, 0);
    } else {
      sc.chunk_fwd_s.clear();
      sc.chunk_bwd_s.clear();
      sc.chunk_wgrad_s.clear();
    }
    fill_stage(l, pc, split, s, sc);
  }
  est.fits = est.peak_memory_bytes <= usable_memory_bytes(hw_, opt_);

  const int64_t m = l.num_micro_batches(train_.global_batch);
  const int p = l.pp, v = l.virtual_stages;
  double t_max = 0, t_sum = 0, flops_micro = 0, f_max = 0, b_max = 0;
  // Interleaved: each stage's slowest chunk (forward + backward), which sets
  // its share of the fill and the drain when its chunks differ.
  double chunk_max_sum = 0, chunk_max_crit = 0;
  int crit = 0;
  for (int s = 0; s < p; ++s) {
    const StageCosts& sc = stages[kind[s]];
    double t = sc.fwd_s + sc.bwd_s + sc.recompute_s;
    t_sum += t;
    f_max = std::max(f_max, sc.fwd_s);
    b_max = std::max(b_max, sc.bwd_s + sc.recompute_s);
    flops_micro += sc.flops_per_micro;
    const double chunk_max = std::max(t / v, sc.chunk_max_s);
    chunk_max_sum += chunk_max;
    if (t > t_max) {
      t_max = t;
      crit = s;
      chunk_max_crit = chunk_max;
    }
  }
  const double t_p2p = p2p_time_s(l);
  double pipe, blocking_extra = 0;
  if (v_shape) {
    // DualPipeV: its order replayed with each stage's chunk times.
    thread_local std::vector<DualPipeVStageTimes> chunk_times;
    chunk_times.assign(size_t(p), {});
    for (int s = 0; s < p; ++s) {
      const StageCosts& sc = stages[kind[s]];
      for (int c = 0; c < 2; ++c) {
        chunk_times[size_t(s)].fwd[c] = sc.chunk_fwd_s[size_t(c)];
        chunk_times[size_t(s)].bwd[c] = sc.chunk_bwd_s[size_t(c)];
        chunk_times[size_t(s)].wgrad[c] = sc.chunk_wgrad_s[size_t(c)];
      }
    }
    pipe = dualpipev_pipeline_s(p, m, chunk_times, t_p2p);
  } else if (l.schedule == Schedule::kInterleaved) {
    // The fill and the drain: (p − 1) chunk executions of the other stages,
    // each at its slowest chunk (with equal chunks, (Σ_s t_s − t_max)/v).
    pipe = double(m) * t_max + (chunk_max_sum - chunk_max_crit) + 2.0 * (double(p) * v - 1) * t_p2p;
    // Receives posted just before their consumer (the program's own order,
    // Loom's executor with asynchronous sends): each chunk execution waits a
    // transfer after the op before it, about 2·m·v transfers in all, where
    // Megatron's posted-ahead receives leave only the fill and the drain
    // (sim/simulate.h with_posted_ahead_recvs; EventEngine.PostedAheadRecvs...).
    if (p > 1 && !blocking_p2p(opt_, l.schedule) && !opt_.pp_overlap_p2p_comm) {
      blocking_extra = 2.0 * (double(m) * v - (double(p) * v - 1)) * t_p2p;
      pipe += blocking_extra;
    }
  } else {
    // 1F1B alternates a forward and a backward on every stage: the slowest
    // stage's sum paces it. GPipe runs all forwards, then all backwards: each
    // phase is paced by its own slowest stage, which may be two stages.
    const double paced = l.schedule == Schedule::kGpipe ? f_max + b_max : t_max;
    pipe = double(m - 1) * paced + t_sum + 2.0 * (p - 1) * t_p2p;
    // Blocking sends under GPipe: each later micro-batch's forward and
    // backward on the critical stage wait for their own send to land (1F1B's
    // round trip already puts the transfer on the path; sim/simulate.h).
    if (l.schedule == Schedule::kGpipe && p > 1 && blocking_p2p(opt_, l.schedule)) {
      blocking_extra = 2.0 * double(m - 1) * t_p2p;
      pipe += blocking_extra;
    }
  }

  // The pipeline's pace: a micro-batch's share of the pipelined compute (the
  // slowest stage's time, and the transfers the schedule puts on its path).
  const double cycle = std::max(t_max, pipe / double(m));
  // Exposed data-parallel communication: per stage, what its own remaining
  // compute (last backward, later micro-batches) and the pipeline drain after
  // it (stage s finishes about s backward-times before stage 0) cannot hide.
  double dp_exposed = 0, opt_s = 0, contention = 0;
  const double norm_s = grad_norm_sync_s(id_, hw_, l, opt_);  // the gradient norm's all-reduce before every update
  const double contention_fraction = comm_contention_fraction(hw_);
  // NIC sharing (sim/simulate.cc with_nic_sharing): where the DP collectives
  // cross the network (d.crosses_nodes), the compute they hide behind pays
  // its cross-node TP/EP share (sc.net_share) again for the part that runs
  // beside them.
  // Interior stages carry the same gradient bytes: price their collectives once.
  DpCollectives d;
  double memo_grad = -1, memo_expert = -1;
  int memo_layers = -1, memo_moe = -1;  // ZeRO-3 prices its collectives per layer
  // Among stages that share their costs (kind) and their first chunk's
  // layers, the exposure falls with the stage (every term of
  // stage_dp_exposure is non-increasing in it: the drain, the cooldown, the
  // gather's head start) and the stream's total does not change: the first
  // of such a run sets its largest exposure, the last its least (the most
  // contention). The stages between are skipped.
  auto same_as = [&](int s, int t) {
    return kind[size_t(s)] == kind[size_t(t)] && split.chunk_layers[size_t(s)] == split.chunk_layers[size_t(t)];
  };
  for (int s = 0; s < p; ++s) {
    const StageCosts& sc = stages[kind[s]];
    opt_s = std::max(opt_s, sc.optimizer_s + norm_s);
    if (l.dp * l.cp <= 1) continue;
    if (s > 0 && s + 1 < p && same_as(s, s - 1) && same_as(s, s + 1)) continue;
    if (sc.grad_bytes != memo_grad || sc.expert_grad_bytes != memo_expert || sc.layers != memo_layers ||
        sc.moe_layers != memo_moe) {
      d = dp_collectives(l, sc);
      memo_grad = sc.grad_bytes;
      memo_expert = sc.expert_grad_bytes;
      memo_layers = sc.layers;
      memo_moe = sc.moe_layers;
    }
    const double layers = std::max(1, sc.layers);
    const StageDpExposure e =
        stage_dp_exposure(l, opt_, sc, d, m, s, v > 1 ? split.chunk_layers[size_t(s)] / layers : 1.0, cycle);
    const double exposed = e.exposed, total = e.total;
    dp_exposed = std::max(dp_exposed, exposed);
    const double net_share = d.crosses_nodes ? sc.net_share : 0.0;
    contention = std::max(contention, std::max(0.0, total - exposed) * (contention_fraction + net_share));
  }

  // Split the critical stage's time into its parts (tp_s / ep_s are the
  // exposed collectives of fwd + bwd + recompute, already inside those times).
  const StageCosts& c = stages[kind[crit]];
  StepBreakdown& tb = est.time;
  split_compute(c, m, &tb);
  tb.pp_comm_s =
      l.pp > 1 ? 2.0 * (l.schedule == Schedule::kInterleaved || v_shape ? double(p) * v - 1 : p - 1) * t_p2p +
                     blocking_extra
               : 0;
  tb.bubble_s = std::max(0.0, pipe - double(m) * t_max - tb.pp_comm_s);
  tb.dp_comm_s = dp_exposed;
  tb.contention_s = contention;
  tb.optimizer_s = opt_s;
  tb.step_time_s = pipe + dp_exposed + opt_s + contention;

  double executed = flops_micro * double(m) * l.dp * l.tp * l.cp;
  est.figures = figures(l, tb.step_time_s, executed);
  return est;
}

}  // namespace loom
