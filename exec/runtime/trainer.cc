// The Trainer's set-up and its program walk: every op of this rank's stage,
// in program order, dispatched to the module that runs it.
#include "exec/runtime/trainer.h"

#include "exec/runtime/trainer_impl.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "core/executor_head.h"
#include "core/stage_split.h"
#include "exec/backend/backend_error.h"
#include "exec/backend/memory_ledger.h"

namespace loom::exec {

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  coords_ = impl_->coords;
  params_ = &impl_->params;
}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::create(Communicator* world, const TrainerConfig& cfg, TokenSource* data) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->world = world;
  impl->data = data;
  Impl* raw = impl.get();
  LOOM_RETURN_IF_ERROR(guard_backend([raw] { return raw->setup(); }, "setting up the trainer"));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

// What can be checked before anything is allocated: the layout against the
// model and the world, and the program against the communicators.
Status Trainer::Impl::check_can_run() const {
  const Layout& l = cfg.layout;
  if (l.ep > 1 && !dims.moe.enabled())
    return invalid_argument("execute: ep=" + std::to_string(l.ep) + " shards experts, and " + cfg.model.name +
                            " has none; use ep=1");
  if (dims.moe.enabled() && ((!l.folded_experts() && dims.moe.F % l.tp) || dims.moe.Fs % l.tp))
    return invalid_argument("execute: the experts' intermediate size (" + std::to_string(dims.moe.F) +
                            (dims.moe.Fs ? ", shared " + std::to_string(dims.moe.Fs) : std::string()) +
                            ") does not split over tp=" + std::to_string(l.tp) + "; use a tp dividing it");
  if (dims.Vp % l.tp) return invalid_argument("execute: padded vocabulary does not split over tp");
  if (data && data->vocab_size() > dims.V)
    return invalid_argument("execute: the data's vocabulary (" + std::to_string(data->vocab_size()) +
                            ") is larger than the model's (" + std::to_string(dims.V) + "); scale vocab up");
  if (l.sequence_parallel && (rows() % l.tp))
    return invalid_argument("execute: sequence parallel needs micro*seq divisible by tp");
  // Pipeline message tags (core/program.h p2p_tag) hold the chunk in 6 bits
  // and the micro-batch in 20.
  if (l.pp > 1 && (l.virtual_stages > 63 || program.config.micro_batches >= (int64_t(1) << 20)))
    return invalid_argument("execute: " + std::to_string(program.config.micro_batches) + " micro-batches of " +
                            std::to_string(l.virtual_stages) +
                            " chunks per stage exceed the pipeline's message tags (at most 2^20 micro-batches, 63 "
                            "chunks); lower the global batch or raise the micro-batch");
  return Status::ok();
}

Status executor_runs_layout(const Layout& l) {
  if (l.recompute_modules)
    return unsupported("execute: the plan recomputes Megatron's modules " + recompute_modules_text(l.recompute_modules) +
                       " (recompute_modules); Loom's executor re-runs the attention core only under "
                       "recompute=selective: plan without recompute_modules, or run the plan's --export megatron");
  return Status::ok();
}

