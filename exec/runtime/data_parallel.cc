// The ZeRO stages (exec/runtime/data_parallel.h): the shard arithmetic in the
// base class, what each stage does at the program's sync and gather ops in
// one class per stage.
#include "exec/runtime/data_parallel.h"

#include <algorithm>

#include "exec/backend/memory_ledger.h"

namespace loom::exec {

DataParallel::DataParallel(const DataParallelConfig& cfg, ComputeBackend* backend, ParamStore* params,
                           Communicator* dp, Communicator* tp, Communicator* edp)
    : cfg_(cfg), backend_(backend), params_(params), dp_(dp), tp_(tp), edp_(edp) {
  LOOM_CHECK(cfg.edp_size == 1 || edp != nullptr, "expert-DP communicator missing");
  gathers_.resize(size_t(std::max(1, cfg.num_chunks)));
}

DataParallel::~DataParallel() = default;

void DataParallel::add_unit(int chunk, int bucket, bool tied_embedding, const std::function<void()>& add_params,
                            bool expert) {
  const size_t before = size_t(params_->numel());
  add_params();
  const size_t used = size_t(params_->numel()) - before;
  const size_t dp = size_t(expert ? cfg_.edp_size : cfg_.dp_size);
  const size_t padded = (used + dp - 1) / dp * dp;
  params_->add_padding(int64_t(padded - used));
  units_.push_back({before, padded, padded / dp, shard_total_, chunk, bucket, tied_embedding, expert});
  shard_total_ += padded / dp;
  summed_.push_back(false);
}

Status DataParallel::allocate() {
  chunk_units_.assign(gathers_.size(), {});
  replicated_.assign(units_.size(), {});
  for (const ZeroUnit& u : units_) chunk_units_[size_t(u.chunk)].push_back(&u);
  if (cfg_.sum_replicated_over_tp)
    for (const ParamInfo& p : params_->infos())
      // Not the routed experts: split over TP, or (parallel folding) whole
      // and synced over an expert-DP group that spans TP.
      if (p.shard == ShardKind::kReplicated && !p.tp_whole_grad && !p.expert)
        replicated_[size_t(&unit_of(p.offset) - units_.data())].push_back(&p);
  MemoryClassScope charge(MemoryClass::kGrads);
  if (cfg_.zero >= 1) shard_grad_ = DeviceBuffer(backend_, shard_total_ * sizeof(float));
  const GradFormat f = cfg_.grad_reduce == GradReduce::kBf16 ? GradFormat::kBf16 : GradFormat::kFp8;
  if (cfg_.grad_reduce != GradReduce::kFp32 && cfg_.dp_size > 1)
    compress_ = std::make_unique<GradCompressor>(backend_, dp_, f);
  if (cfg_.grad_reduce != GradReduce::kFp32 && cfg_.edp_size > 1)
    compress_edp_ = std::make_unique<GradCompressor>(backend_, edp_, f);
  return Status::ok();
}

size_t DataParallel::state_floats() const { return cfg_.zero >= 1 ? shard_total_ : size_t(params_->numel()); }

const ZeroUnit& DataParallel::unit_of(size_t offset) const {
  auto it = std::upper_bound(units_.begin(), units_.end(), offset,
                             [](size_t x, const ZeroUnit& u) { return x < u.begin; });
  LOOM_CHECK(it != units_.begin(), "a flat offset before the first ZeRO unit");
  return *std::prev(it);
}

std::optional<OwnedSlice> DataParallel::owned(const ParamInfo& p) const {
  const size_t pb = p.offset, pe = p.offset + size_t(p.numel);
  if (cfg_.zero == 0) return OwnedSlice{pb, pe, pb};
  const ZeroUnit& u = unit_of(p.offset);
  const size_t own_b = u.begin + own_range(u).first, own_e = u.begin + own_range(u).second;
  const size_t b = std::max(own_b, pb), e = std::min(own_e, pe);
  if (b >= e) return std::nullopt;
  return OwnedSlice{b, e, u.shard_offset + (b - own_b)};
}

float* DataParallel::update_grad(const OwnedSlice& s) const {
  return cfg_.zero == 0 ? params_->grads() + s.begin : shard_grad_.f32() + s.state_offset;
}

float* DataParallel::update_grad_base() const {
  return cfg_.zero == 0 ? params_->grads() : shard_grad_.f32();  // ZeRO-0: state_offset == begin
}

float* DataParallel::update_grad(const ZeroUnit& u, size_t* count) const {
  *count = cfg_.zero == 0 ? u.size : u.shard;
  return cfg_.zero == 0 ? params_->grads() + u.begin : shard_grad_.f32() + u.shard_offset;
}

std::vector<const ZeroUnit*> DataParallel::units_of(const Op& op) const {
  if (op.micro >= 0) return units_of_chunk(op.chunk);  // ZeRO-2/3: after every backward, the whole chunk
  std::vector<const ZeroUnit*> out;
  for (const ZeroUnit& u : units_)
    if (u.chunk == op.chunk && u.bucket == op.part) out.push_back(&u);
  return out;
}

void DataParallel::before_backward(int chunk) {
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].chunk == chunk) summed_[i] = false;
  reclaim_grads(chunk);
}

