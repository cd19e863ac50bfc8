#include "exec/runtime/trainer.h"

#include "exec/runtime/trainer_impl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "core/stage_split.h"

namespace loom::exec {

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tags of pipeline messages: kind, chunk and micro-batch.
int p2p_tag(bool grad, int chunk, int micro) { return (grad ? 1 << 26 : 0) + (chunk << 20) + micro; }


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
  LOOM_RETURN_IF_ERROR(impl->setup());
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Status Trainer::Impl::setup() {
  const Layout& l = cfg.layout;
  LOOM_RETURN_IF_ERROR(validate_layout(l, cfg.model, cfg.train, world->size()));
  LOOM_ASSIGN_OR_RETURN(dims, model_dims(cfg.model, cfg.train.seq_len));
  if (l.ep > 1) return unsupported("execute: ep=" + std::to_string(l.ep) + " needs a MoE model; use ep=1");
  if (dims.Vp % l.tp) return invalid_argument("execute: padded vocabulary does not split over tp");
  if (data && data->vocab_size() > dims.V)
    return invalid_argument("execute: the data's vocabulary (" + std::to_string(data->vocab_size()) +
                            ") is larger than the model's (" + std::to_string(dims.V) + "); scale vocab up");
  if (l.sequence_parallel && (N() % l.tp))
    return invalid_argument("execute: sequence parallel needs micro*seq divisible by tp");
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
    return grid.rank_of(c);
  };
  LOOM_ASSIGN_OR_RETURN(tp, devw->split(color_of(Dim::kTp), coords.tp, "tp"));
  LOOM_ASSIGN_OR_RETURN(dp, devw->split(color_of(Dim::kDp), coords.dp, "dp"));
  LOOM_ASSIGN_OR_RETURN(pp, devw->split(color_of(Dim::kPp), coords.pp, "pp"));
  LOOM_ASSIGN_OR_RETURN(pp_grad, devw->split(color_of(Dim::kPp), coords.pp, "pp-grad"));
  if (l.virtual_stages > 1 && l.pp > 1) {
    LOOM_ASSIGN_OR_RETURN(pp_wrap, devw->split(color_of(Dim::kPp), coords.pp, "pp-wrap"));
    LOOM_ASSIGN_OR_RETURN(pp_grad_wrap, devw->split(color_of(Dim::kPp), coords.pp, "pp-grad-wrap"));
  }
  // Tied embeddings on two stages: the first and last stage keep a copy each
  // and sum their gradients (Megatron's embedding group).
  has_embedding_copy_pair = dims.tied && l.pp > 1;
  bool in_emb = has_embedding_copy_pair && (coords.pp == 0 || coords.pp == l.pp - 1);
  int emb_color = in_emb ? color_of(Dim::kPp) : world->size() + world->rank();
  LOOM_ASSIGN_OR_RETURN(emb, devw->split(emb_color, coords.pp, "embedding"));

  split = split_layers(cfg.model, l.pp, l.virtual_stages);
  micro_batches = l.num_micro_batches(cfg.train.global_batch);
  LOOM_ASSIGN_OR_RETURN(program, build_program(program_config_for(l, cfg.train.global_batch, cfg.grad_buckets)));
  // Communicators without tags (NCCL) pair sends and receives in call order,
  // and a send waits on its stream until the receive runs: the schedule must
  // pair in order and progress under those rules (core/program.h).
  if (l.pp > 1 && !pp->matches_by_tag()) {
    const std::string why = "execute: " + pp->name() + " pairs pipeline transfers in call order";
    LOOM_RETURN_IF_ERROR(check_p2p_in_order(program).with_context(why));
    LOOM_RETURN_IF_ERROR(check_p2p_progress(program).with_context(why));
  }