Status Trainer::Impl::setup() {
  const Layout& l = cfg.layout;
  LOOM_RETURN_IF_ERROR(validate_layout(l, cfg.model, cfg.train, world->size()));
  LOOM_RETURN_IF_ERROR(executor_runs_layout(l));
  LOOM_ASSIGN_OR_RETURN(dims, model_dims(cfg.model, cfg.train.seq_len));
  LOOM_ASSIGN_OR_RETURN(program, build_program(program_config_for(l, cfg.train.global_batch, cfg.grad_buckets)));
  LOOM_RETURN_IF_ERROR(check_can_run());
  if (cfg.backend) {
    backend = cfg.backend;
  } else {
    own_backend = make_cpu_backend();
    backend = own_backend.get();
  }
  Communicator* devw = cfg.device_world ? cfg.device_world : world;
  if (devw->size() != world->size() || devw->rank() != world->rank())
    return invalid_argument("execute: the device communicator does not match the world (rank " +
                            std::to_string(devw->rank()) + "/" + std::to_string(devw->size()) + " vs " +
                            std::to_string(world->rank()) + "/" + std::to_string(world->size()) + ")");
  RankGrid grid(l);
  coords = grid.coords(world->rank());
  auto color_of = [&](Dim d) {
    RankCoords c = coords;
    if (d == Dim::kTp) c.tp = 0;
    if (d == Dim::kDp) c.dp = 0;
    if (d == Dim::kPp) c.pp = 0;
    if (d == Dim::kCp) c.cp = 0;
    return grid.rank_of(c);
  };
  LOOM_ASSIGN_OR_RETURN(tp, devw->split(color_of(Dim::kTp), coords.tp, "tp"));
  // Gradients and ZeRO shards span DP x CP (Megatron's dp-cp group): CP
  // ranks hold the same parameters and different tokens.
  int dp_cp_rank = coords.dp;
  if (l.cp > 1) {
    LOOM_ASSIGN_OR_RETURN(cp, devw->split(color_of(Dim::kCp), coords.cp, "cp"));
    RankCoords c = coords;
    c.dp = 0;
    c.cp = 0;
    dp_cp_rank = coords.dp * l.cp + coords.cp;
    LOOM_ASSIGN_OR_RETURN(dp, devw->split(grid.rank_of(c), dp_cp_rank, "dp-cp"));
  } else {
    LOOM_ASSIGN_OR_RETURN(dp, devw->split(color_of(Dim::kDp), coords.dp, "dp"));
  }
  // MoE: the EP group (the ranks that split the experts among them) and the
  // expert-DP group (the ranks holding the same experts, over DP and CP).
  // The experts fold over the DP ranks, or (etp=1) over TP x DP: f is this
  // rank's place among them, its EP rank f % ep.
  const int ep = l.ep, f = expert_fold();
  {
    const int folds = (l.folded_experts() ? l.tp : 1) * l.dp / ep;  // EP groups per (pp, cp, TP rank)
    // Unfolded, every TP rank has its own groups (its slice of the experts).
    const int tps = l.folded_experts() ? 1 : l.tp, tpr = l.folded_experts() ? 0 : coords.tp;
    // Colors: an EP group per (pp, cp, TP rank, f / ep), an expert-DP group per (pp, TP rank, f % ep).
    LOOM_ASSIGN_OR_RETURN(ep_comm, devw->split(((coords.pp * l.cp + coords.cp) * tps + tpr) * folds + f / ep, f % ep,
                                               "ep"));
    LOOM_ASSIGN_OR_RETURN(edp, devw->split((coords.pp * tps + tpr) * ep + f % ep, (f / ep) * l.cp + coords.cp, "edp"));
  }
  LOOM_ASSIGN_OR_RETURN(pipeline, Pipeline::create(*devw, color_of(Dim::kPp), l, coords.pp, backend));
  // Tied embeddings on two stages: the first and last stage keep a copy each
  // and sum their gradients (Megatron's embedding group).
  // (DualPipeV holds both on stage 0: no copy.)
  has_embedding_copy_pair = dims.tied && l.head_stage() != 0;
  const bool in_emb = has_embedding_copy_pair && (coords.pp == 0 || coords.pp == l.pp - 1);
  const int emb_color = in_emb ? color_of(Dim::kPp) : world->size() + world->rank();
  LOOM_ASSIGN_OR_RETURN(emb, devw->split(emb_color, coords.pp, "embedding"));
  // Communicators without tags (NCCL) pair sends and receives in call order,
  // and a send waits on its stream until the receive runs: the schedule must
  // pair in order and progress under those rules (core/program.h).
  if (l.pp > 1 && !pipeline->matches_by_tag()) {
    const std::string why = "execute: " + pipeline->activation_channel().name() + " pairs pipeline transfers in call order";
    LOOM_RETURN_IF_ERROR(check_p2p_in_order(program).with_context(why));
    LOOM_RETURN_IF_ERROR(check_p2p_progress(program).with_context(why));
  }

  // ZeRO with one DP rank shards nothing: it is ZeRO-0.
  DataParallelConfig dc;
  dc.zero = l.dp * l.cp > 1 ? l.zero : 0;
  dc.dp_size = l.dp * l.cp;
  dc.dp_rank = dp_cp_rank;
  dc.num_chunks = l.virtual_stages;
  dc.sum_replicated_over_tp = l.sequence_parallel && l.tp > 1;
  dc.grad_reduce = cfg.train.grad_reduce;
  dc.edp_size = (l.folded_experts() ? l.tp : 1) * l.dp / ep * l.cp;
  dc.edp_rank = (f / ep) * l.cp + coords.cp;
  sharding = DataParallel::create(dc, backend, &params, dp.get(), tp.get(), edp.get());
  const StageSplit split = split_layers(cfg.model, l);
  LOOM_RETURN_IF_ERROR(lay_out_params(split));
  params.materialize(backend, cfg.train.seed);
  backend->kernels().set_weights(params.params(), params.numel());
  LOOM_RETURN_IF_ERROR(sharding->allocate());
  const bool scaling = backend->kernels().precision() == Precision::kFp16;
  auto counts = [this, zero = dc.zero](const ParamInfo& p) {
    if (p.expert) return zero > 0 || expert_dp_rank_zero();                          // expert-DP replicas: rank 0
    if (p.shard == ShardKind::kReplicated && coords.tp != 0) return false;         // TP replicas: rank 0 counts
    if (has_embedding_copy_pair && p.name == "embed.wte" && coords.pp != 0) return false;  // the tied copy
    return zero > 0 || data_rank_zero();                                           // DP/CP replicas: rank 0 counts
  };
  optimizer = std::make_unique<Optimizer>(cfg.train, cfg.loss_scaling, scaling, backend, &params, sharding.get(), world,
                                          has_embedding_copy_pair ? emb.get() : nullptr, counts);
  optimizer->allocate();
  for (int c = 0; c < l.virtual_stages; ++c) {
    const int g = l.global_chunk(coords.pp, c);
    ChunkConfig cc;
    cc.dims = dims;
    cc.first_layer = split.chunk_first_layer[g];
    cc.num_layers = split.chunk_layers[g];
    cc.has_embedding = first_global(c);
    cc.has_head = last_global(c);
    cc.micro_batch = l.micro_batch;
    cc.seq = cfg.train.seq_len / l.cp;
    cc.cp = CpGroup{l.cp, coords.cp, cp.get(), l.cp_comm};
    cc.tp_size = l.tp;
    cc.tp_rank = coords.tp;
    cc.sequence_parallel = l.sequence_parallel;
    cc.recompute = l.recompute;
    cc.recompute_layers = l.recompute_layers;
    // The fused head (core/executor_head.h). LOOM_HEAD_IN_FORWARD=0 keeps the
    // logits to the backward (the A/B switch); LOOM_HEAD_BLOCK_ROWS=n sets the
    // rows per block (tests; the simulator assumes the default).
    const char* in_fwd = std::getenv("LOOM_HEAD_IN_FORWARD");
    cc.head_grad_in_forward = executor_head_grad_in_forward(l.zero) && !(in_fwd && std::string(in_fwd) == "0");
    if (const char* rows = std::getenv("LOOM_HEAD_BLOCK_ROWS"); rows && std::atoll(rows) > 0)
      cc.head_block_rows = std::atoll(rows);
    const char* packed = std::getenv("LOOM_GEMM_PACKED");  // the A/B switch of ChunkConfig::gemm_reads_packed
    cc.gemm_reads_packed = !(packed && std::string(packed) == "0");
    cc.moe.aux_coeff = cfg.train.moe_aux_loss_coeff;
    cc.moe.z_coeff = cfg.train.moe_z_loss_coeff;
    cc.moe.capacity_factor = cfg.train.moe_capacity_factor;
    cc.moe.ep_size = ep;
    cc.moe.ep_rank = f % ep;
    cc.moe.folded = l.folded_experts();
    cc.moe.ep = ep > 1 ? ep_comm.get() : nullptr;
    cc.moe.micro_weight = 1.0 / double(program.config.micro_batches * l.dp);
    cc.moe.cp_size = l.cp;
    cc.moe.cp_rank = coords.cp;
    cc.moe.cp = cp.get();
    chunks.push_back(std::make_unique<ModelChunk>(cc, &params, backend, tp.get()));
  }
  return Status::ok();
}

