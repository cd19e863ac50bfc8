// Layout: how a training run is split over ranks, and the rank groups it implies.
//
// Dimensions, always named and ordered `dp tp pp ep cp`:
//   world = dp * tp * pp * cp.
//   ep (expert parallel) is carved out of dp, as in Megatron-core: the experts
//   of a MoE layer are sharded over `ep` ranks of the DP group, and expert
//   gradients are reduced over the remaining dp/ep ranks. ep must divide dp.
//   With etp=1 and tp > 1 (Megatron-Core's MoE parallel folding, expert
//   tensor parallel size 1) the experts are not split over TP and the EP
//   group spans TP x DP instead: ep divides tp*dp, each TP rank routes its
//   share of the tokens, and expert gradients are reduced over tp*dp*cp/ep ranks.
//
// `rank_order` lists the dimensions fastest-varying first, Megatron's
// "tp-cp-ep-dp-pp" by default: consecutive ranks share a TP group, so TP stays
// inside a node. Rank groups are pure functions of (layout, rank); there is no
// global parallel state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/status.h"
#include "core/train_spec.h"

namespace loom {

// kDualPipeV: DeepSeek's DualPipeV (deepseek-ai/DualPipe dualpipev.py), two
// model chunks per stage placed as a V (stage s holds global chunks s and
// 2*pp-1-s, so the embedding and the head are both on stage 0), a forward of
// one chunk paired with a backward of the other, and zero-bubble weight
// gradients deferred to fill the drain (core/program.cc dualpipev_order).
enum class Schedule { kGpipe, k1F1B, kInterleaved, kDualPipeV };
enum class Recompute { kNone, kSelective, kFull };
// How context-parallel attention gets the other ranks' keys and values
// (Megatron's --cp-comm-type, Transformer Engine's cp_comm_type):
//   kP2p        ring attention: K/V blocks travel around the CP ring, each
//               exchange behind the blocks of the one before
//               (AttnFuncWithCPAndKVP2P);
//   kAllGather  the whole sequence's K/V gathered before the attention and
//               the dK/dV reduce-scattered after it, both exposed
//               (AttnFuncWithCPAndKVAllGather; Llama 3, arXiv 2407.21783 §3.3.2);
//   kA2a        DeepSpeed-Ulysses: all-to-alls trade the sequence split for a
//               head split around the attention, which runs on the whole
//               sequence for heads/cp heads (AttnFuncWithCPAndQKVOA2A).
enum class CpComm { kP2p, kAllGather, kA2a };
const char* schedule_name(Schedule s);
// Pipeline placement: the global model chunk (0 .. pp*v-1, in the order the
// layers run) of chunk `chunk` on stage `stage` under schedule `s`:
// chunk*pp + stage (Megatron's interleaving), or the V of DualPipeV (chunk 0
// = stage, chunk 1 = 2*pp-1-stage). The one rule the layout, the stage split
// and the program share.
inline int global_chunk_of(Schedule s, int pp, int stage, int chunk) {
  return s == Schedule::kDualPipeV && chunk == 1 ? 2 * pp - 1 - stage : chunk * pp + stage;
}
const char* recompute_name(Recompute r);
const char* cp_comm_name(CpComm c);  // "p2p", "all_gather", "a2a" (Megatron's spelling)
Result<Schedule> parse_schedule(const std::string& text);
Result<Recompute> parse_recompute(const std::string& text);
Result<CpComm> parse_cp_comm(const std::string& text);

// Megatron-core's selective recompute by module (--recompute-modules, with
// --recompute-granularity selective; megatron/core/transformer/
// transformer_config.py): which parts of a layer re-run in backward. A set of
// these bits; Layout::recompute_modules = 0 is Loom's selective, the
// attention core, which is Megatron's default ["core_attn"].
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1u << 0,   // the attention core (scores and weighted sum)
  kRecomputeLayernorm = 1u << 1,  // the norms that are modules of their own (MLA's input norm, a MoE layer's pre-MLP norm)
  kRecomputeMlaUpProj = 1u << 2,  // MLA's q and kv up-projections and RoPE
  kRecomputeMoeAct = 1u << 3,     // the routed experts' activation function
  kRecomputeMlp = 1u << 4,        // a dense layer's MLP, its TP collectives included
};
inline constexpr unsigned kAllRecomputeModules = (1u << 5) - 1;
// "core_attn+mla_up_proj" (Megatron's names, in the order above); "" for 0.
std::string recompute_modules_text(unsigned modules);
// Names joined by '+'; unknown or repeated names are kInvalidArgument naming
// them and the known ones.
Result<unsigned> parse_recompute_modules(const std::string& text);

// The parallel dimensions, in the canonical order.
enum class Dim { kDp = 0, kTp = 1, kPp = 2, kEp = 3, kCp = 4 };
inline constexpr int kNumDims = 5;
const char* dim_name(Dim d);

