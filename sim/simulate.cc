#include "sim/simulate.h"

#include "sim/coverage.h"
#include "sim/dp_exposure.h"

#include <algorithm>
#include <span>

namespace loom {

namespace {

// Duration of every op of the program from the stage costs.
std::vector<double> op_durations(const Evaluator& eval, const Layout& l, const Program& prog,
                                 const std::vector<StageCosts>& stages, std::vector<DpCollectives>& dp) {
  std::vector<double> dur(prog.ops.size(), 0.0);
  const double t_p2p = eval.p2p_time_s(l);
  for (const Op& op : prog.ops) {
    const StageCosts& sc = stages[op.stage];
    const DpCollectives& d = dp[op.stage];
    const double frac = sc.chunk_grad_fraction.empty() ? 1.0 : sc.chunk_grad_fraction[op.chunk];
    double t = 0;
    switch (op.kind) {
      case OpKind::kForward: t = sc.chunk_fwd_s[op.chunk]; break;
      case OpKind::kBackward:
        t = (sc.chunk_bwd_s[op.chunk] - (op.defers_wgrad ? sc.chunk_wgrad_s[op.chunk] : 0.0)) /
            std::max<int>(1, op.num_parts);
        break;
      case OpKind::kWeightGrad: t = sc.chunk_wgrad_s[op.chunk]; break;
      case OpKind::kSendActivation:
      case OpKind::kSendGrad: t = 0; break;  // the transfer is timed on the receiving side
      case OpKind::kRecvActivation:
      case OpKind::kRecvGrad: t = t_p2p; break;
      case OpKind::kGradSync: t = d.grad_sync_s * frac / std::max<int>(1, op.num_parts); break;
      case OpKind::kParamGather:
        // ZeRO-3 gathers one chunk's weights per use; ZeRO-1/2 the updated chunk.
        t = d.param_gather_s * frac;
        break;
      case OpKind::kOptimizer: t = sc.optimizer_s; break;
    }
    dur[op.id] = t;
  }
  return dur;
}

// The busy intervals of each stage's DP stream in `tl`, sorted; the stream
// runs one op at a time, so they are disjoint.
struct DpBusy {
  double start, end;
  int32_t id;
};
std::vector<std::vector<DpBusy>> dp_busy(const Program& prog, const Timeline& tl, int stages) {
  std::vector<std::vector<DpBusy>> dp(static_cast<size_t>(stages));
  for (const Op& op : prog.ops) {
    const OpTiming& t = tl.ops[op.id];
    if (op.stream == Stream::kDpComm && t.end_s > t.start_s) dp[size_t(op.stage)].push_back({t.start_s, t.end_s, op.id});
  }
  for (auto& v : dp) std::sort(v.begin(), v.end(), [](const DpBusy& a, const DpBusy& b) { return a.start < b.start; });
  return dp;
}

// Calls f(busy, overlap_s) for each DP interval of `iv` that op timing `t` overlaps.
template <typename F>
void for_each_dp_overlap(const std::vector<DpBusy>& iv, const OpTiming& t, F f) {
  auto it = std::lower_bound(iv.begin(), iv.end(), t.start_s, [](const DpBusy& a, double s) { return a.end < s; });
  for (; it != iv.end() && it->start < t.end_s; ++it)
    f(*it, std::max(0.0, std::min(it->end, t.end_s) - std::max(it->start, t.start_s)));
}

// Contention: a compute op that overlaps its stage's DP collectives runs
// on the SMs NCCL leaves it, so it lasts longer by the overlap x
// comm_contention_fraction. Returns the lengthened durations and, per stage,
// the time added.
std::vector<double> with_contention(const Program& prog, const Timeline& tl, const std::vector<double>& dur,
                                    double fraction, int stages, std::vector<double>* added) {
  std::vector<double> out = dur;
  added->assign(stages, 0.0);
  if (fraction <= 0) return out;
  const auto dp = dp_busy(prog, tl, stages);
  for (const Op& op : prog.ops) {
    if (op.stream != Stream::kCompute) continue;
    for_each_dp_overlap(dp[size_t(op.stage)], tl.ops[op.id], [&](const DpBusy&, double overlap) {
      out[op.id] += overlap * fraction;
      (*added)[op.stage] += overlap * fraction;
    });
  }
  return out;
}

bool is_send(OpKind k) { return k == OpKind::kSendActivation || k == OpKind::kSendGrad; }
bool is_recv(OpKind k) { return k == OpKind::kRecvActivation || k == OpKind::kRecvGrad; }

}  // namespace

std::vector<double> with_nic_sharing(const Program& prog, const Timeline& tl, const std::vector<double>& dur,
                                     const std::vector<double>& net_fraction, int stages,
                                     std::vector<double>* added) {
  std::vector<double> out = dur;
  added->assign(stages, 0.0);
  const auto dp = dp_busy(prog, tl, stages);
  for (const Op& op : prog.ops) {
    const double f = net_fraction[size_t(op.id)];
    if (!(f > 0) || op.stream == Stream::kDpComm) continue;
    for_each_dp_overlap(dp[size_t(op.stage)], tl.ops[op.id], [&](const DpBusy& busy, double overlap) {
      const double shared = f * overlap;
      out[size_t(op.id)] += shared;
      out[size_t(busy.id)] += shared;
      if (op.stream == Stream::kCompute) (*added)[op.stage] += shared;
    });
  }
  return out;
}

// `out`'s deps: each op's deps in `prog`, then extra[op] (out's ops are prog's, maybe moved).
void add_deps(const Program& prog, const std::vector<std::vector<int32_t>>& extra, Program* out) {
  size_t added = 0;
  for (const auto& e : extra) added += e.size();
  out->deps.clear();
  out->deps.reserve(prog.deps.size() + added);
  for (Op& op : out->ops) {
    const auto old = prog.deps_of(prog.ops[size_t(op.id)]);
    op.dep_begin = static_cast<int32_t>(out->deps.size());
    out->deps.insert(out->deps.end(), old.begin(), old.end());
    out->deps.insert(out->deps.end(), extra[size_t(op.id)].begin(), extra[size_t(op.id)].end());
    op.dep_count = static_cast<int32_t>(out->deps.size()) - op.dep_begin;
  }
}

// DP collectives that progress only while the host calls into the
// communicator (SimOptions::dp_comm_host_progress): each starts no earlier
// than the end of the compute op before its first consumer on the stage, so
// that consumer waits for all of it, as the executor's wait does.
Program with_host_progressed_dp(const Program& prog) {
  const size_t n = prog.ops.size();
  std::vector<std::vector<int32_t>> extra(n);
  std::vector<int32_t> first_consumer(n, -1);  // index in the stage's issue order
  std::vector<int32_t> pos(n, -1);             // each op's index in its stage's issue order
  for (const auto& ids : prog.stage_ops)
    for (size_t i = 0; i < ids.size(); ++i) pos[size_t(ids[i])] = int32_t(i);
  for (const auto& ids : prog.stage_ops) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const Op& op = prog.ops[size_t(ids[i])];
      for (int32_t d : prog.deps_of(op))
        if (prog.ops[size_t(d)].stream == Stream::kDpComm && prog.ops[size_t(d)].stage == op.stage &&
            first_consumer[size_t(d)] < 0)
          first_consumer[size_t(d)] = int32_t(i);
    }
    // The compute ops in issue order, and for each the latest DP op (by its
    // index in the stage's order) that it or a compute op before it needs: a
    // DP op may wait only for compute that does not itself wait for it or
    // for a DP op behind it on the DP stream.
    std::vector<int32_t> compute_at, needs_dp_upto;
    std::vector<int32_t> compute_before(ids.size(), -1);  // position in compute_at of the last compute op before i
    int32_t upto = -1;
    for (size_t i = 0; i < ids.size(); ++i) {
      compute_before[i] = int32_t(compute_at.size()) - 1;
      const Op& op = prog.ops[size_t(ids[i])];
      if (op.stream != Stream::kCompute) continue;
      for (int32_t d : prog.deps_of(op))
        if (prog.ops[size_t(d)].stream == Stream::kDpComm && prog.ops[size_t(d)].stage == op.stage)
          upto = std::max(upto, pos[size_t(d)]);
      compute_at.push_back(int32_t(i));
      needs_dp_upto.push_back(upto);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i], c = first_consumer[size_t(id)];
      if (prog.ops[size_t(id)].stream != Stream::kDpComm || c < 0) continue;
      int32_t k = compute_before[size_t(c)];
      while (k >= 0 && needs_dp_upto[size_t(k)] >= int32_t(i)) --k;
      if (k >= 0 && compute_at[size_t(k)] > int32_t(i)) extra[size_t(id)].push_back(ids[size_t(compute_at[size_t(k)])]);
    }
  }
  Program out = prog;
  add_deps(prog, extra, &out);
  return out;
}