// Parameters of every chunk of this stage, in ZeRO units: one per gradient
// bucket, holding the layers (and head / embedding) the matching backward
// part finishes; a tied embedding's copy in a unit of its own.
Status Trainer::Impl::lay_out_params(const StageSplit& split) {
  const Layout& l = cfg.layout;
  // ZeRO-2/3 sync whole chunks after every micro-batch: one bucket.
  const int nb = sharding->zero() >= 2 ? 1 : program.config.grad_buckets;
  for (int c = 0; c < l.virtual_stages; ++c) {
    const int g = l.global_chunk(coords.pp, c);
    const int first = split.chunk_first_layer[g], count = split.chunk_layers[g];
    const bool emb_here = first_global(c), head_here = last_global(c);
    if ((emb_here || head_here) && has_embedding_copy_pair)
      sharding->add_unit(c, emb_here ? nb - 1 : 0, true, [&] { add_word_embedding_param(params, dims, l.tp, coords.tp); });
    for (int k = nb - 1; k >= 0; --k) {  // ascending layers: the last part's bucket first
      const LayerRange r = backward_part_layers(count, k, nb);
      const int ep = l.ep, ep_rank = expert_fold() % l.ep;
      const bool folded = l.folded_experts();
      sharding->add_unit(c, k, false, [&] {
        if (k == nb - 1 && emb_here) add_embedding_params(params, dims, l.tp, coords.tp, !has_embedding_copy_pair);
        add_layer_params(params, dims, first + r.begin, r.end - r.begin, l.tp, coords.tp, ep, ep_rank,
                         LayerParams::kDense, folded);
        if (k == 0 && head_here) {
          add_head_params(params, dims, l.tp, coords.tp);
          if (dims.tied && !params.has("embed.wte")) add_word_embedding_param(params, dims, l.tp, coords.tp);
        }
      });
      // The routed experts of the same layers: a unit of their own, synced over the expert-DP group.
      if (dims.moe.enabled())
        sharding->add_unit(
            c, k, false,
            [&] {
              add_layer_params(params, dims, first + r.begin, r.end - r.begin, l.tp, coords.tp, ep, ep_rank,
                               LayerParams::kExperts, folded);
            },
            /*expert=*/true);
    }
  }
  return Status::ok();
}