// Gradients several TP ranks hold partial sums of: the replicated parameters
// under sequence parallelism (each TP rank saw a shard of the tokens).
Status DataParallel::sum_replicated(const std::vector<const ZeroUnit*>& units) {
  std::vector<const ParamInfo*> reps;
  size_t total = 0;
  for (const ZeroUnit* u : units) {
    const size_t i = size_t(u - units_.data());
    if (summed_[i]) continue;
    summed_[i] = true;
    for (const ParamInfo* p : replicated_[i]) {
      reps.push_back(p);
      total += size_t(p->numel);
    }
  }
  if (total == 0) return Status::ok();
  MemoryClassScope charge(MemoryClass::kCommBuffers);
  auto packed = DeviceBuffer::uninitialized(backend_, total * sizeof(float));  // written whole below
  size_t at = 0;
  for (const ParamInfo* p : reps) {
    backend_->copy(packed.f32() + at, params_->grads() + p->offset, size_t(p->numel) * sizeof(float));
    at += size_t(p->numel);
  }
  LOOM_RETURN_IF_ERROR(tp_->all_reduce(packed.f32(), total, ReduceOp::kSum));
  at = 0;
  for (const ParamInfo* p : reps) {
    backend_->copy(params_->grads() + p->offset, packed.f32() + at, size_t(p->numel) * sizeof(float));
    at += size_t(p->numel);
  }
  return Status::ok();
}

// The gathers run in the background (NCCL's stream, or MPI's non-blocking
// all-gather) while the compute ops before the chunk's next use proceed:
// ZeRO-3's prefetch, and ZeRO-1/2's overlapped gather of the updated shards.
Status DataParallel::param_gather(int chunk) {
  reclaim_released(chunk);
  for (const ZeroUnit* u : units_of_chunk(chunk)) {
    if (u->size == 0) continue;
    float* p = params_->params() + u->begin;
    LOOM_ASSIGN_OR_RETURN(auto req, group(*u)->iall_gather(p + own_range(*u).first, p, u->shard));
    gathers_[size_t(chunk)].push_back(std::move(req));
  }
  return Status::ok();
}

Status DataParallel::wait_gathers(int chunk) {
  auto& in_flight = gathers_[size_t(chunk)];
  if (in_flight.empty()) return Status::ok();
  for (auto& req : in_flight) LOOM_RETURN_IF_ERROR(req->wait());
  in_flight.clear();
  for (const ZeroUnit* u : units_of_chunk(chunk))
    backend_->kernels().weights_changed(params_->params() + u->begin, int64_t(u->size));
  return Status::ok();
}

// Waits for reduction i (if `block`, else only when it has completed), then
// its after_reduce(); *done says whether it finished (and was removed).
Status DataParallel::finish_reduction(size_t i, bool block, bool* done) {
  Reduction& r = reductions_[i];
  *done = block || r.req->test();
  if (!*done) return Status::ok();
  LOOM_RETURN_IF_ERROR(r.req->wait());
  after_reduce(*r.unit);
  reductions_.erase(reductions_.begin() + std::ptrdiff_t(i));
  return Status::ok();
}

Status DataParallel::wait_reductions(int chunk, const ZeroUnit* unit) {
  for (size_t i = 0; i < reductions_.size();) {
    const ZeroUnit* u = reductions_[i].unit;
    bool done = false;
    if ((chunk < 0 || u->chunk == chunk) && (!unit || u == unit))
      LOOM_RETURN_IF_ERROR(finish_reduction(i, /*block=*/true, &done));
    if (!done) ++i;
  }
  return Status::ok();
}