Program with_blocking_sends(const Program& prog) {
  const size_t n = prog.ops.size();
  const int P = static_cast<int>(prog.stage_ops.size());
  const bool interleaved = prog.config.schedule == Schedule::kInterleaved;
  std::vector<std::vector<int32_t>> extra(n);
  Program out = prog;
  out.stage_ops.assign(size_t(2 * P), {});
  for (int st = 0; st < P; ++st) {
    std::vector<int32_t> before_forward, before_any;  // sends the next compute op waits for
    for (int32_t id : prog.stage_ops[size_t(st)]) {
      const Op& op = prog.ops[size_t(id)];
      if (is_send(op.kind)) {
        Op& moved = out.ops[size_t(id)];
        moved.stage = static_cast<int16_t>(P + st);
        moved.stream = op.kind == OpKind::kSendActivation ? Stream::kPpComm : Stream::kDpComm;
        out.stage_ops[size_t(P + st)].push_back(id);
        (interleaved && op.kind == OpKind::kSendActivation ? before_forward : before_any).push_back(id);
        continue;
      }
      out.stage_ops[size_t(st)].push_back(id);
      if (op.stream != Stream::kCompute) continue;
      auto& e = extra[size_t(id)];
      e.insert(e.end(), before_any.begin(), before_any.end());
      before_any.clear();
      if (op.kind == OpKind::kForward || op.kind == OpKind::kOptimizer) {
        e.insert(e.end(), before_forward.begin(), before_forward.end());
        before_forward.clear();
      }
    }
  }
  add_deps(prog, extra, &out);
  return out;
}

