// Layout search: enumerate every valid layout of a world size, evaluate each
// in closed form (sim/evaluate.h) on all cores, drop those that do not fit,
// rank the rest by throughput, mark the memory-vs-throughput Pareto front, and
// refine the best few with the event engine (sim/simulate.h).
//
// Enumerated: factorizations world = dp * tp * pp (ep | dp and | experts for
// MoE models), ZeRO 0-3, micro-batch sizes dividing B/dp, schedules GPipe /
// 1F1B / interleaved with v dividing the layers per stage / DualPipeV (v = 2,
// ZeRO 0-1, m >= 2pp), sequence parallel
// on/off (tp > 1), recompute none / selective / full (and, per fitting full
// layout, the fewest recomputed layers a chunk that fit). TP is kept inside one
// NVLink domain (tp <= devices per node), as every production stack does.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "sim/evaluate.h"
#include "sim/simulate.h"

namespace loom {

struct SearchSpace {
  int world = 1;
  int max_micro_batch = 64;
  int max_virtual_stages = 8;
  std::vector<int> zero_stages{0, 1, 2, 3};
  // The stages tried when pp > 1 (a stack's pipeline_zero_stages); empty: zero_stages.
  std::vector<int> pipeline_zero_stages;
  std::vector<Recompute> recompute{Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  std::vector<Schedule> schedules{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kDualPipeV};
  bool try_sequence_parallel = true;
  // Pipelined layouts also with one layer fewer on the last chunk, and one
  // fewer on both the first and the last (Megatron's --decoder-first/last-
  // pipeline-num-layers; Llama 3 trained 126 layers on PP16 that way): the
  // embedding, the head and any multi-token-prediction modules weigh there.
  bool try_uneven_ends = true;
  // The same for interleaved layouts (Megatron's export cannot pin the first
  // and last chunk of an interleaved split).
  bool uneven_ends_interleaved = true;
  // Only layer splits Megatron-LM can state (megatron_split_status,
  // sim/export.h): interleaved with pp*v dividing the layers, otherwise even
  // or with equal middle stages. Set by the megatron-core framework.
  bool megatron_splits = false;
  bool sequence_parallel_required = false;  // tp > 1 layouts only with SP (torchtitan)
  // Partial full recompute (Layout::recompute_layers, Megatron's
  // --recompute-method block): for each recompute=full layout that fits, also
  // the one recomputing the fewest layers a chunk that still fits (memory
  // falls and time rises with the count, so that one is the fastest that
  // fits). Loom's executor and Megatron-core run it; the torchtitan and
  // DeepSpeed frameworks turn it off.
  bool partial_recompute = true;  // not while fix_recompute pins the mode
  int fix_recompute_layers = 0;  // --fix recompute_layers=N: recompute=full layouts with that N only
  // Megatron's --recompute-modules (Layout::recompute_modules): only a stack
  // that has them (the megatron-core framework) takes --fix
  // recompute_modules=a+b, which pins recompute=selective with those modules;
  // otherwise its search adds, to each selective layout of a MoE or MLA
  // model, the same with the cheap modules that apply (layernorm, moe_act,
  // mla_up_proj).
  bool recompute_modules = false;
  unsigned fix_recompute_modules = 0;
  int max_tp = 0;  // 0: the hardware's devices per node (or NVLink domain)
  // Context parallelism: cp from 1 to max_cp (powers of two dividing the
  // ranks left after tp and pp), while each of the 2*cp chunks of a sequence
  // keeps at least min_cp_chunk tokens: below that the attention blocks run
  // far from their efficiency (the H100 table: 0.32 of peak at 0.07 GFLOP)
  // beside a ring message per step, and the search space would grow for
  // layouts that do not win. --fix cp=N tries any N.
  int max_cp = 8;
  int min_cp_chunk = 512;
  // How CP layouts exchange keys and values (Layout::cp_comm): each cp > 1
  // layout is tried with each the stack runs (all three for Loom's executor
  // and Megatron-core; the heads exchange where cp divides the heads);
  // --fix cp_comm=X pins one.
  std::vector<CpComm> cp_comms{CpComm::kP2p, CpComm::kAllGather, CpComm::kA2a};
  std::optional<CpComm> fix_cp_comm;
  // Pinned dimensions (0 = free), e.g. to reproduce a published layout.
  int fix_dp = 0, fix_tp = 0, fix_pp = 0, fix_ep = 0, fix_etp = 0, fix_cp = 0, fix_micro = 0, fix_zero = -1, fix_v = 0;
  // MoE with tp > 1: also the folded layouts (etp = 1, EP over TP x DP).
  bool try_expert_folding = true;
  std::optional<Recompute> fix_recompute;
  std::optional<Schedule> fix_schedule;
  std::optional<bool> fix_sp;
  bool overlap_grad_reduce = true;   // applied to every enumerated layout
  // When non-empty, only layouts with one of these ZeRO stages overlap their
  // gradient reduction (DeepSpeed: ZeRO-3 only by default).
  std::vector<int> overlap_grad_zero_stages;
  bool overlap_param_gather = true;
  // The ZeRO stages whose parameter gather overlaps compute (a framework's
  // overlap.param_gather list); empty: every stage, as overlap_param_gather.
  std::vector<int> overlap_param_zero_stages;
  int refine_top = 8;   // candidates re-timed by the event engine
  int threads = 0;      // 0: all hardware threads
};

struct Candidate {
  Layout layout;
  Estimate estimate;
  bool pareto = false;
};

struct SearchResult {
  std::vector<Candidate> ranked;       // fitting layouts, fastest first (after refinement)
  std::vector<SimResult> refined;      // event-engine results of the first `refine_top`, same order
  int64_t enumerated = 0;              // layouts generated
  int64_t valid = 0;                   // passed validate_layout
  int64_t fitting = 0;                 // fit in memory (partial-recompute variants included)
  int64_t partial_variants = 0;        // recompute=full layouts' fewest-layers variants, added beside them
  double elapsed_s = 0;
  // When nothing fits: the layout that came closest, and why it does not fit.
  std::optional<Candidate> closest;
  std::string closest_why;
};

// Pins dimensions from `loom plan --fix` text: "tp=8,pp=2,recompute=full"
// (keys dp, tp, pp, ep, micro, zero, v, sp, split=even|ends, schedule,
// recompute, recompute_layers, overlap_grad, overlap_param, cp_comm); errors name the
// bad item.
Status apply_search_fix(const std::string& text, SearchSpace* space);

// Every layout of the space that passes validate_layout (unevaluated).
std::vector<Layout> enumerate_layouts(const Evaluator& eval, const SearchSpace& space);

// `progress` (optional) gets the fraction done, from worker threads; setting
// `*cancel` stops early with what was evaluated so far. Errors:
// kInvalidArgument when the space is empty (e.g. no factorization is valid),
// with the reason of the first rejection.
Result<SearchResult> search_layouts(const Evaluator& eval, const SearchSpace& space,
                                    const std::function<void(double)>& progress = {},
                                    const std::atomic<bool>* cancel = nullptr);

}  // namespace loom