void Trainer::Impl::record(const Op& op, Clock::time_point t0, double dur) {
  if (!cfg.record_trace) return;
  TraceEvent e;
  e.name = program.op_name(op);
  e.cat = op_kind_name(op.kind);
  e.pid = world->rank();
  e.tid = static_cast<int>(op.stream);
  e.ts_us = std::chrono::duration<double>(t0 - step_start).count() * 1e6;
  e.dur_us = dur * 1e6;
  e.op_id = op.id;
  e.micro = op.micro;
  e.stage = op.stage;
  e.chunk = op.chunk;
  events.push_back(std::move(e));
}

Status Trainer::Impl::forward(const Op& op) {
  const int c = op.chunk, micro = op.micro;
  const int64_t row0 = int64_t(micro) * rows();
  const int32_t* tok = first_global(c) ? tokens_dev.i32() + row0 : nullptr;
  const int32_t* tgt = last_global(c) ? targets_dev.i32() + row0 : nullptr;
  const float* in = nullptr;
  if (!first_global(c)) {
    LOOM_ASSIGN_OR_RETURN(in, pipeline->forward_input(c, micro));
  }
  DeviceBuffer out;
  MemoryClassScope charge(MemoryClass::kCommBuffers);  // the stage's output, until it is sent
  if (!last_global(c))
    out = DeviceBuffer::uninitialized(backend, size_t(chunks[size_t(c)]->activation_floats()) * sizeof(float));
  const float scale = float(1.0 / double(cfg.train.tokens_per_step()));
  LOOM_RETURN_IF_ERROR(chunks[size_t(c)]->forward(micro, tok, in, tgt, scale, out.f32()));
  pipeline->forward_done(c, micro, std::move(out));
  return Status::ok();
}

