// Data parallelism of one rank: the ZeRO stage as a strategy object that owns
// the shard arithmetic (Megatron-core's DistributedDataParallel with its
// distributed optimizer, DeepSpeed's ZeRO stages).
//
// The flat parameter buffer of a rank is cut into units: per model chunk one
// unit per gradient bucket (the parameters backward part k of the chunk
// finishes, core/program.h backward_part_layers), plus a unit of its own for a
// tied embedding's copy on the first and last stage. Each unit is padded to a
// multiple of dp and sharded over the DP group: DP rank r owns elements
// [r * shard, (r + 1) * shard) of every unit. ZeRO 1-3 keep the optimizer state
// (and the gradients the update reads) for the owned shards only; ZeRO-0 keeps
// everything and owns everything.
//
//   ZeRO-0  grad sync = non-blocking all-reduce of the bucket's units
//   ZeRO-1  grad sync = reduce-scatter of the bucket's units into the shard
//           gradients, once per step; parameters all-gathered after the update
//   ZeRO-2  reduce-scatter after every micro-batch's backward, the full
//           gradient given back until the next backward writes it
//   ZeRO-3  ZeRO-2, and the parameters a rank does not own given back between
//           uses: gathered before a chunk's compute, released after it
//
// The same arithmetic serves checkpoints: gather_state() and scatter_state()
// turn sharded optimizer state into whole local tensors and back.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/program.h"
#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"
#include "exec/model/params.h"
#include "exec/runtime/grad_compress.h"

namespace loom::exec {

struct ZeroUnit {
  size_t begin = 0, size = 0;  // into the flat buffers; size padded to a multiple of dp
  size_t shard = 0;            // size / dp
  size_t shard_offset = 0;     // into the concatenated shard buffers
  int chunk = 0;
  int bucket = 0;              // the gradient bucket (program grad-sync part) that syncs it
  bool tied_embedding = false;
  bool expert = false;         // routed experts: sharded and synced over the expert-DP group
};

// The elements of one parameter this rank updates: flat [begin, end), and
// where they sit in the state buffers (the shard buffers with ZeRO >= 1, the
// flat buffers with ZeRO-0).
struct OwnedSlice {
  size_t begin = 0, end = 0;
  size_t state_offset = 0;
  int64_t size() const { return int64_t(end - begin); }
};

struct DataParallelConfig {
  int zero = 0;
  int dp_size = 1, dp_rank = 0;
  int num_chunks = 1;
  // Sequence parallelism with tp > 1: replicated parameters (norms, biases of
  // row-parallel layers) hold partial gradients per TP rank until summed.
  bool sum_replicated_over_tp = false;
  // The DP reduction's element type (--grad-reduce): bf16 / fp8 pack the
  // gradients on the wire and sum what arrives in fp32 (grad_compress.h).
  GradReduce grad_reduce = GradReduce::kFp32;
  // The expert-data-parallel group (Megatron-Core's expert_data_parallel):
  // the DP ranks holding the same routed experts, dp / ep of them. Expert
  // units shard and sync over it.
  int edp_size = 1, edp_rank = 0;
};

class DataParallel {
 public:
  // ZeRO 0-3; `dp` moves the gradients and parameters, `tp` sums the
  // replicated gradients under sequence parallelism (may be null otherwise).
  static std::unique_ptr<DataParallel> create(const DataParallelConfig& cfg, ComputeBackend* backend,
                                              ParamStore* params, Communicator* dp, Communicator* tp,
                                              Communicator* edp = nullptr);
  virtual ~DataParallel();

  // Layout, while the ParamStore is filled: `add_params` adds the unit's
  // parameters; the unit is padded after them.
  void add_unit(int chunk, int bucket, bool tied_embedding, const std::function<void()>& add_params,
                bool expert = false);
  // After ParamStore::materialize (the layout is final): the buffers and
  // per-chunk lists the sharding needs.
  virtual Status allocate();

  int zero() const { return cfg_.zero; }
  const std::vector<ZeroUnit>& units() const { return units_; }
  // Floats of optimizer state per moment: the shards (ZeRO >= 1) or all.
  size_t state_floats() const;
  const ZeroUnit& unit_of(size_t flat_offset) const;
  // The part of `p` this rank updates; nullopt when it owns none of it.
  std::optional<OwnedSlice> owned(const ParamInfo& p) const;
  // The gradient the update reads for an owned slice / for a whole unit
  // (what is summed across the tied-embedding pair).
  float* update_grad(const OwnedSlice& s) const;
  // update_grad(s) == update_grad_base() + s.state_offset for every owned slice.
  float* update_grad_base() const;
  float* update_grad(const ZeroUnit& u, size_t* count) const;