  // Parameters of every chunk of this stage, in ZeRO units.
  const int v = l.virtual_stages;
  chunk_units.assign(v, {});
  gathered.assign(v, 0);
  gathers_in_flight.clear();
  gathers_in_flight.resize(size_t(v));
  bucket_sent.assign(v, {});
  grads_discarded.assign(v, false);
  size_t shard_total = 0;
  auto add_unit = [&](int c, bool tied, const auto& add) {
    size_t before = size_t(params.numel());
    add();
    size_t used = size_t(params.numel()) - before;
    size_t padded = (used + l.dp - 1) / l.dp * l.dp;
    params.add_padding(int64_t(padded - used));
    chunk_units[c].push_back(int(units.size()));
    units.push_back({before, padded, padded / l.dp, shard_total, c, tied});
    shard_total += padded / l.dp;
  };
  for (int c = 0; c < v; ++c) {
    int g = c * l.pp + coords.pp;
    const bool emb_here = first_global(c), head_here = last_global(c);
    if ((emb_here || head_here) && has_embedding_copy_pair)
      add_unit(c, true, [&] { add_word_embedding_param(params, dims, l.tp, coords.tp); });
    add_unit(c, false, [&] {
      if (emb_here) add_embedding_params(params, dims, l.tp, coords.tp, !has_embedding_copy_pair);
      add_layer_params(params, dims, split.chunk_first_layer[g], split.chunk_layers[g], l.tp, coords.tp);
      if (head_here) {
        add_head_params(params, dims, l.tp, coords.tp);
        if (dims.tied && !params.has("embed.wte")) add_word_embedding_param(params, dims, l.tp, coords.tp);
      }
    });
  }
  scaling = backend->kernels().precision() == Precision::kFp16;
  scaler = LossScaler(cfg.loss_scaling);
  params.materialize(backend, cfg.train.seed);
  backend->kernels().set_weights(params.params(), params.numel());
  // ZeRO-3 ranks keep only their shards until a chunk is gathered for use.
  released.assign(v, false);
  if (l.zero == 3 && l.dp > 1)
    for (int c = 0; c < v; ++c) release(c);
  for (int c = 0; c < v; ++c) {
    int g = c * l.pp + coords.pp;
    ChunkConfig cc;
    cc.dims = dims;
    cc.first_layer = split.chunk_first_layer[g];
    cc.num_layers = split.chunk_layers[g];
    cc.has_embedding = first_global(c);
    cc.has_head = last_global(c);
    cc.micro_batch = l.micro_batch;
    cc.seq = cfg.train.seq_len;
    cc.tp_size = l.tp;
    cc.tp_rank = coords.tp;
    cc.sequence_parallel = l.sequence_parallel;
    cc.recompute = l.recompute;
    chunks.push_back(std::make_unique<ModelChunk>(cc, &params, backend, tp.get()));
  }
  size_t state = l.zero >= 1 ? shard_total : size_t(params.numel());
  m = DeviceBuffer(backend, state * sizeof(float));
  this->v = DeviceBuffer(backend, state * sizeof(float));
  if (l.zero >= 1) shard_grad = DeviceBuffer(backend, shard_total * sizeof(float));
  reduced_chunk.assign(v, false);
  return Status::ok();
}

