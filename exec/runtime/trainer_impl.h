// Private to exec/runtime: the Trainer's state, shared by trainer.cc (the
// program walk) and trainer_state.cc (checkpoint snapshots and restores).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "core/stage_split.h"
#include "exec/runtime/trainer.h"

namespace loom::exec {

using Clock = std::chrono::steady_clock;

// A ZeRO unit: a slice of the flat parameter buffer, padded to a multiple of
// dp and sharded over the DP group. Each chunk has one; a tied embedding copy
// (first and last stage) gets a unit of its own so that both copies shard
// identically and their gradients can be summed shard by shard.
struct Unit {
  size_t begin = 0, size = 0;  // padded size
  size_t shard = 0;            // size / dp
  size_t shard_offset = 0;     // into the concatenated shard buffers
  int chunk = 0;
  bool tied_embedding = false;
};

struct Trainer::Impl {
  TrainerConfig cfg;
  Communicator* world = nullptr;
  TokenSource* data = nullptr;
  std::unique_ptr<ComputeBackend> own_backend;  // when cfg.backend is null
  ComputeBackend* backend = nullptr;
  // Layout groups, split from the device world. Pipeline transfers travel on
  // one communicator per channel (core/program.h P2pChannel): activations,
  // gradients, and with interleaving the wrap-around edges of each; every
  // channel keeps one order of sends and receives and no cycle between
  // stages, which NCCL's in-stream send/recv needs.
  std::unique_ptr<Communicator> tp, dp, pp, pp_grad, pp_wrap, pp_grad_wrap, emb;
  RankCoords coords;
  ModelDims dims;
  StageSplit split;
  Program program;
  ParamStore params;
  std::vector<std::unique_ptr<ModelChunk>> chunks;
  std::vector<Unit> units;                 // sorted by begin
  std::vector<std::vector<int>> chunk_units;
  std::vector<int> gathered;               // ZeRO-3: outstanding gathers per chunk
  // Parameter all-gathers (in place) in flight per chunk, completed before
  // the chunk's next compute or the optimizer.
  std::vector<std::vector<std::unique_ptr<CommRequest>>> gathers_in_flight;
  std::vector<std::vector<bool>> bucket_sent;  // ZeRO-0: buckets already all-reducing, per chunk
  bool has_embedding_copy_pair = false;  // tied embedding on first and last stage
  int64_t micro_batches = 0;
  // Optimizer state: full (ZeRO 0) or this DP rank's shards (ZeRO >= 1).
  DeviceBuffer m, v, shard_grad;
  int64_t adam_step = 0;
  // fp16: dynamic loss scaling (the gradients carry the scale until the update).
  bool scaling = false;
  LossScaler scaler;
  bool skipped = false;
  // Per (chunk, micro) activation buffers.
  std::map<std::pair<int, int>, DeviceBuffer> act_in, act_out, grad_in, grad_out;
  std::vector<std::unique_ptr<CommRequest>> pending;  // sends and DP syncs in flight
  std::vector<DeviceBuffer> send_buffers;            // alive until their sends complete
  std::vector<bool> grads_discarded;                 // ZeRO-2/3: a chunk's full gradients were given back
  std::vector<bool> released;                        // ZeRO-3: a chunk's non-owned parameters were given back
  int64_t current_step = 0;
  double grad_norm = 0, lr = 0;
  std::vector<int32_t> tokens, targets;              // this DP rank's samples of the step (host)
  DeviceBuffer tokens_dev, targets_dev;              // ... in the backend's memory
  std::vector<bool> reduced_chunk;                   // TP/embedding reductions done for the current micro
  PhaseTimes times;
  std::vector<TraceEvent> events;
  Clock::time_point step_start;

  int64_t N() const { return int64_t(cfg.layout.micro_batch) * cfg.train.seq_len; }
  bool first_global(int c) const { return c == 0 && coords.pp == 0; }
  bool last_global(int c) const { return c == cfg.layout.virtual_stages - 1 && coords.pp == cfg.layout.pp - 1; }

  Status setup();
  Communicator& channel(const Op& op);  // the pipeline communicator of a transfer
  Status run_op(const Op& op, double* loss_sum);
  Status forward(int c, int micro, double* loss_sum);
  Status backward(int c, int micro, int buckets);
  Status send_bucket(int c, int unit_index, int bucket, int buckets);
  Status reduce_shared_grads(int c);
  Status grad_sync(const Op& op);
  Status param_gather(int c);        // starts the gathers (non-blocking)
  Status wait_gathers(int c);        // completes chunk c's gathers in flight
  Status wait_all_gathers();
  void release(int c);
  void reclaim_released(int c);  // accounts a released chunk's pages as resident again (before rewriting them)
  const Unit& unit_of(size_t offset) const;
  Status optimizer_step(int64_t step, double* grad_norm, double* lr);
  Status wait_pending();
  void record(const Op& op, Clock::time_point t0, double dur);
};

}  // namespace loom::exec
