// Event engine: one pass of Kahn's algorithm over the op graph, whose edges are
// the program's deps plus "previous op on the same (stage, stream)".
//
// Ops are timed in topological order, so each op's start is final when it is
// popped: every predecessor, as it finishes, pushes the start of its
// successors forward. Edges are stored once, as successor lists in CSR form,
// each entry tagged with whether it carries the predecessor's start (a send
// releasing its recv: the transfer runs on both ends at once, so p2p time is
// paid once) or its end (everything else). A cycle leaves ops that never
// become ready; they are reported, never waited on.
//
// Memory: the result plus four flat scratch arrays reused per thread; no
// per-op allocation. Time: O(ops + deps).
#include "sim/event_engine.h"

#include <cmath>
#include <string>

namespace loom {
namespace {

bool is_send(OpKind k) { return k == OpKind::kSendActivation || k == OpKind::kSendGrad; }
bool is_recv(OpKind k) { return k == OpKind::kRecvActivation || k == OpKind::kRecvGrad; }

// Effective time at which dep `d` releases op `op`: a send releases its recv
// when it starts, every other dep when it ends.
double release_time(const Op& op, const Op& d, const OpTiming& t) {
  return (is_recv(op.kind) && is_send(d.kind)) ? t.start_s : t.end_s;
}

// Scratch arrays, reused across calls on one thread so that repeated runs (the
// layout search times thousands of programs) touch no fresh pages. They carry
// no state from one call to the next: every entry used is rewritten.
struct Scratch {
  std::vector<int32_t> indeg;   // (ops) unfinished predecessors; -1 while checking = not in stage_ops
  std::vector<int32_t> offset;  // (ops + 1) CSR row starts of `succ`
  std::vector<int32_t> succ;    // (edges) (successor << 1) | carries_start
  std::vector<int32_t> queue;   // (ops) ready ops; in the end, a topological order
};

// Checks the program's shape so the graph pass can trust every index, counts
// each op's predecessors (deps + previous op on its stage's stream) into
// `indeg` and its successors into `offset[op]`.
Status check_and_count(const Program& prog, Scratch& w) {
  const auto& ops = prog.ops;
  const int64_t n = static_cast<int64_t>(ops.size());
  const int64_t num_deps = static_cast<int64_t>(prog.deps.size());
  const int num_stages = static_cast<int>(prog.stage_ops.size());
  if (n >= (int64_t(1) << 30)) return invalid_argument("event engine: program has too many ops (" + std::to_string(n) + ")");
  w.indeg.assign(n, -1);
  w.offset.assign(n + 1, 0);
  for (int s = 0; s < num_stages; ++s) {
    int32_t last[kNumStreams] = {-1, -1, -1};
    for (int32_t id : prog.stage_ops[s]) {
      if (id < 0 || id >= n || ops[id].stage != s || static_cast<int>(ops[id].stream) >= kNumStreams ||
          w.indeg[id] != -1)
        return internal_error("event engine: stage_ops[" + std::to_string(s) + "] lists op " + std::to_string(id) +
                              ", which is out of range, of another stage, on no stream, or listed twice");
      int32_t& prev = last[static_cast<int>(ops[id].stream)];
      w.indeg[id] = prev >= 0 ? 1 : 0;
      if (prev >= 0) ++w.offset[prev];
      prev = id;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const Op& op = ops[i];
    if (w.indeg[i] < 0) return internal_error("event engine: op '" + prog.op_name(op) + "' is not listed in stage_ops");
    if (op.dep_count < 0 || op.dep_begin < 0 || int64_t(op.dep_begin) + op.dep_count > num_deps)
      return internal_error("event engine: deps of op '" + prog.op_name(op) + "' lie outside Program::deps");
    for (int32_t d : prog.deps_of(op)) {
      if (d < 0 || d >= n || d == i)
        return internal_error("event engine: op '" + prog.op_name(op) + "' has an invalid dep " + std::to_string(d));
      ++w.offset[d];
    }
    w.indeg[i] += op.dep_count;
  }
  return Status::ok();
}

}  // namespace

Result<Timeline> run_event_engine(const Program& program, std::span<const double> duration_s) {
  const auto& ops = program.ops;
  const int32_t n = static_cast<int32_t>(ops.size());
  if (duration_s.size() != ops.size())
    return invalid_argument("event engine: " + std::to_string(duration_s.size()) + " durations for " +
                            std::to_string(ops.size()) + " ops; pass one duration per op");
  for (int32_t i = 0; i < n; ++i)
    if (!(duration_s[i] >= 0) || !std::isfinite(duration_s[i]))
      return invalid_argument("event engine: op '" + program.op_name(ops[i]) + "' has duration " +
                              std::to_string(duration_s[i]) + " s; durations must be finite and >= 0");

  thread_local Scratch w;
  LOOM_RETURN_IF_ERROR(check_and_count(program, w));

  // Successor lists (CSR): prefix sums make offset[i] the end of i's row, then
  // filling each row backwards leaves offset[i] at its start.
  int64_t edges = 0;
  for (int32_t i = 0; i <= n; ++i) {
    edges += w.offset[i];
    w.offset[i] = static_cast<int32_t>(edges);
  }
  if (edges >= (int64_t(1) << 31)) return invalid_argument("event engine: program has too many deps");
  w.succ.resize(edges);
  int32_t* offset = w.offset.data();
  int32_t* succ = w.succ.data();
  for (const auto& stage : program.stage_ops) {
    int32_t last[kNumStreams] = {-1, -1, -1};
    for (int32_t id : stage) {
      int32_t& prev = last[static_cast<int>(ops[id].stream)];
      if (prev >= 0) succ[--offset[prev]] = id << 1;
      prev = id;
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    const Op& op = ops[i];
    if (is_recv(op.kind)) {
      for (int32_t d : program.deps_of(op)) succ[--offset[d]] = (i << 1) | (is_send(ops[d].kind) ? 1 : 0);
    } else {
      for (int32_t d : program.deps_of(op)) succ[--offset[d]] = i << 1;
    }
  }

  // Kahn's algorithm. An op's start is pushed forward by each predecessor as
  // it finishes and is final when the op is popped; it lives in tl.ops.
  Timeline tl;
  tl.ops.assign(n, OpTiming{});
  OpTiming* t = tl.ops.data();
  int32_t* indeg = w.indeg.data();
  w.queue.resize(n);
  int32_t* queue = w.queue.data();
  int32_t head = 0, tail = 0;
  for (int32_t i = 0; i < n; ++i)
    if (indeg[i] == 0) queue[tail++] = i;
  double step_s = 0;
  while (head < tail) {
    const int32_t u = queue[head++];
    const double start = t[u].start_s;
    const double end = start + duration_s[u];
    t[u].end_s = end;
    if (end > step_s) step_s = end;
    for (int32_t e = offset[u], e_end = offset[u + 1]; e < e_end; ++e) {
      const int32_t v = succ[e] >> 1;
      const double r = (succ[e] & 1) ? start : end;
      if (r > t[v].start_s) t[v].start_s = r;
      if (--indeg[v] == 0) queue[tail++] = v;
    }
  }
  if (tail != n) {
    int32_t stuck = 0;
    while (indeg[stuck] == 0) ++stuck;
    return internal_error("event engine: the program has a dependency cycle (" + std::to_string(n - tail) +
                          " ops never became ready, e.g. '" + program.op_name(ops[stuck]) +
                          "'); this is a program-builder bug");
  }
  tl.step_time_s = step_s;

  // Per stage: compute busy time and why the compute stream sat idle.
  const size_t num_stages = program.stage_ops.size();
  tl.compute_busy_s.assign(num_stages, 0.0);
  tl.idle.assign(num_stages, StageIdle{});
  for (size_t s = 0; s < num_stages; ++s) {
    double prev_end = 0, busy = 0;
    StageIdle& idle = tl.idle[s];
    for (int32_t id : program.stage_ops[s]) {
      const Op& op = ops[id];
      if (op.stream != Stream::kCompute) continue;
      busy += duration_s[id];
      const double gap = tl.ops[id].start_s - prev_end;
      prev_end = tl.ops[id].end_s;
      if (!(gap > 0)) continue;
      // What the stream waited for: until the last other dependency was
      // released, the pipeline (a transfer, or another stage's compute, e.g.
      // the gradient norm's barrier); after it, a DP collective still
      // running, if one was released last (another stage's reduce-scatter
      // under that barrier counts only for the part past that stage's
      // compute).
      double dp_s = -1, other_s = -1;
      for (int32_t d : program.deps_of(op)) {
        const double r = release_time(op, ops[d], tl.ops[d]);
        if (ops[d].kind == OpKind::kParamGather || ops[d].kind == OpKind::kGradSync) dp_s = std::max(dp_s, r);
        else other_s = std::max(other_s, r);
      }
      const double start = tl.ops[id].start_s, from = start - gap;
      const double dp_part = dp_s > other_s ? std::clamp(dp_s - std::max(from, other_s), 0.0, gap) : 0.0;
      idle.dp_comm_s += dp_part;
      idle.pipeline_s += gap - dp_part;  // recv/send, or another stage's compute
    }
    tl.compute_busy_s[s] = busy;
    idle.tail_s = step_s - prev_end;
  }
  return tl;
}

}  // namespace loom