  // Program ops (core/program.h).
  // Before a chunk's backward (its first part) writes gradients.
  void before_backward(int chunk);
  // kGradSync: bucket op.part of chunk op.chunk once per step (op.micro < 0),
  // or all of the chunk after a micro-batch (ZeRO-2/3).
  virtual Status grad_sync(const Op& op) = 0;
  // kParamGather: starts the all-gathers of a chunk's parameters.
  virtual Status param_gather(int chunk);
  // Completes chunk c's gathers in flight (before its compute).
  Status wait_gathers(int chunk);
  // A compute op marked releases_params is done with the chunk (ZeRO-3).
  virtual void release(int chunk) { (void)chunk; }
  // ZeRO-3: account a released chunk as resident again before rewriting it.
  virtual void reclaim_released(int chunk) { (void)chunk; }
  // ZeRO >= 1: completes the reduce-scatters in flight of `chunk` (-1: of
  // every chunk), then what follows each (the full gradient zeroed, or given
  // back under ZeRO-2/3). Before a chunk's backward writes its gradients
  // again (the previous micro-batch's reduce still reads them).
  // `unit`: only that unit's.
  Status wait_reductions(int chunk, const ZeroUnit* unit = nullptr);
  // Finishes the reduce-scatters that have completed, without waiting (at op
  // boundaries: ZeRO-2/3 give a gradient's memory back soon after its reduce).
  Status poll_reductions();
  // Before the update: every sync and gather of the step completed.
  Status wait_all();
  // After the update (or a skipped step): gradients back to zero.
  void clear_grads();

  // Checkpoints. Whole local tensors of a per-rank state buffer (`state`,
  // state_floats() long): gathered over DP into `full` (params.numel() floats,
  // backend memory) / this rank's shards copied out of `full` (host memory).
  Status gather_state(const float* state, float* full);
  void scatter_state(const float* full_host, float* state);
  // ZeRO: every rank holds all parameters again (before a checkpoint).
  Status gather_all_params();

  DataParallel(const DataParallelConfig& cfg, ComputeBackend* backend, ParamStore* params, Communicator* dp,
               Communicator* tp, Communicator* edp);

 protected:
  // Sums the replicated gradients of `units` over TP (sequence parallelism),
  // once per backward of their chunk.
  Status sum_replicated(const std::vector<const ZeroUnit*>& units);
  // This rank's elements [begin, end) of a unit, relative to its start.
  std::pair<size_t, size_t> own_range(const ZeroUnit& u) const {
    const size_t r = size_t(u.expert ? cfg_.edp_rank : cfg_.dp_rank);
    return {r * u.shard, (r + 1) * u.shard};
  }
  // The group a unit shards and syncs over, and its compressor (null: fp32).
  Communicator* group(const ZeroUnit& u) const { return u.expert ? edp_ : dp_; }
  GradCompressor* compressor(const ZeroUnit& u) const { return u.expert ? compress_edp_.get() : compress_.get(); }
  // The units a grad-sync op covers.
  std::vector<const ZeroUnit*> units_of(const Op& op) const;
  const std::vector<const ZeroUnit*>& units_of_chunk(int chunk) const { return chunk_units_[size_t(chunk)]; }
  // ZeRO-2/3 gave a chunk's full gradients back: account them again.
  virtual void reclaim_grads(int chunk) { (void)chunk; }
  // Whether the chunk's full gradient was given back (it reads as zeros).
  virtual bool grads_discarded(int chunk) const { (void)chunk; return false; }
  // After a unit's reduce-scatter completed (ZeRO >= 1).
  virtual void after_reduce(const ZeroUnit& u) { (void)u; }
  Status finish_reduction(size_t i, bool block, bool* done);

  DataParallelConfig cfg_;
  ComputeBackend* backend_;
  ParamStore* params_;
  Communicator* dp_;
  Communicator* tp_;
  Communicator* edp_;
  std::vector<ZeroUnit> units_;  // ascending begin
  size_t shard_total_ = 0;
  DeviceBuffer shard_grad_;      // ZeRO >= 1
  std::unique_ptr<GradCompressor> compress_;  // --grad-reduce bf16 / fp8 with dp > 1
  std::unique_ptr<GradCompressor> compress_edp_;  // ... with edp > 1
  std::vector<std::vector<std::unique_ptr<CommRequest>>> gathers_;  // in flight, per chunk
  std::vector<std::unique_ptr<CommRequest>> syncs_;                 // non-blocking all-reduces in flight (ZeRO-0)
  struct Reduction {
    const ZeroUnit* unit;
    std::unique_ptr<CommRequest> req;
  };
  std::vector<Reduction> reductions_;  // reduce-scatters in flight (ZeRO >= 1), in start order
  std::vector<std::vector<const ZeroUnit*>> chunk_units_;         // per chunk (after allocate())
  std::vector<std::vector<const ParamInfo*>> replicated_;         // per unit: its TP-replicated parameters
  std::vector<bool> summed_;     // per unit: replicated gradients summed over TP this backward
};

}  // namespace loom::exec