Status DataParallel::poll_reductions() {
  for (size_t i = 0; i < reductions_.size();) {
    bool done = false;
    LOOM_RETURN_IF_ERROR(finish_reduction(i, /*block=*/false, &done));
    if (!done) ++i;
  }
  return Status::ok();
}

Status DataParallel::wait_all() {
  for (auto& req : syncs_) LOOM_RETURN_IF_ERROR(req->wait());
  syncs_.clear();
  LOOM_RETURN_IF_ERROR(wait_reductions(-1));
  for (int c = 0; c < int(gathers_.size()); ++c) LOOM_RETURN_IF_ERROR(wait_gathers(c));
  std::vector<const ZeroUnit*> all;
  for (const ZeroUnit& u : units_) all.push_back(&u);
  return sum_replicated(all);  // without DP syncs (dp = 1) nothing summed them yet
}

void DataParallel::clear_grads() {
  // ZeRO-2/3 gave each chunk's full gradient back after its last
  // reduce-scatter, and it reads as zeros: zero only what is resident (a
  // memset of the rest would fault its pages back in for nothing).
  bool any_discarded = false;
  for (int c = 0; c < int(gathers_.size()); ++c) any_discarded |= grads_discarded(c);
  if (!any_discarded) {
    params_->zero_grads();
  } else {
    for (const ZeroUnit& u : units_)
      if (!grads_discarded(u.chunk)) backend_->fill_zero(params_->grads() + u.begin, u.size * sizeof(float));
  }
  if (!shard_grad_.empty()) backend_->fill_zero(shard_grad_.f32(), shard_grad_.bytes());
}

Status DataParallel::gather_state(const float* state, float* full) {
  if (cfg_.zero == 0) {
    backend_->copy(full, state, size_t(params_->numel()) * sizeof(float));
    return Status::ok();
  }
  for (const ZeroUnit& u : units_)
    if (u.size) LOOM_RETURN_IF_ERROR(group(u)->all_gather(state + u.shard_offset, full + u.begin, u.shard));
  return Status::ok();
}

void DataParallel::scatter_state(const float* full_host, float* state) {
  if (cfg_.zero == 0) {
    backend_->copy_to_device(state, full_host, size_t(params_->numel()) * sizeof(float));
    return;
  }
  for (const ZeroUnit& u : units_)
    backend_->copy_to_device(state + u.shard_offset, full_host + u.begin + own_range(u).first, u.shard * sizeof(float));
}

Status DataParallel::gather_all_params() {
  if (cfg_.zero == 0 || cfg_.dp_size == 1) return Status::ok();
  for (int c = 0; c < int(gathers_.size()); ++c) LOOM_RETURN_IF_ERROR(param_gather(c));
  for (int c = 0; c < int(gathers_.size()); ++c) LOOM_RETURN_IF_ERROR(wait_gathers(c));
  return Status::ok();
}

namespace {

// ZeRO-0: replicated state; each bucket all-reduced while later work runs.
class Zero0 final : public DataParallel {
 public:
  using DataParallel::DataParallel;
  Status grad_sync(const Op& op) override {
    const auto units = units_of(op);
    LOOM_RETURN_IF_ERROR(sum_replicated(units));
    for (const ZeroUnit* u : units) {
      if (u->size == 0) continue;
      float* g = params_->grads() + u->begin;
      GradCompressor* c = compressor(*u);
      LOOM_ASSIGN_OR_RETURN(auto req, c ? c->iall_reduce(g, u->shard)
                                        : group(*u)->iall_reduce(g, u->size, ReduceOp::kSum));
      syncs_.push_back(std::move(req));
    }
    return Status::ok();
  }
  Status param_gather(int) override { return Status::ok(); }
};

// ZeRO-1: each bucket reduce-scattered into the shard gradients once per
// step, in the background while the later backward parts run (the program's
// overlap); the update waits for them.
class Zero1 : public DataParallel {
 public:
  using DataParallel::DataParallel;
  Status grad_sync(const Op& op) override {
    const auto units = units_of(op);
    LOOM_RETURN_IF_ERROR(sum_replicated(units));
    for (const ZeroUnit* u : units) {
      if (u->size == 0) continue;
      // ZeRO-2/3: the previous micro-batch's reduce into the same shard first.
      LOOM_RETURN_IF_ERROR(wait_reductions(u->chunk, u));
      float* g = params_->grads() + u->begin;
      LOOM_RETURN_IF_ERROR(before_reduce(*u));
      float* shard = shard_grad_.f32() + u->shard_offset;
      GradCompressor* c = compressor(*u);
      LOOM_ASSIGN_OR_RETURN(auto req, c ? c->ireduce_scatter(g, shard, u->shard)
                                        : group(*u)->ireduce_scatter(g, shard, u->shard));
      reductions_.push_back({u, std::move(req)});
    }
    return Status::ok();
  }