// One part of a chunk's backward (the program splits the chunk's last
// backward of the step to match its gradient buckets).
Status Trainer::Impl::backward(const Op& op) {
  const int c = op.chunk, micro = op.micro;
  ModelChunk& chunk = *chunks[size_t(c)];
  const float* dout = nullptr;
  if (op.part == 0) {
    sharding->before_backward(c);
    if (!last_global(c)) {
      LOOM_ASSIGN_OR_RETURN(dout, pipeline->backward_input(c, micro));
    }
  }
  const bool last_part = op.part == op.num_parts - 1;
  DeviceBuffer din;
  MemoryClassScope charge(MemoryClass::kCommBuffers);  // the input's gradient, until it is sent
  if (last_part && !first_global(c))
    din = DeviceBuffer::uninitialized(backend, size_t(chunk.activation_floats()) * sizeof(float));
  LOOM_RETURN_IF_ERROR(chunk.backward_part(micro, dout, din.f32(), op.part, op.num_parts, op.defers_wgrad));
  if (last_part) pipeline->backward_done(c, micro, std::move(din));
  return Status::ok();
}

Status Trainer::Impl::optimizer_step(const Op&) {
  LOOM_ASSIGN_OR_RETURN(update, optimizer->step(current_step));
  return Status::ok();
}