// See simulate.h.
void with_layered_dp(const Program& prog, std::span<const int> chunk_layers, std::vector<double>* dur,
                     std::vector<double>* hidden, std::vector<double>* stall) {
  const size_t n = prog.ops.size();
  hidden->assign(n, 0.0);
  stall->assign(n, 0.0);
  // ZeRO-3 by layer only where both overlaps are on (FSDP's prefetch and its
  // reduce-scatter beside the backward); otherwise the program's ops stand.
  const bool layered_zero3 = prog.config.overlap_param_gather && prog.config.overlap_grad_reduce;
  // Each DP op's consumer (a compute op that waits for it) and producer (the
  // compute op it waits for).
  std::vector<int32_t> consumer(n, -1), producer(n, -1), sync_of(n, -1);
  for (const Op& op : prog.ops) {
    for (int32_t d : prog.deps_of(op)) {
      const Op& dep = prog.ops[size_t(d)];
      if ((op.kind == OpKind::kForward || op.kind == OpKind::kBackward) && dep.stream == Stream::kDpComm &&
          dep.stage == op.stage && consumer[size_t(d)] < 0)
        consumer[size_t(d)] = op.id;
      if (op.stream == Stream::kDpComm && dep.stream == Stream::kCompute && dep.stage == op.stage)
        producer[size_t(op.id)] = d;
    }
  }
  // Per-micro-batch reduce-scatters (ZeRO-2/3 with overlap: no forward or
  // backward waits for them, only the optimizer), by the backward they follow.
  for (const Op& op : prog.ops)
    if (op.kind == OpKind::kGradSync && op.micro >= 0 && producer[size_t(op.id)] >= 0 && consumer[size_t(op.id)] < 0)
      sync_of[size_t(producer[size_t(op.id)])] = op.id;
  auto& d = *dur;
  for (const Op& op : prog.ops) {
    if (op.kind != OpKind::kParamGather) continue;
    const int32_t c = consumer[size_t(op.id)];
    if (c < 0) continue;  // ZeRO-1/2 gathers after the optimizer: no compute waits
    if (op.micro >= 0 && !layered_zero3) continue;
    const Op& cop = prog.ops[size_t(c)];
    // ZeRO-3 gathers layer by layer; a ZeRO-1/2 step gather bucket by bucket.
    const int k = std::max(
        1, op.micro >= 0 ? chunk_layers[size_t(cop.stage) * size_t(prog.config.virtual_stages) + size_t(cop.chunk)]
                         : prog.config.buckets_of(cop.stage, cop.chunk));
    // The consumer computes its first piece once the first piece is
    // gathered; the rest of the gather (and, before a backward, the
    // reduce-scatter of all but its last piece) runs beside the others, and
    // what they cannot cover stalls the consumer between its pieces (the
    // stacks prefetch one piece ahead, so no earlier op hides it).
    const double head = d[op.id] / k, rest = d[op.id] - head;
    const int32_t rs = op.micro >= 0 ? sync_of[size_t(c)] : -1;
    const double rs_early = rs >= 0 ? d[size_t(rs)] * (k - 1) / k : 0.0;
    const double excess = piece_stall(d[op.id], k, d[size_t(c)], rs_early);
    // A step gather (ZeRO-1/2) is dispatched bucket by bucket ahead of the
    // forwards from the start of the step, so later chunks' gathers finish
    // during the first chunk's forwards: its excess stays on the DP stream.
    if (op.micro >= 0) {
      d[op.id] = head;
      (*stall)[size_t(c)] += excess;
    } else {
      d[op.id] = head + excess;
    }
    (*hidden)[size_t(c)] += rest + rs_early - excess;
    if (rs >= 0) d[size_t(rs)] -= rs_early;
  }
  // ZeRO-2: the reduce-scatters without a gather in front of their backward,
  // where the stack overlaps them at all (without it, e.g. DeepSpeed's
  // overlap_comm off, the reduce-scatter follows the whole backward; with
  // one micro-batch no later compute op waits for it, which would otherwise
  // pass it for an overlapped one). Only a chunk's last micro-batch: an
  // earlier one's layer-by-layer reduce-scatter shares the DP stream with
  // the one before it, which runs on into its backward, so taking it off the
  // stream would count the stream's time twice where the reduce-scatters
  // outlast the compute (a DP-bound step); whole, it still hides behind the
  // next micro-batch where they do not.
  for (const Op& op : prog.ops) {
    if (!prog.config.overlap_grad_reduce) break;
    if (op.micro != prog.config.micro_batches - 1) continue;
    if (op.kind != OpKind::kBackward || sync_of[size_t(op.id)] < 0) continue;
    const int32_t rs = sync_of[size_t(op.id)];
    bool priced = false;
    for (int32_t dep : prog.deps_of(op)) priced |= prog.ops[size_t(dep)].kind == OpKind::kParamGather;
    if (priced) continue;
    const int k = std::max(1, chunk_layers[size_t(op.stage) * size_t(prog.config.virtual_stages) + size_t(op.chunk)]);
    const double early = d[size_t(rs)] * (k - 1) / k, window = d[op.id] * (k - 1) / k;
    const double covered = std::min(early, window);
    d[size_t(rs)] -= covered;
    (*hidden)[op.id] += covered;
  }
}