 protected:
  virtual Status before_reduce(const ZeroUnit&) { return Status::ok(); }
  void after_reduce(const ZeroUnit& u) override {
    backend_->fill_zero(params_->grads() + u.begin, u.size * sizeof(float));
  }
};

// ZeRO-2: after every micro-batch, accumulating into the shard, and the full
// gradient's memory given back until the next backward writes it again.
class Zero2 : public Zero1 {
 public:
  using Zero1::Zero1;
  Status allocate() override {
    discarded_.assign(gathers_.size(), false);
    return Zero1::allocate();
  }

 protected:
  // Straight into the shard, without a temporary: the shard's running sum is
  // first added into this rank's own block of the full gradient, so the
  // reduction carries it along.
  Status before_reduce(const ZeroUnit& u) override {
    float* g = params_->grads() + u.begin;
    backend_->kernels().add_inplace({g + own_range(u).first, shard_grad_.f32() + u.shard_offset, int64_t(u.shard)});
    return Status::ok();
  }
  void after_reduce(const ZeroUnit& u) override {
    backend_->discard(params_->grads() + u.begin, u.size * sizeof(float));
    discarded_[size_t(u.chunk)] = true;
  }
  bool grads_discarded(int chunk) const override { return discarded_[size_t(chunk)]; }
  void reclaim_grads(int chunk) override {
    if (!discarded_[size_t(chunk)]) return;
    for (const ZeroUnit* u : units_of_chunk(chunk)) backend_->reclaim(params_->grads() + u->begin, u->size * sizeof(float));
    discarded_[size_t(chunk)] = false;
  }

  std::vector<bool> discarded_;
};

// ZeRO-3: ZeRO-2, and a chunk holds only its own parameter shards between
// uses (everything else is zeroed, so a missing gather never goes unnoticed).
class Zero3 final : public Zero2 {
 public:
  using Zero2::Zero2;
  Status allocate() override {
    released_.assign(gathers_.size(), false);
    LOOM_RETURN_IF_ERROR(Zero2::allocate());
    if (cfg_.dp_size > 1)
      for (int c = 0; c < int(gathers_.size()); ++c) release(c);
    return Status::ok();
  }
  void release(int chunk) override {
    if (released_[size_t(chunk)] || cfg_.dp_size == 1) return;
    LOOM_CHECK(gathers_[size_t(chunk)].empty(), "ZeRO-3 release of a chunk whose gather is in flight");
    released_[size_t(chunk)] = true;
    for_each_foreign(chunk, [this](float* p, size_t bytes) { backend_->discard(p, bytes); });
  }
  void reclaim_released(int chunk) override {
    if (!released_[size_t(chunk)]) return;
    for_each_foreign(chunk, [this](float* p, size_t bytes) { backend_->reclaim(p, bytes); });
    released_[size_t(chunk)] = false;
  }

 private:
  // The parameter ranges of a chunk this rank does not own (before and after
  // its shard in every unit).
  template <class Fn>
  void for_each_foreign(int chunk, Fn&& fn) {
    for (const ZeroUnit* u : units_of_chunk(chunk)) {
      float* p = params_->params() + u->begin;
      const auto [own_b, own_e] = own_range(*u);
      fn(p, own_b * sizeof(float));
      fn(p + own_e, (u->size - own_e) * sizeof(float));
    }
  }

  std::vector<bool> released_;
};

}  // namespace

std::unique_ptr<DataParallel> DataParallel::create(const DataParallelConfig& cfg, ComputeBackend* backend,
                                                   ParamStore* params, Communicator* dp, Communicator* tp,
                                                   Communicator* edp) {
  switch (cfg.zero) {
    case 0: return std::unique_ptr<DataParallel>(new Zero0(cfg, backend, params, dp, tp, edp));
    case 1: return std::unique_ptr<DataParallel>(new Zero1(cfg, backend, params, dp, tp, edp));
    case 2: return std::unique_ptr<DataParallel>(new Zero2(cfg, backend, params, dp, tp, edp));
    default: return std::unique_ptr<DataParallel>(new Zero3(cfg, backend, params, dp, tp, edp));
  }
}

}  // namespace loom::exec