Communicator& Trainer::Impl::channel(const Op& op) {
  switch (p2p_channel(op, cfg.layout.pp)) {
    case P2pChannel::kActivation: return *pp;
    case P2pChannel::kGradient: return *pp_grad;
    case P2pChannel::kActivationWrap: return *pp_wrap;
    case P2pChannel::kGradientWrap: return *pp_grad_wrap;
  }
  return *pp;
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

Status Trainer::Impl::forward(int c, int micro, double* loss_sum) {
  const int64_t n_act = chunks[c]->activation_floats();
  const int32_t* tok = nullptr;
  const int32_t* tgt = nullptr;
  const float* in = nullptr;
  int64_t row0 = int64_t(micro) * N();
  if (first_global(c)) tok = tokens_dev.i32() + row0;
  if (last_global(c)) tgt = targets_dev.i32() + row0;
  if (!first_global(c)) {
    auto key = std::make_pair(c, micro);
    if (coords.pp == 0 && c > 0 && cfg.layout.pp == 1) {
      // Previous chunk on this same stage (pp = 1 with several chunks).
      act_in[key] = std::move(act_out[{c - 1, micro}]);
      act_out.erase({c - 1, micro});
    }
    auto it = act_in.find(key);
    if (it == act_in.end()) return internal_error("forward input missing for chunk " + std::to_string(c));
    in = it->second.f32();
  }
  DeviceBuffer out;
  if (!last_global(c)) out = DeviceBuffer::uninitialized(backend, size_t(n_act) * sizeof(float));
  float scale = float(1.0 / double(cfg.train.tokens_per_step()));
  LOOM_RETURN_IF_ERROR(chunks[c]->forward(micro, tok, in, tgt, scale, out.f32(), loss_sum));
  act_in.erase({c, micro});
  if (!last_global(c)) act_out[{c, micro}] = std::move(out);
  return Status::ok();
}

// ZeRO-0 bucket `bucket` of `buckets` of a unit, counted from the top of the
// flat range (the order in which backward finishes parameters).
Status Trainer::Impl::send_bucket(int c, int ui, int bucket, int buckets) {
  const Unit& u = units[ui];
  size_t per = (u.size + buckets - 1) / buckets;
  size_t e = u.size > size_t(bucket) * per ? u.size - size_t(bucket) * per : 0;
  size_t b = e > per ? e - per : 0;
  if (b >= e) return Status::ok();
  LOOM_ASSIGN_OR_RETURN(auto req, dp->iall_reduce(params.grads() + u.begin + b, e - b, ReduceOp::kSum));
  pending.push_back(std::move(req));
  (void)c;
  return Status::ok();
}

Status Trainer::Impl::backward(int c, int micro, int buckets) {
  if (grads_discarded[size_t(c)]) {
    for (int ui : chunk_units[c]) backend->reclaim(params.grads() + units[ui].begin, units[ui].size * sizeof(float));
    grads_discarded[size_t(c)] = false;
  }
  const int64_t n_act = chunks[c]->activation_floats();
  auto key = std::make_pair(c, micro);
  const float* dout = nullptr;
  if (!last_global(c)) {
    if (cfg.layout.pp == 1 && grad_in.find(key) == grad_in.end()) {
      grad_in[key] = std::move(grad_out[{c + 1, micro}]);
      grad_out.erase({c + 1, micro});
    }
    auto it = grad_in.find(key);
    if (it == grad_in.end()) return internal_error("backward input missing for chunk " + std::to_string(c));
    dout = it->second.f32();
  }
  DeviceBuffer din;
  if (!first_global(c)) din = DeviceBuffer::uninitialized(backend, size_t(n_act) * sizeof(float));
  // The chunk's last backward of the step with ZeRO-0 and overlap: start each
  // gradient bucket as soon as backward has passed all of it, and let MPI
  // progress the ones in flight between layers.
  const Layout& l = cfg.layout;
  std::function<Status(int)> hook;
  const bool early = buckets > 1 && l.dp > 1 && l.zero == 0 && l.overlap_grad_reduce &&
                     !(l.sequence_parallel && l.tp > 1);
  if (early) {
    bucket_sent[c].assign(size_t(buckets), false);
    const int ui = chunk_units[c].back();  // the main unit (layers); a tied-embedding unit comes first
    hook = [this, c, ui, buckets](int layer) -> Status {
      const Unit& u = units[ui];
      size_t frontier = params.info("layers." + std::to_string(layer) + ".ln1.weight").offset - u.begin;
      size_t per = (u.size + buckets - 1) / buckets;
      for (int k = 0; k < buckets; ++k) {
        size_t e = u.size > size_t(k) * per ? u.size - size_t(k) * per : 0;
        size_t b = e > per ? e - per : 0;
        if (bucket_sent[c][size_t(k)] || b < frontier) continue;
        LOOM_RETURN_IF_ERROR(send_bucket(c, ui, k, buckets));
        bucket_sent[c][size_t(k)] = true;
      }
      for (auto& req : pending) req->test();
      return Status::ok();
    };
  }
  LOOM_RETURN_IF_ERROR(chunks[c]->backward(micro, dout, din.f32(), hook));
  grad_in.erase(key);
  if (!first_global(c)) grad_out[key] = std::move(din);
  reduced_chunk[c] = false;
  return Status::ok();
}

// Gradients that several ranks hold partial sums of before the DP sync: the
// replicated parameters under sequence parallelism (each TP rank saw a shard
// of the tokens) and the two copies of a tied embedding (first, last stage).
Status Trainer::Impl::reduce_shared_grads(int c) {
  if (reduced_chunk[c]) return Status::ok();
  reduced_chunk[c] = true;
  const Layout& l = cfg.layout;
  if (!l.sequence_parallel || l.tp == 1) return Status::ok();
  std::vector<const ParamInfo*> reps;
  size_t total = 0;
  for (const ParamInfo& p : params.infos()) {
    if (p.shard != ShardKind::kReplicated || unit_of(p.offset).chunk != c) continue;
    reps.push_back(&p);
    total += size_t(p.numel);
  }
  if (total == 0) return Status::ok();
  auto packed = DeviceBuffer::uninitialized(backend, total * sizeof(float));  // written whole below
  size_t at = 0;
  for (const ParamInfo* p : reps) {
    backend->copy(packed.f32() + at, params.grads() + p->offset, size_t(p->numel) * sizeof(float));
    at += size_t(p->numel);
  }
  LOOM_RETURN_IF_ERROR(tp->all_reduce(packed.f32(), total, ReduceOp::kSum));
  at = 0;
  for (const ParamInfo* p : reps) {
    backend->copy(params.grads() + p->offset, packed.f32() + at, size_t(p->numel) * sizeof(float));
    at += size_t(p->numel);
  }
  return Status::ok();
}

const Unit& Trainer::Impl::unit_of(size_t offset) const {
  size_t i = 0;
  while (i + 1 < units.size() && offset >= units[i + 1].begin) ++i;
  return units[i];
}

Status Trainer::Impl::grad_sync(const Op& op) {
  const Layout& l = cfg.layout;
  const int c = op.chunk;
  LOOM_RETURN_IF_ERROR(reduce_shared_grads(c));
  if (l.zero == 1 && op.part != 0) return Status::ok();
  for (int ui : chunk_units[c]) {
    const Unit& u = units[ui];
    float* g = params.grads() + u.begin;
    if (l.zero == 0) {
      // Bucket `part` of the unit, all-reduced while later work runs (unless
      // backward already started it).
      bool main_unit = ui == chunk_units[c].back();
      if (main_unit && size_t(op.part) < bucket_sent[c].size() && bucket_sent[c][size_t(op.part)]) continue;
      LOOM_RETURN_IF_ERROR(send_bucket(c, ui, op.part, op.num_parts));
      continue;
    }
    // ZeRO 1-3: reduce-scatter to the shards. ZeRO-1 once per step (at the
    // chunk's first bucket op); ZeRO-2/3 after every micro-batch, accumulating
    // into the shard and clearing the full gradient.
    // Straight into the shard, without a temporary: ZeRO-2/3 first add the
    // shard's running sum into this rank's own block of the full gradient
    // (which is given back afterwards), so the reduction carries it along.
    float* shard = shard_grad.f32() + u.shard_offset;
    if (l.zero >= 2) backend->kernels().add_inplace(g + size_t(coords.dp) * u.shard, shard, int64_t(u.shard));
    LOOM_RETURN_IF_ERROR(dp->reduce_scatter(g, shard, u.shard));
    // ZeRO-2/3 keep only the shard: the full gradient's memory is given back
    // until the next micro-batch's backward writes it again.
    if (l.zero >= 2) {
      backend->discard(g, u.size * sizeof(float));
      grads_discarded[size_t(c)] = true;
    } else {
      backend->fill_zero(g, u.size * sizeof(float));
    }
  }
  return Status::ok();
}

// ZeRO: gather the chunk's parameters from the DP shards.
void Trainer::Impl::reclaim_released(int c) {
  if (!released[size_t(c)]) return;
  for (int ui : chunk_units[c]) {
    const Unit& u = units[ui];
    float* p = params.params() + u.begin;
    const size_t own_b = coords.dp * u.shard, own_e = own_b + u.shard;
    backend->reclaim(p, own_b * sizeof(float));
    backend->reclaim(p + own_e, (u.size - own_e) * sizeof(float));
  }
  released[size_t(c)] = false;
}

// The gathers run in the background (NCCL's stream, or MPI's non-blocking
// all-gather) while the compute ops before the chunk's next use proceed:
// ZeRO-3's prefetch, and ZeRO-1/2's overlapped gather of the updated shards.
Status Trainer::Impl::param_gather(int c) {
  reclaim_released(c);
  for (int ui : chunk_units[c]) {
    const Unit& u = units[ui];
    float* p = params.params() + u.begin;
    const size_t own_b = coords.dp * u.shard;
    LOOM_ASSIGN_OR_RETURN(auto req, dp->iall_gather(p + own_b, p, u.shard));
    gathers_in_flight[size_t(c)].push_back(std::move(req));
  }
  released[size_t(c)] = false;
  return Status::ok();
}

Status Trainer::Impl::wait_gathers(int c) {
  auto& in_flight = gathers_in_flight[size_t(c)];
  if (in_flight.empty()) return Status::ok();
  for (auto& req : in_flight) LOOM_RETURN_IF_ERROR(req->wait());
  in_flight.clear();
  for (int ui : chunk_units[c])
    backend->kernels().weights_changed(params.params() + units[ui].begin, int64_t(units[ui].size));
  return Status::ok();
}

Status Trainer::Impl::wait_all_gathers() {
  for (int c = 0; c < int(gathers_in_flight.size()); ++c) LOOM_RETURN_IF_ERROR(wait_gathers(c));
  return Status::ok();
}

// ZeRO-3: a chunk holds only its own shards between uses (everything else is
// zeroed, so a missing gather can never go unnoticed).
void Trainer::Impl::release(int c) {
  if (released[size_t(c)]) return;
  LOOM_CHECK(gathers_in_flight[size_t(c)].empty(), "ZeRO-3 release of a chunk whose gather is in flight");
  released[size_t(c)] = true;
  for (int ui : chunk_units[c]) {
    const Unit& u = units[ui];
    float* p = params.params() + u.begin;
    size_t own_b = coords.dp * u.shard, own_e = own_b + u.shard;
    backend->discard(p, own_b * sizeof(float));
    backend->discard(p + own_e, (u.size - own_e) * sizeof(float));
  }
}

Status Trainer::Impl::wait_pending() {
  for (auto& req : pending) LOOM_RETURN_IF_ERROR(req->wait());
  pending.clear();
  send_buffers.clear();
  return Status::ok();
}

Status Trainer::Impl::run_op(const Op& op, double* loss_sum) {
  const Layout& l = cfg.layout;
  auto t0 = Clock::now();
  // A device backend runs the op asynchronously: its time ends when the
  // backend's stream has drained (blocking collectives already waited).
  auto op_seconds = [&] {
    if (!backend->host_visible()) backend->synchronize();
    return seconds_since(t0);
  };
  const int c = op.chunk, mi = op.micro;
  const int next = (coords.pp + 1) % l.pp, prev = (coords.pp + l.pp - 1) % l.pp;
  const bool dp_sharded = l.dp > 1;
  // ZeRO-3: parameters gathered ahead (prefetch) stay until their use.
  auto used = [&](int chunk) {
    if (l.zero != 3 || !dp_sharded) return;
    if (--gathered[chunk] <= 0) {
      gathered[chunk] = 0;
      release(chunk);
    }
  };
  switch (op.kind) {
    case OpKind::kForward:
      // Waiting for the chunk's parameter gathers is DP communication.
      LOOM_RETURN_IF_ERROR(wait_gathers(c));
      times.dp_comm_s += seconds_since(t0);
      t0 = Clock::now();
      LOOM_RETURN_IF_ERROR(forward(c, mi, loss_sum));
      used(c);
      times.forward_s += op_seconds();
      break;
    case OpKind::kBackward:
      if (op.part == 0) {
        LOOM_RETURN_IF_ERROR(wait_gathers(c));
        times.dp_comm_s += seconds_since(t0);
        t0 = Clock::now();
        LOOM_RETURN_IF_ERROR(backward(c, mi, op.num_parts));
        used(c);
      }
      times.backward_s += op_seconds();
      break;
    case OpKind::kSendActivation: {
      DeviceBuffer buf = std::move(act_out[{c, mi}]);
      act_out.erase({c, mi});
      // The receiver's chunk: same index unless we wrap from the last stage.
      int peer_chunk = coords.pp == l.pp - 1 ? c + 1 : c;
      LOOM_ASSIGN_OR_RETURN(auto req,
                            channel(op).isend(buf.f32(), buf.floats(), next, p2p_tag(false, peer_chunk, mi)));
      pending.push_back(std::move(req));
      send_buffers.push_back(std::move(buf));
      times.pp_comm_s += op_seconds();
      break;
    }
    case OpKind::kRecvActivation: {
      auto buf = DeviceBuffer::uninitialized(backend, size_t(chunks[c]->activation_floats()) * sizeof(float));
      LOOM_RETURN_IF_ERROR(channel(op).recv(buf.f32(), buf.floats(), prev, p2p_tag(false, c, mi)));
      act_in[{c, mi}] = std::move(buf);
      times.pp_comm_s += op_seconds();
      break;
    }
    case OpKind::kSendGrad: {
      DeviceBuffer buf = std::move(grad_out[{c, mi}]);
      grad_out.erase({c, mi});
      int peer_chunk = coords.pp == 0 ? c - 1 : c;
      LOOM_ASSIGN_OR_RETURN(auto req,
                            channel(op).isend(buf.f32(), buf.floats(), prev, p2p_tag(true, peer_chunk, mi)));
      pending.push_back(std::move(req));
      send_buffers.push_back(std::move(buf));
      times.pp_comm_s += op_seconds();
      break;
    }
    case OpKind::kRecvGrad: {
      auto buf = DeviceBuffer::uninitialized(backend, size_t(chunks[c]->activation_floats()) * sizeof(float));
      LOOM_RETURN_IF_ERROR(channel(op).recv(buf.f32(), buf.floats(), next, p2p_tag(true, c, mi)));
      grad_in[{c, mi}] = std::move(buf);
      times.pp_comm_s += op_seconds();
      break;
    }
    case OpKind::kGradSync:
      LOOM_RETURN_IF_ERROR(grad_sync(op));
      times.dp_comm_s += op_seconds();
      break;
    case OpKind::kParamGather:
      LOOM_RETURN_IF_ERROR(param_gather(c));
      if (l.zero == 3 && mi >= 0) ++gathered[c];
      times.dp_comm_s += op_seconds();
      break;
    case OpKind::kOptimizer:
      LOOM_RETURN_IF_ERROR(optimizer_step(current_step, &grad_norm, &lr));
      times.optimizer_s += op_seconds();
      break;
  }
  record(op, t0, seconds_since(t0));
  return Status::ok();
}

double lr_schedule(const TrainSpec& t, int64_t step) {
  if (t.warmup_steps > 0 && step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  if (t.lr_schedule == LrSchedule::kConstant || t.steps <= t.warmup_steps) return t.lr;
  double progress = double(step - t.warmup_steps) / double(std::max<int64_t>(1, t.steps - t.warmup_steps));
  progress = std::clamp(progress, 0.0, 1.0);
  double decay = t.lr_schedule == LrSchedule::kCosine ? 0.5 * (1 + std::cos(M_PI * progress)) : 1 - progress;
  return t.min_lr + (t.lr - t.min_lr) * decay;
}

double Trainer::lr_at(int64_t step) const { return lr_schedule(impl_->cfg.train, step); }

Status Trainer::Impl::optimizer_step(int64_t step, double* grad_norm, double* lr_out) {
  const Layout& l = cfg.layout;
  const TrainSpec& t = cfg.train;
  // Waiting for in-flight gradient syncs is DP communication, not optimizer time.
  auto t_wait = Clock::now();
  LOOM_RETURN_IF_ERROR(wait_pending());
  LOOM_RETURN_IF_ERROR(wait_all_gathers());
  for (int c = 0; c < l.virtual_stages; ++c) LOOM_RETURN_IF_ERROR(reduce_shared_grads(c));
  const double waited = std::chrono::duration<double>(Clock::now() - t_wait).count();
  times.dp_comm_s += waited;
  times.optimizer_s -= waited;
  // The two copies of a tied embedding (first and last stage) sum their
  // gradients, after the DP sync: whole (ZeRO-0) or shard by shard (their
  // units shard identically).
  for (const Unit& u : units) {
    if (!u.tied_embedding) continue;
    if (l.zero == 0)
      LOOM_RETURN_IF_ERROR(emb->all_reduce(params.grads() + u.begin, u.size, ReduceOp::kSum));
    else
      LOOM_RETURN_IF_ERROR(emb->all_reduce(shard_grad.f32() + u.shard_offset, u.shard, ReduceOp::kSum));
  }
  // The global gradient norm: every element counted once across all ranks.
  // Replicated-in-TP params count on tp rank 0; the tied embedding's second
  // copy does not count; with ZeRO the DP shards partition the elements,
  // without it DP rank 0 counts.
  Kernels& k = backend->kernels();
  double sq = 0;
  for (const ParamInfo& p : params.infos()) {
    if (p.shard == ShardKind::kReplicated && coords.tp != 0) continue;
    if (has_embedding_copy_pair && p.name == "embed.wte" && coords.pp != 0) continue;
    const Unit& r = unit_of(p.offset);
    if (l.zero == 0) {
      if (coords.dp == 0) k.add_sum_squares(params.grads() + p.offset, p.numel);
      continue;
    }
    size_t own_b = r.begin + coords.dp * r.shard, own_e = own_b + r.shard;
    size_t b = std::max<size_t>(own_b, p.offset), e = std::min<size_t>(own_e, p.offset + size_t(p.numel));
    if (b < e) k.add_sum_squares(shard_grad.f32() + r.shard_offset + (b - own_b), int64_t(e - b));
  }
  sq = k.take_sum_squares();
  LOOM_RETURN_IF_ERROR(world->all_reduce(&sq, 1, ReduceOp::kSum));
  double lr = lr_schedule(t, step);
  *lr_out = lr;
  // Every rank holds the same total, so every rank takes the same branch.
  const bool finite = std::isfinite(sq);
  const double S = scaling ? scaler.scale() : 1.0;
  skipped = false;
  if (scaling && !finite && S <= cfg.loss_scaling.min_scale)
    return invalid_argument("fp16 gradients overflow at step " + std::to_string(step + 1) +
                            " even with the loss scale at its minimum (" + std::to_string(S) +
                            "): activations or weights exceed fp16's range; train in bf16 (--precision bf16)");
  if (scaling && !scaler.update(finite)) {
    // fp16 overflow: drop this step's gradients, keep the weights, and go on
    // with a smaller scale.
    skipped = true;
    *grad_norm = std::numeric_limits<double>::infinity();
    for (auto& sent : bucket_sent) sent.clear();
    params.zero_grads();
    if (!shard_grad.empty()) backend->fill_zero(shard_grad.f32(), shard_grad.bytes());
    return k.status();
  }
  if (!finite)
    return invalid_argument("the gradient norm is " + std::to_string(sq) + " at step " + std::to_string(step + 1) +
                            ": training diverged; lower the learning rate (or warm up longer) and resume from the "
                            "last checkpoint");
  double norm = std::sqrt(sq) / S;
  *grad_norm = norm;
  double clip = (t.grad_clip > 0 && norm > t.grad_clip) ? t.grad_clip / norm : 1.0;
  // One multiplier takes the loss scale out and clips.
  clip /= S;
  ++adam_step;
  // AdamW over each parameter's owned elements.
  for (const ParamInfo& p : params.infos()) {
    float wd = p.weight_decay ? float(t.weight_decay) : 0.f;
    const Unit& r = unit_of(p.offset);
    if (l.zero == 0) {
      float* g = params.grads() + p.offset;
      if (clip != 1.0) k.scale_inplace(g, float(clip), p.numel);
      k.adamw_update(params.params() + p.offset, g, m.f32() + p.offset, v.f32() + p.offset, p.numel, float(lr),
                        float(t.beta1), float(t.beta2), float(t.adam_eps), wd, adam_step);
      continue;
    }
    size_t own_b = r.begin + coords.dp * r.shard, own_e = own_b + r.shard;
    size_t b = std::max<size_t>(own_b, p.offset), e = std::min<size_t>(own_e, p.offset + size_t(p.numel));
    if (b >= e) continue;
    size_t so = r.shard_offset + (b - own_b);
    float* g = shard_grad.f32() + so;
    if (clip != 1.0) k.scale_inplace(g, float(clip), int64_t(e - b));
    k.adamw_update(params.params() + b, g, m.f32() + so, v.f32() + so, int64_t(e - b), float(lr), float(t.beta1),
                      float(t.beta2), float(t.adam_eps), wd, adam_step);
  }
  for (auto& sent : bucket_sent) sent.clear();
  params.zero_grads();
  if (!shard_grad.empty()) backend->fill_zero(shard_grad.f32(), shard_grad.bytes());
  for (const Unit& u : units) k.weights_changed(params.params() + u.begin, int64_t(u.size));
  return k.status();
}

Result<StepResult> Trainer::step(int64_t step) {
  Impl& s = *impl_;
  const Layout& l = s.cfg.layout;
  s.times = PhaseTimes{};
  s.events.clear();
  s.step_start = Clock::now();
  auto t0 = Clock::now();
  // This DP rank's samples: rows [dp * B/dp, (dp+1) * B/dp) of the global batch.
  const int64_t per_dp = s.cfg.train.global_batch / l.dp, T = s.cfg.train.seq_len;
  bool needs_tokens = false, needs_targets = false;
  for (int c = 0; c < l.virtual_stages; ++c) {
    needs_tokens |= s.first_global(c);
    needs_targets |= s.last_global(c);
  }
  if (needs_tokens || needs_targets) {
    s.tokens.resize(size_t(per_dp * T));
    s.targets.resize(size_t(per_dp * T));
    int64_t first = step * s.cfg.train.global_batch + int64_t(s.coords.dp) * per_dp;
    LOOM_RETURN_IF_ERROR(s.data->read(first, per_dp, T, s.tokens.data(), s.targets.data()));
    const size_t bytes = s.tokens.size() * sizeof(int32_t);
    if (s.tokens_dev.bytes() != bytes) {
      s.tokens_dev = DeviceBuffer(s.backend, bytes);
      s.targets_dev = DeviceBuffer(s.backend, bytes);
    }
    s.backend->copy_to_device_async(s.tokens_dev.i32(), s.tokens.data(), bytes);
    s.backend->copy_to_device_async(s.targets_dev.i32(), s.targets.data(), bytes);
  }
  s.times.data_s = seconds_since(t0);
  double loss_sum = 0;
  s.current_step = step;
  const double loss_scale = s.scaling ? s.scaler.scale() : 1.0;
  for (auto& chunk : s.chunks) chunk->set_grad_scale(float(loss_scale));
  for (int32_t id : s.program.stage_ops[s.coords.pp]) LOOM_RETURN_IF_ERROR(s.run_op(s.program.ops[id], &loss_sum));
  StepResult r;
  r.step = step;
  r.grad_norm = s.grad_norm;
  r.lr = s.lr;
  r.skipped = s.skipped;
  r.loss_scale = loss_scale;
  // The loss: the last stage's TP rank 0 of every DP rank holds a part.
  double contribution = (s.coords.pp == l.pp - 1 && s.coords.tp == 0) ? loss_sum : 0.0;
  LOOM_RETURN_IF_ERROR(s.world->all_reduce(&contribution, 1, ReduceOp::kSum));
  r.loss = contribution;
  double elapsed = seconds_since(s.step_start);
  double max_elapsed = elapsed;
  LOOM_RETURN_IF_ERROR(s.world->all_reduce(&max_elapsed, 1, ReduceOp::kMax));
  r.step_time_s = max_elapsed;
  r.phases = s.times;
  r.peak_memory_bytes = s.backend->peak_allocated_bytes();
  events_ = s.events;
  return r;
}

}  // namespace loom::exec