struct Layout {
  int dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  int etp = 0;             // expert tensor parallel size: 0 = tp (Megatron's default), or 1 (parallel folding)
  int zero = 0;            // ZeRO stage 0..3 (1 = Megatron's distributed optimizer)
  int micro_batch = 1;     // sequences per micro-batch (b)
  Schedule schedule = Schedule::k1F1B;
  int virtual_stages = 1;  // v: model chunks per pipeline rank (interleaved only)
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  // With recompute=full: recompute only the first N layers of each model
  // chunk and keep the others' activations (Megatron's --recompute-method
  // block --recompute-num-layers N); 0 = every layer.
  int recompute_layers = 0;
  // With recompute=selective: the modules that re-run (RecomputeModule bits,
  // Megatron's --recompute-modules); 0 = the attention core only.
  unsigned recompute_modules = 0;
  // Layers of the first and the last model chunk (Megatron's
  // --decoder-first/last-pipeline-num-layers); 0 = the even split's.
  int first_stage_layers = 0, last_stage_layers = 0;
  bool overlap_grad_reduce = true;   // DP gradient buckets during backward
  bool overlap_param_gather = true;  // ZeRO-3 prefetch / ZeRO-1 gather overlap
  CpComm cp_comm = CpComm::kP2p;      // with cp > 1: how attention exchanges K/V
  std::string rank_order = "tp-cp-ep-dp-pp";

  int world() const { return dp * tp * pp * cp; }
  // The global model chunk of chunk `chunk` on stage `stage` (global_chunk_of).
  int global_chunk(int stage, int chunk) const { return global_chunk_of(schedule, pp, stage, chunk); }
  // The stage that holds the last chunk (the LM head and the loss).
  int head_stage() const { return schedule == Schedule::kDualPipeV ? 0 : pp - 1; }
  // The modules recompute=selective re-runs (kRecomputeCoreAttn when none are
  // named); 0 without selective recompute.
  unsigned selective_modules() const {
    return recompute != Recompute::kSelective ? 0u : recompute_modules ? recompute_modules : unsigned(kRecomputeCoreAttn);
  }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // Parallel folding: experts whole on each rank, the EP group over TP x DP.
  bool folded_experts() const { return expert_tp() != tp; }
  // A rank's place among the tp*dp ranks its experts fold over (tp fastest,
  // Megatron's etp-ep-dp order): its EP rank is f % ep, its expert-DP index f / ep.
  int expert_fold_index(int tp_rank, int dp_rank) const {
    return folded_experts() ? tp_rank + tp * dp_rank : dp_rank;
  }
  int size(Dim d) const;
  // Micro-batches per step for a global batch: B / (dp * micro_batch).
  int64_t num_micro_batches(int64_t global_batch) const { return global_batch / (int64_t(dp) * micro_batch); }
  // "dp=2,tp=4,pp=2,ep=1,cp=1,zero=1,micro=1,schedule=1f1b,v=1,sp=1,recompute=none"
  std::string to_string() const;
  bool operator==(const Layout&) const = default;
};

// The largest size of a dimension, and of their product (the world), that a
// layout may have: 2^24 ranks. Every int product of layout sizes stays far
// from overflowing.
inline constexpr int kMaxLayoutValue = 1 << 24;

// Parses the `--layout` syntax above; keys left out keep the defaults of `base`.
// Unknown keys and malformed values are kInvalidArgument naming the key.
Result<Layout> parse_layout(const std::string& text, const Layout& base = Layout{});

// Rejects every impossible combination with a message naming the field and the
// fix. `world` is the number of ranks the run has (0 = do not check).
Status validate_layout(const Layout& layout, const ModelSpec& model, const TrainSpec& train, int world);

// Coordinates of a rank along each dimension. For the dims of `rank_order`
// (tp, cp, ep-within-dp, dp, pp) the rank is decomposed mixed-radix, the first
// listed dim varying fastest. `ep` and `dp` coordinates: dp index in [0,dp),
// ep index = dp index % ep (expert shard), expert-dp index = dp index / ep.
struct RankCoords {
  int dp = 0, tp = 0, pp = 0, ep = 0, cp = 0;
};

class RankGrid {
 public:
  // `layout` must have passed validate_layout (rank_order well-formed).
  explicit RankGrid(const Layout& layout);
  int world() const { return world_; }
  RankCoords coords(int rank) const;
  int rank_of(const RankCoords& c) const;
  // All ranks in `rank`'s group along `d`, ascending by coordinate along d.
  // Dim::kEp gives the ranks that share this rank's expert-DP slice (size ep).
  std::vector<int> group(Dim d, int rank) const;
  // Rank-distance between consecutive members of a group along d.
  int stride(Dim d) const;

 private:
  std::array<int, kNumDims> size_{};
  std::array<int, kNumDims> stride_{};
  int world_ = 1;
};

// How a communicator group sits on nodes: the input of the comm cost model.
struct GroupShape {
  int ranks = 1;           // members
  int nodes = 1;           // distinct nodes the members sit on
  int ranks_per_node = 1;  // members per node (ranks / nodes)
};
// Shape of the groups along `d` when nodes hold `devices_per_node` ranks.
GroupShape group_shape(const Layout& layout, Dim d, int devices_per_node);

// Shape of the gradient group, DP x CP (context-parallel ranks hold the same
// weights and sum their gradients with the DP ranks'): group_shape(kDp) when cp is 1.
GroupShape gradient_group_shape(const Layout& layout, int devices_per_node);
// The EP group (over DP, or over TP x DP when folded) and the expert-DP group
// (the ranks holding the same experts: over DP x CP, or TP x DP x CP folded).
GroupShape expert_group_shape(const Layout& layout, int devices_per_node);
GroupShape expert_dp_group_shape(const Layout& layout, int devices_per_node);

// Parses a rank order like "tp-cp-ep-dp-pp"; must name tp, cp, dp, pp once
// (ep optional, it lives inside dp). Returns the dims fastest first.
Result<std::vector<Dim>> parse_rank_order(const std::string& text);

}  // namespace loom