// See simulate.h.
Program with_norm_barrier(const Program& prog) {
  const int P = prog.config.pp;
  std::vector<int32_t> opt_of(size_t(P), -1), last_compute(size_t(P), -1);
  for (int st = 0; st < P && size_t(st) < prog.stage_ops.size(); ++st)
    for (int32_t id : prog.stage_ops[size_t(st)]) {
      const Op& op = prog.ops[size_t(id)];
      if (op.kind == OpKind::kOptimizer) opt_of[size_t(st)] = id;
      else if (op.stream == Stream::kCompute && opt_of[size_t(st)] < 0) last_compute[size_t(st)] = id;
    }
  std::vector<std::vector<int32_t>> extra(prog.ops.size());
  for (int st = 0; st < P; ++st) {
    if (opt_of[size_t(st)] < 0) continue;
    auto& e = extra[size_t(opt_of[size_t(st)])];
    for (int other = 0; other < P; ++other) {
      if (other == st) continue;
      if (last_compute[size_t(other)] >= 0) e.push_back(last_compute[size_t(other)]);
      if (opt_of[size_t(other)] >= 0) {
        const auto deps = prog.deps_of(prog.ops[size_t(opt_of[size_t(other)])]);
        e.insert(e.end(), deps.begin(), deps.end());
      }
    }
  }
  Program out = prog;
  add_deps(prog, extra, &out);
  return out;
}

