// Private to exec/runtime: the Trainer's state, shared by trainer.cc (the
// program walk) and trainer_state.cc (checkpoint snapshots and restores).
// The work itself lives in the modules: Pipeline (p2p and activation
// buffers), DataParallel (the ZeRO stage), Optimizer; the Impl holds them and
// dispatches the program's ops to them.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "core/stage_split.h"
#include "exec/runtime/data_parallel.h"
#include "exec/runtime/optimizer.h"
#include "exec/runtime/pipeline.h"
#include "exec/runtime/trainer.h"

namespace loom::exec {

using Clock = std::chrono::steady_clock;

struct Trainer::Impl {
  TrainerConfig cfg;
  Communicator* world = nullptr;
  TokenSource* data = nullptr;
  std::unique_ptr<ComputeBackend> own_backend;  // when cfg.backend is null
  ComputeBackend* backend = nullptr;
  RankCoords coords;
  ModelDims dims;
  Program program;
  // Layout groups, split from the device world.
  std::unique_ptr<Communicator> tp, dp, emb;  // dp: the gradient group, DP x CP under context parallelism
  std::unique_ptr<Communicator> cp;          // the CP ring (cp > 1)
  std::unique_ptr<Communicator> ep_comm, edp;  // MoE: the EP and expert-DP groups
  std::unique_ptr<Pipeline> pipeline;
  ParamStore params;
  std::unique_ptr<DataParallel> sharding;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<std::unique_ptr<ModelChunk>> chunks;
  bool has_embedding_copy_pair = false;  // tied embedding on first and last stage

  // The step in progress.
  int64_t current_step = 0;
  const Op* current_op = nullptr;  // for errors: the op a backend failure happened in
  double loss_sum = 0;
  OptimizerResult update;
  std::vector<int32_t> tokens, targets;  // this DP rank's samples of the step (host)
  DeviceBuffer tokens_dev, targets_dev;  // ... in the backend's memory
  StepPhases times;
  std::vector<TraceEvent> events;
  Clock::time_point step_start;

  // Token rows of one micro-batch on this rank (a CP rank holds seq / cp of each sequence).
  int64_t rows() const { return int64_t(cfg.layout.micro_batch) * cfg.train.seq_len / cfg.layout.cp; }
  // The rank that speaks for its replicas of the data-parallel state: DP
  // (and CP) rank 0.
  bool data_rank_zero() const { return coords.dp == 0 && coords.cp == 0; }
  // This rank's place among the ranks its MoE experts fold over (core/layout.h).
  int expert_fold() const { return cfg.layout.expert_fold_index(coords.tp, coords.dp); }
  // The rank that speaks for its expert-DP group (the ranks holding the same experts).
  bool expert_dp_rank_zero() const { return expert_fold() < cfg.layout.ep && coords.cp == 0; }
  bool first_global(int c) const { return cfg.layout.global_chunk(coords.pp, c) == 0; }
  bool last_global(int c) const {
    const Layout& l = cfg.layout;
    return l.global_chunk(coords.pp, c) == l.pp * l.virtual_stages - 1;
  }

  Status setup();
  Status check_can_run() const;
  Status lay_out_params(const StageSplit& split);
  void keep_cp_chunks(int64_t n, int64_t T);
  Status load_batch(int64_t step);
  Status run_op(const Op& op);
  Status forward(const Op& op);
  Status backward(const Op& op);
  Status optimizer_step(const Op& op);
  void record(const Op& op, Clock::time_point t0, double dur);
};

}  // namespace loom::exec