Status Trainer::Impl::run_op(const Op& op) {
  // Reduce-scatters that completed in the background: their gradients'
  // memory goes back now (ZeRO-2/3), as a framework's completion callback would.
  LOOM_RETURN_IF_ERROR(sharding->poll_reductions());
  auto t0 = Clock::now();
  // A device backend runs the op asynchronously: its time ends when the
  // backend's stream has drained (blocking collectives already waited).
  auto op_seconds = [&] {
    if (!backend->host_visible()) backend->synchronize();
    return seconds_since(t0);
  };
  // Waiting for a chunk's parameter gathers (or, before the update, for every
  // sync in flight) is DP communication, not the op's own time.
  auto wait_dp = [&](const Status& waited) {
    times.dp_comm_exposed_s += seconds_since(t0);
    t0 = Clock::now();
    return waited;
  };
  switch (op.kind) {
    case OpKind::kForward:
      LOOM_RETURN_IF_ERROR(wait_dp(sharding->wait_gathers(op.chunk)));
      LOOM_RETURN_IF_ERROR(forward(op));
      if (op.releases_params) sharding->release(op.chunk);
      times.forward_s += op_seconds();
      break;
    case OpKind::kBackward:
      if (op.part == 0) {
        LOOM_RETURN_IF_ERROR(wait_dp(sharding->wait_gathers(op.chunk)));
        // ZeRO-2/3: the previous micro-batch's reduce-scatter of this chunk
        // still reads the gradients this backward accumulates into.
        LOOM_RETURN_IF_ERROR(wait_dp(sharding->wait_reductions(op.chunk)));
      }
      LOOM_RETURN_IF_ERROR(backward(op));
      if (op.releases_params) sharding->release(op.chunk);
      times.backward_s += op_seconds();
      break;
    case OpKind::kWeightGrad:
      LOOM_RETURN_IF_ERROR(chunks[size_t(op.chunk)]->weight_grad(op.micro));
      times.backward_s += op_seconds();
      break;
    case OpKind::kSendActivation:
    case OpKind::kSendGrad:
      LOOM_RETURN_IF_ERROR(pipeline->send(op));
      times.pipeline_wait_s += op_seconds();
      break;
    case OpKind::kRecvActivation:
    case OpKind::kRecvGrad:
      LOOM_RETURN_IF_ERROR(pipeline->recv(op, size_t(chunks[size_t(op.chunk)]->activation_floats())));
      times.pipeline_wait_s += op_seconds();
      break;
    case OpKind::kGradSync:
      LOOM_RETURN_IF_ERROR(sharding->grad_sync(op));
      // Without overlap the program blocks the next compute on the reduction.
      if (!cfg.layout.overlap_grad_reduce) LOOM_RETURN_IF_ERROR(sharding->wait_reductions(op.chunk));
      times.dp_comm_exposed_s += op_seconds();
      break;
    case OpKind::kParamGather:
      LOOM_RETURN_IF_ERROR(sharding->param_gather(op.chunk));
      times.dp_comm_exposed_s += op_seconds();
      break;
    case OpKind::kOptimizer:
      LOOM_RETURN_IF_ERROR(pipeline->wait_sends());  // the stage's last sends: pipeline time
      times.pipeline_wait_s += seconds_since(t0);
      t0 = Clock::now();
      LOOM_RETURN_IF_ERROR(wait_dp(sharding->wait_all()));
      LOOM_RETURN_IF_ERROR(optimizer_step(op));
      {
        // The norm's all-reduce waits for the ranks still in backward: the
        // pipeline's drain (or, without a pipeline, the DP ranks' imbalance).
        const double total = op_seconds(), sync = std::min(update.norm_sync_s, total);
        times.optimizer_s += total - sync;
        (cfg.layout.pp > 1 ? times.pipeline_wait_s : times.dp_comm_exposed_s) += sync;
      }
      break;
  }
  record(op, t0, seconds_since(t0));
  return Status::ok();
}

double Trainer::lr_at(int64_t step) const { return lr_schedule(impl_->cfg.train, step); }

// This DP rank's samples: rows [dp * B/dp, (dp+1) * B/dp) of the global batch,
// on the stages that embed tokens or compute the loss.
Status Trainer::Impl::load_batch(int64_t step) {
  const Layout& l = cfg.layout;
  const int64_t per_dp = cfg.train.global_batch / l.dp, T = cfg.train.seq_len;
  bool needed = false;
  for (int c = 0; c < l.virtual_stages; ++c) needed |= first_global(c) || last_global(c);
  if (!needed) return Status::ok();
  tokens.resize(size_t(per_dp * T));
  targets.resize(size_t(per_dp * T));
  const int64_t first = step * cfg.train.global_batch + int64_t(coords.dp) * per_dp;
  LOOM_RETURN_IF_ERROR(data->read(first, per_dp, T, tokens.data(), targets.data()));
  if (l.cp > 1) keep_cp_chunks(per_dp, T);
  const size_t bytes = tokens.size() * sizeof(int32_t);
  if (tokens_dev.bytes() != bytes) {
    MemoryClassScope charge(MemoryClass::kInputs);
    tokens_dev = DeviceBuffer(backend, bytes);
    targets_dev = DeviceBuffer(backend, bytes);
  }
  backend->copy_to_device_async(tokens_dev.i32(), tokens.data(), bytes);
  backend->copy_to_device_async(targets_dev.i32(), targets.data(), bytes);
  return Status::ok();
}