// See simulate.h. A receive is posted after the previous op of its direction
// (or, for a direction's first, after the op before its consumer).
Program with_posted_ahead_recvs(const Program& prog) {
  const size_t n = prog.ops.size();
  const int P = static_cast<int>(prog.stage_ops.size());
  std::vector<int32_t> send_of(n, -1), recv_of(n, -1);
  for (const Op& op : prog.ops) {
    if (is_send(op.kind)) {
      for (int32_t d : prog.deps_of(op))
        if (prog.ops[size_t(d)].stream == Stream::kCompute) send_of[size_t(d)] = op.id;
    } else if (op.stream == Stream::kCompute) {
      for (int32_t d : prog.deps_of(op))
        if (is_recv(prog.ops[size_t(d)].kind) && prog.ops[size_t(d)].stage == op.stage) recv_of[size_t(op.id)] = d;
    }
  }
  std::vector<std::vector<int32_t>> extra(n);
  Program out = prog;
  out.stage_ops.assign(size_t(2 * P), {});
  for (int st = 0; st < P; ++st) {
    std::vector<int32_t> compute;  // forwards and backwards in issue order
    for (int32_t id : prog.stage_ops[size_t(st)]) {
      const Op& op = prog.ops[size_t(id)];
      if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward) compute.push_back(id);
    }
    // The order in which the host posts the transfers.
    std::vector<int32_t> posted;
    std::vector<bool> done(compute.size(), false);
    auto post_recv = [&](size_t k) {
      if (k < compute.size() && !done[k] && recv_of[size_t(compute[k])] >= 0) posted.push_back(recv_of[size_t(compute[k])]);
      if (k < compute.size()) done[k] = true;
    };
    post_recv(0);
    int32_t last_send[2] = {-1, -1};  // the previous forward's / backward's send
    for (size_t k = 0; k < compute.size(); ++k) {
      const int32_t id = compute[k];
      const int dir = prog.ops[size_t(id)].kind == OpKind::kForward ? 0 : 1;
      if (last_send[dir] >= 0) extra[size_t(id)].push_back(last_send[dir]);
      last_send[dir] = send_of[size_t(id)];
      if (send_of[size_t(id)] >= 0) posted.push_back(send_of[size_t(id)]);
      // The next op of the same direction, then (when it has no earlier op of
      // its direction to be posted after) the op right after this one.
      for (size_t j = k + 1; j < compute.size(); ++j)
        if ((prog.ops[size_t(compute[j])].kind == OpKind::kForward) == (dir == 0)) {
          post_recv(j);
          break;
        }
      post_recv(k + 1);
    }
    // The optimizer waits for the last sends (the schedule's final waits).
    for (int32_t id : prog.stage_ops[size_t(st)])
      if (prog.ops[size_t(id)].kind == OpKind::kOptimizer)
        for (int32_t s : last_send)
          if (s >= 0) extra[size_t(id)].push_back(s);
    for (int32_t id : prog.stage_ops[size_t(st)])
      if (prog.ops[size_t(id)].stream != Stream::kPpComm) out.stage_ops[size_t(st)].push_back(id);
    for (int32_t id : posted) {
      const OpKind k = prog.ops[size_t(id)].kind;
      if (k == OpKind::kSendActivation || k == OpKind::kRecvGrad) {
        out.ops[size_t(id)].stage = static_cast<int16_t>(P + st);
        out.stage_ops[size_t(P + st)].push_back(id);
      } else {
        out.stage_ops[size_t(st)].push_back(id);
      }
    }
  }
  add_deps(prog, extra, &out);
  return out;
}

