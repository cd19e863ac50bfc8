#include "sim/cp_ring.h"

#include <algorithm>

#include "sim/event_engine.h"

namespace loom {
namespace {

// Appends an op of one stage; `deps` are ids already appended (-1 skipped).
int32_t add(Program& p, OpKind kind, Stream stream, int part, std::initializer_list<int32_t> deps) {
  Op op;
  op.id = static_cast<int32_t>(p.ops.size());
  op.kind = kind;
  op.stream = stream;
  op.part = static_cast<int16_t>(part);
  op.micro = 0;
  op.dep_begin = static_cast<int32_t>(p.deps.size());
  for (int32_t d : deps)
    if (d >= 0) p.deps.push_back(d);
  op.dep_count = static_cast<int32_t>(p.deps.size()) - op.dep_begin;
  p.ops.push_back(op);
  p.stage_ops[0].push_back(op.id);
  return op.id;
}

Program empty_program() {
  Program p;
  p.stage_ops.assign(1, {});
  return p;
}

// Transfers on the DP stream (the engine's second stream of a stage) as
// grad-sync ops: kinds the engine times by duration and deps alone.
constexpr OpKind kTransfer = OpKind::kGradSync;
constexpr Stream kRing = Stream::kDpComm;

}  // namespace

Program cp_ring_forward_program(int n) {
  LOOM_CHECK(n >= 2, "cp ring: needs two ranks or more");
  Program p = empty_program();
  // Ids: step s's K/V arrival kv[s] (s >= 1), its blocks f[s].
  std::vector<int32_t> kv(size_t(n), -1), f(size_t(n), -1);
  for (int s = 0; s < n; ++s) {
    if (s + 1 < n) kv[size_t(s + 1)] = add(p, kTransfer, kRing, s + 1, {kv[size_t(s)], s > 0 ? f[size_t(s - 1)] : -1});
    f[size_t(s)] = add(p, OpKind::kForward, Stream::kCompute, s, {kv[size_t(s)]});
  }
  return p;
}

Program cp_ring_backward_program(int n) {
  LOOM_CHECK(n >= 2, "cp ring: needs two ranks or more");
  Program p = empty_program();
  std::vector<int32_t> kv(size_t(n), -1), b(size_t(n), -1), d(size_t(n), -1);
  auto at = [](const std::vector<int32_t>& v, int s) { return s >= 0 ? v[size_t(s)] : -1; };
  for (int s = 0; s < n; ++s) {
    // Issued when the host reaches step s: after step s-1's blocks, its wait
    // on K/V s and its wait on dK/dV s-2.
    if (s + 1 < n) kv[size_t(s + 1)] = add(p, kTransfer, kRing, s + 1, {at(kv, s), at(b, s - 1), at(d, s - 2)});
    b[size_t(s)] = add(p, OpKind::kBackward, Stream::kCompute, s, {at(kv, s), at(d, s - 2)});
    d[size_t(s)] = add(p, kTransfer, kRing, n + s, {b[size_t(s)], at(d, s - 1)});
  }
  return p;
}

CpRingTime cp_ring_time(int n, double kv_s, double dkv_s, double fwd_step_s, double bwd_step_s) {
  CpRingTime t;
  if (n < 2) return t;
  auto run = [](const Program& p, auto duration_of) {
    std::vector<double> dur(p.ops.size());
    for (const Op& op : p.ops) dur[size_t(op.id)] = duration_of(op);
    auto tl = run_event_engine(p, dur);
    LOOM_CHECK(tl.is_ok(), "cp ring: " + tl.status().message());
    return tl->step_time_s;
  };
  thread_local int cached_n = 0;
  thread_local Program fwd, bwd;
  if (cached_n != n) {
    fwd = cp_ring_forward_program(n);
    bwd = cp_ring_backward_program(n);
    cached_n = n;
  }
  t.fwd_s = run(fwd, [&](const Op& op) { return op.stream == Stream::kCompute ? fwd_step_s : kv_s; });
  // Backward transfers: parts 1..n-1 are K/V, n.. the dK/dV.
  t.bwd_s = run(bwd, [&](const Op& op) {
    return op.stream == Stream::kCompute ? bwd_step_s : (op.part < n ? kv_s : dkv_s);
  });
  t.fwd_exposed_s = std::max(0.0, t.fwd_s - n * fwd_step_s);
  t.bwd_exposed_s = std::max(0.0, t.bwd_s - n * bwd_step_s);
  return t;
}

}  // namespace loom