// Context parallelism: of each micro-batch's B sequences this rank keeps its
// two chunks (context_parallel.h), in the (2, B, c) order the chunk expects.
void Trainer::Impl::keep_cp_chunks(int64_t n, int64_t T) {
  const Layout& l = cfg.layout;
  const int64_t B = l.micro_batch, c = T / (2 * l.cp);
  const CpGroup g{l.cp, coords.cp, nullptr};
  std::vector<int32_t> tok(size_t(n * T / l.cp)), tgt(tok.size());
  size_t o = 0;
  for (int64_t m = 0; m < n / B; ++m)
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < B; ++b) {
        const size_t from = size_t((m * B + b) * T + g.chunk_of_half(h) * c);
        std::copy_n(tokens.begin() + from, c, tok.begin() + o);
        std::copy_n(targets.begin() + from, c, tgt.begin() + o);
        o += size_t(c);
      }
  tokens = std::move(tok);
  targets = std::move(tgt);
}

Result<StepResult> Trainer::step(int64_t step) {
  StepResult r;
  Impl& s = *impl_;
  s.current_op = nullptr;
  LOOM_RETURN_IF_ERROR(guard_backend([&] { return run_step(step, &r); }, [&] {
    return "step " + std::to_string(step + 1) +
           (s.current_op ? " in " + s.program.op_name(*s.current_op) : std::string());
  }()));
  return r;
}

Status Trainer::run_step(int64_t step, StepResult* out) {
  Impl& s = *impl_;
  const Layout& l = s.cfg.layout;
  s.times = StepPhases{};
  s.times.tp_comm_exposed_s = kNotMeasured;
  s.events.clear();
  s.step_start = Clock::now();
  LOOM_RETURN_IF_ERROR(s.load_batch(step));
  s.times.data_wait_s = seconds_since(s.step_start);
  s.loss_sum = 0;
  s.current_step = step;
  s.update = OptimizerResult{};
  const double loss_scale = s.optimizer->loss_scale();
  for (auto& chunk : s.chunks) chunk->set_grad_scale(float(loss_scale));
  for (int32_t id : s.program.stage_ops[size_t(s.coords.pp)]) {
    s.current_op = &s.program.ops[size_t(id)];
    LOOM_RETURN_IF_ERROR(s.run_op(*s.current_op));
  }
  s.current_op = nullptr;
  // The step's loss: one read of each head's device total (no wait per micro-batch).
  for (auto& chunk : s.chunks) s.loss_sum += chunk->take_loss();
  StepResult& r = *out;
  r.step = step;
  r.grad_norm = s.update.grad_norm;
  r.lr = s.update.lr;
  r.skipped = s.update.skipped;
  r.loss_scale = loss_scale;
  // The loss: the head stage's TP rank 0 of every DP rank holds a part; the
  // MoE losses: every stage's TP rank 0 (TP ranks route alike).
  double parts[4] = {(s.coords.pp == l.head_stage() && s.coords.tp == 0) ? s.loss_sum : 0.0, 0, 0, 0};
  double max_load = 0;
  for (auto& chunk : s.chunks) {
    const MoeStats m = chunk->take_moe_stats();
    max_load = std::max(max_load, m.max_load);
    if (s.coords.tp != 0) continue;
    parts[1] += m.aux_loss;
    parts[2] += m.z_loss;
    parts[3] += double(m.dropped);
  }
  LOOM_RETURN_IF_ERROR(s.world->all_reduce(parts, 4, ReduceOp::kSum));
  r.loss = parts[0];
  r.moe_aux_loss = parts[1];
  r.moe_z_loss = parts[2];
  r.moe_dropped = int64_t(parts[3]);
  if (s.dims.moe.enabled()) {
    LOOM_RETURN_IF_ERROR(s.world->all_reduce(&max_load, 1, ReduceOp::kMax));
    r.moe_max_load = max_load;
  }
  double max_elapsed = seconds_since(s.step_start);
  LOOM_RETURN_IF_ERROR(s.world->all_reduce(&max_elapsed, 1, ReduceOp::kMax));
  r.step_time_s = max_elapsed;
  r.phases = s.times;
  r.peak_memory_bytes = s.backend->peak_allocated_bytes();
  r.peak_memory_breakdown = s.backend->peak_memory_breakdown();
  events_ = s.events;
  return Status::ok();
}

}  // namespace loom::exec