Result<SimResult> simulate_layout(const Evaluator& eval, const Layout& l) {
  LOOM_RETURN_IF_ERROR(validate_layout(l, eval.model(), eval.train(), 0));
  if (fsdp_once_per_step(l, eval.options())) {
    // Timed as the stack runs it (priced_layout): the program and the
    // figures are the priced form's, the layout stays the one asked for.
    LOOM_ASSIGN_OR_RETURN(SimResult priced, simulate_layout(eval, priced_layout(l, eval.options())));
    priced.layout = l;
    return priced;
  }
  SimResult r;
  r.layout = l;
  r.memory = memory_report(eval.model(), eval.hw(), l, eval.train(), eval.options());
  r.closed_form = eval.estimate(l);
  r.outside_measured = outside_measured(eval.model(), eval.hw(), eval.train(), l);
  r.stages = eval.stage_costs(l);
  std::vector<DpCollectives> dp;
  for (const StageCosts& sc : r.stages) dp.push_back(eval.dp_collectives(l, sc));

  ProgramConfig cfg = program_config_for(l, eval.train().global_batch, eval.options().grad_buckets);
  cfg.syncs_after_backward = priced_after_backward(l, eval.options());
  // A stack that states its bucket size buckets each chunk its own way
  // (StageCosts::chunk_buckets: Megatron-core only pipeline rank 0's first
  // chunk); the program then carries the counts, and its syncs and the
  // split of each chunk's last backward follow them.
  if (eval.options().states_grad_buckets() && !eval.options().for_loom_executor()) {
    std::vector<int> counts(size_t(l.pp) * size_t(l.virtual_stages), cfg.grad_buckets);
    for (const StageCosts& sc : r.stages)
      for (size_t c = 0; c < sc.chunk_buckets.size() && c < size_t(l.virtual_stages); ++c)
        counts[size_t(sc.stage) * size_t(l.virtual_stages) + c] = sc.chunk_buckets[c];
    if (std::any_of(counts.begin(), counts.end(), [&](int b) { return b != cfg.grad_buckets; }))
      cfg.chunk_grad_buckets = std::move(counts);
  }
  LOOM_ASSIGN_OR_RETURN(r.program, build_program(cfg));
  // The engine times the program the framework runs; r.program stays the
  // executor's (its ops, ids and hash are the plan's) unless the stack's
  // buckets differ from it (above).
  const bool blocking = l.pp > 1 && blocking_p2p(eval.options(), l.schedule);
  const bool host_dp = l.dp * l.cp > 1 && eval.options().dp_comm_host_progress;
  // Megatron's (and torchtitan's) interleaved schedule posts each receive
  // one op of its direction ahead (with_posted_ahead_recvs).
  const bool posted_ahead =
      l.pp > 1 && !blocking && l.schedule == Schedule::kInterleaved && eval.options().pp_overlap_p2p_comm;
  Program timed_host, timed_p2p;
  if (host_dp) timed_host = with_host_progressed_dp(r.program);
  const Program& base = host_dp ? timed_host : r.program;
  if (blocking) timed_p2p = with_blocking_sends(base);
  if (posted_ahead) timed_p2p = with_posted_ahead_recvs(base);
  const Program& p2p_timed = blocking || posted_ahead ? timed_p2p : base;
  // The gradient norm's all-reduce holds every stage's update until the
  // slowest stage has its gradients (with_norm_barrier).
  Program timed_norm;
  if (l.pp > 1) timed_norm = with_norm_barrier(p2p_timed);
  const Program& timed = l.pp > 1 ? timed_norm : p2p_timed;
  r.durations_s = op_durations(eval, l, r.program, r.stages, dp);
  if (blocking || posted_ahead) {
    const double t_p2p = eval.p2p_time_s(l);
    for (const Op& op : r.program.ops)
      if (is_send(op.kind)) r.durations_s[size_t(op.id)] = t_p2p;
  }
  // A published stack's DP traffic by bucket or layer (with_layered_dp); the
  // part beside compute pays contention below, and what it cannot cover
  // stalls its consumer (reported as exposed DP time).
  std::vector<double> hidden_dp, stall_dp;
  std::vector<double> stall_by_stage(size_t(l.pp), 0.0);
  if (!eval.options().for_loom_executor() && l.dp * l.cp > 1 && !host_dp) {
    const StageSplit split = split_layers(eval.model(), l);
    const int v = l.virtual_stages;
    std::vector<int> chunk_layers(size_t(l.pp) * size_t(v));
    for (int s = 0; s < l.pp; ++s)
      for (int c = 0; c < v; ++c) chunk_layers[size_t(s) * v + c] = split.chunk_layers[size_t(split.global(s, c))];
    with_layered_dp(r.program, chunk_layers, &r.durations_s, &hidden_dp, &stall_dp);
    for (size_t i = 0; i < stall_dp.size(); ++i) {
      r.durations_s[i] += stall_dp[i];
      stall_by_stage[size_t(r.program.ops[i].stage)] += stall_dp[i];
    }
  }
  LOOM_ASSIGN_OR_RETURN(r.timeline, run_event_engine(timed, r.durations_s));
  // Contention: lengthen the compute that overlapped DP collectives, then
  // time the program again (one pass: the overlap barely moves).
  // NIC sharing: where the DP collectives cross the network, the cross-node
  // transfers that run beside them share the rank's NIC.
  std::vector<double> contention_by_stage;
  const double fraction = comm_contention_fraction(eval.hw());
  const int dpn = eval.hw().node.devices_per_node;
  const bool dp_net = l.dp * l.cp > 1 && gradient_group_shape(l, dpn).nodes > 1;
  std::vector<double> net_fraction;
  if (dp_net) {
    const bool pp_net = l.pp > 1 && group_shape(l, Dim::kPp, dpn).nodes > 1;
    net_fraction.assign(r.program.ops.size(), 0.0);
    for (const Op& op : r.program.ops) {
      if (op.stream == Stream::kCompute && op.kind != OpKind::kOptimizer)
        net_fraction[size_t(op.id)] = r.stages[size_t(op.stage)].net_share;
      else if (is_recv(op.kind) && pp_net) net_fraction[size_t(op.id)] = 1.0;
      else if (is_send(op.kind) && pp_net && (blocking || posted_ahead))
        net_fraction[size_t(op.id)] = 1.0;  // the sender's side, which lasts the transfer
    }
  }
  if ((fraction > 0 && l.dp * l.cp > 1) || dp_net) {
    std::vector<double> sm(size_t(l.pp), 0.0), nic(size_t(l.pp), 0.0);
    // Both passes read their overlaps from the first timeline.
    if (fraction > 0 && l.dp * l.cp > 1)
      r.durations_s = with_contention(r.program, r.timeline, r.durations_s, fraction, l.pp, &sm);
    if (dp_net) r.durations_s = with_nic_sharing(r.program, r.timeline, r.durations_s, net_fraction, l.pp, &nic);
    // The DP time with_layered_dp put beside compute ops.
    for (size_t i = 0; i < hidden_dp.size(); ++i) {
      if (!(hidden_dp[i] > 0)) continue;
      const int s = r.program.ops[i].stage;
      const double sm_s = hidden_dp[i] * fraction, nic_s = dp_net ? hidden_dp[i] * net_fraction[i] : 0.0;
      r.durations_s[i] += sm_s + nic_s;
      sm[size_t(s)] += sm_s;
      nic[size_t(s)] += nic_s;
    }
    contention_by_stage.assign(size_t(l.pp), 0.0);
    for (int s = 0; s < l.pp; ++s) contention_by_stage[size_t(s)] = sm[size_t(s)] + nic[size_t(s)];
    LOOM_ASSIGN_OR_RETURN(r.timeline, run_event_engine(timed, r.durations_s));
  }

  // Breakdown on the critical stage: the one with the most compute.
  const int64_t m = l.num_micro_batches(eval.train().global_batch);
  int crit = 0;
  for (int s = 0; s < l.pp; ++s)
    if (r.timeline.compute_busy_s[s] > r.timeline.compute_busy_s[crit]) crit = s;
  r.critical_stage = crit;
  const StageCosts& c = r.stages[crit];
  StepBreakdown& tb = r.time;
  tb.step_time_s = r.timeline.step_time_s;
  split_compute(c, m, &tb);
  tb.optimizer_s = c.optimizer_s;
  // Separate pipeline p2p from the bubble proper: time the same program with
  // free p2p transfers; the step time it saves is the exposed p2p time.
  tb.dp_comm_s = r.timeline.idle[crit].dp_comm_s + stall_by_stage[size_t(crit)];
  // Without a pipeline the only wait after the last compute op is DP traffic
  // (ZeRO-1/2 gathers after the optimizer).
  if (l.pp == 1) tb.dp_comm_s += r.timeline.idle[crit].tail_s;
  if (l.pp > 1) {
    std::vector<double> no_p2p = r.durations_s;
    for (const Op& op : r.program.ops)
      if (is_recv(op.kind) || is_send(op.kind)) no_p2p[op.id] = 0;
    LOOM_ASSIGN_OR_RETURN(Timeline free_p2p, run_event_engine(timed, no_p2p));
    tb.pp_comm_s = std::max(0.0, r.timeline.step_time_s - free_p2p.step_time_s);
    tb.bubble_s = free_p2p.idle[crit].pipeline_s + free_p2p.idle[crit].tail_s;
  }

  // The compute time the critical stage lost to contention (inside the
  // lengthened compute ops, reported apart).
  tb.contention_s = contention_by_stage.empty() ? 0.0 : contention_by_stage[crit];

  // The phases predicted vs measured compares: forward and backward as the
  // compute ops' durations (TP/EP inside, as the executor times them).
  StepPhases& ph = r.phases;
  ph.forward_s = double(m) * c.fwd_s;
  ph.backward_s = double(m) * (c.bwd_s + c.recompute_s);
  ph.tp_comm_exposed_s = tb.tp_comm_s + tb.ep_comm_s + tb.cp_comm_s;
  ph.pipeline_wait_s = tb.bubble_s + tb.pp_comm_s;
  ph.dp_comm_exposed_s = tb.dp_comm_s;
  ph.optimizer_s = tb.optimizer_s;
  ph.data_wait_s = 0;

  double flops_micro = 0;
  for (const StageCosts& sc : r.stages) flops_micro += sc.flops_per_micro;
  r.figures = eval.figures(l, tb.step_time_s, flops_micro * double(m) * l.dp * l.tp * l.cp);
  r.traffic = eval.step_traffic(l, r.stages);
  return r;
}

Trace predicted_trace(const SimResult& r, const std::string& plan_hash) {
  Trace t;
  t.kind = "predicted";
  t.plan_hash = plan_hash;
  t.program_hash = program_hash(r.program.config);
  for (int s = 0; s < r.layout.pp; ++s) t.process_names.push_back("stage " + std::to_string(s));
  for (int i = 0; i < kNumStreams; ++i) t.thread_names.push_back(stream_name(static_cast<Stream>(i)));
  t.events.reserve(r.program.ops.size());
  for (const Op& op : r.program.ops) {
    const OpTiming& tm = r.timeline.ops[op.id];
    TraceEvent e;
    e.name = r.program.op_name(op);
    e.cat = op_kind_name(op.kind);
    e.pid = op.stage;
    e.tid = static_cast<int>(op.stream);
    e.ts_us = tm.start_s * 1e6;
    // A send that lasts its transfer (blocking, or posted ahead on its own
    // stream) is drawn as an instant; the trace shows the transfer on
    // the recv, so that one track is one serial stream.
    e.dur_us = is_send(op.kind) ? 0.0 : (tm.end_s - tm.start_s) * 1e6;
    e.op_id = op.id;
    e.micro = op.micro;
    e.stage = op.stage;
    e.chunk = op.chunk;
    t.events.push_back(std::move(e));
  }
  return t;
}

}  // namespace loom
