#include "sim/dualpipev_time.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "core/program.h"
#include "core/status.h"

namespace loom {

namespace {

// One compute op of the replay: where it runs, what it waits for, and where
// its finish time goes.
struct ReplayOp {
  int32_t stage;
  int32_t chunk;
  int32_t kind;      // 0 forward, 1 backward, 2 weight gradients
  bool defers;       // a backward that leaves its weight gradients to a W
  bool remote;       // the op it waits for is on another stage (a transfer in between)
  int32_t dep = -1;  // the finish slot it waits for (-1: none but its own stage)
  int32_t slot = -1; // its own finish slot (-1: a W, which nothing waits for)
};

// The stages' orders (dualpipev_order) flattened into one sequence in which
// every op comes after what it waits for. The dependencies do not depend on
// the times, so one such sequence serves every replay of (pp, m): a single
// pass then gives each op's finish (max-plus), as the stage-by-stage
// fixed point would.
std::vector<ReplayOp> flatten(int pp, int64_t m) {
  const size_t P = size_t(pp), M = size_t(m);
  auto at = [&](int c, int s, int64_t i) { return int32_t((size_t(c) * P + size_t(s)) * M + size_t(i)); };
  std::vector<std::vector<ComputeStep>> order(P);
  for (int s = 0; s < pp; ++s) dualpipev_order(pp, s, m, order[size_t(s)]);
  // Whether the forward / backward of (chunk, stage, micro) has been placed.
  std::vector<char> fwd_done(2 * P * M, 0), bwd_done(2 * P * M, 0);
  std::vector<size_t> next(P, 0);
  std::vector<ReplayOp> out;
  out.reserve(5 * P * M);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      for (; next[size_t(s)] < order[size_t(s)].size(); ++next[size_t(s)]) {
        const ComputeStep& st = order[size_t(s)][next[size_t(s)]];
        const int c = st.chunk;
        const int64_t i = st.micro;
        ReplayOp op{s, c, st.wgrad ? 2 : st.fwd ? 0 : 1, st.defers_wgrad, true};
        // What it waits for: chunk 0 runs from stage 0 to the last, chunk 1
        // back; the last stage hands chunk 0's output to its own chunk 1,
        // and stage 0's chunk 1 (the head) turns to its backward in place.
        if (!st.wgrad) {
          const bool fwd = st.fwd;
          int32_t dep = -1;
          bool dep_bwd = false;
          if (fwd) {
            if (!(c == 0 && s == 0)) {
              if (c == 1 && s == pp - 1) dep = at(0, s, i), op.remote = false;
              else dep = c == 0 ? at(0, s - 1, i) : at(1, s + 1, i);
            }
          } else {
            dep_bwd = true;
            if (c == 1 && s == 0) dep = at(1, 0, i), dep_bwd = false, op.remote = false;
            else if (c == 0 && s == pp - 1) dep = at(1, s, i), op.remote = false;
            else dep = c == 1 ? at(1, s - 1, i) : at(0, s + 1, i);
          }
          if (dep >= 0 && !(dep_bwd ? bwd_done : fwd_done)[size_t(dep)]) break;
          op.dep = dep < 0 ? -1 : 2 * dep + (dep_bwd ? 1 : 0);
          op.slot = 2 * at(c, s, i) + (fwd ? 0 : 1);
          (fwd ? fwd_done : bwd_done)[size_t(at(c, s, i))] = 1;
        }
        out.push_back(op);
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s)
    LOOM_CHECK(next[size_t(s)] == order[size_t(s)].size(), "dualpipev_pipeline_s: the order deadlocked");
  return out;
}

// The flattened order of (pp, m), kept per thread (a search meets few shapes).
const std::vector<ReplayOp>& flattened(int pp, int64_t m) {
  thread_local std::map<std::pair<int, int64_t>, std::vector<ReplayOp>> memo;
  const auto key = std::make_pair(pp, m);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  if (memo.size() >= 64) memo.clear();
  return memo.emplace(key, flatten(pp, m)).first->second;
}

}  // namespace

double dualpipev_pipeline_s(int pp, int64_t m, std::span<const DualPipeVStageTimes> stages, double t_p2p) {
  LOOM_CHECK(pp >= 2 && m >= 2 * int64_t(pp) && int(stages.size()) == pp, "dualpipev_pipeline_s: bad arguments");
  const int64_t replayed = std::min<int64_t>(m, 4 * int64_t(pp));
  const std::vector<ReplayOp>& ops = flattened(pp, replayed);
  thread_local std::vector<double> done, clock;
  done.assign(4 * size_t(pp) * size_t(replayed), 0.0);
  clock.assign(size_t(pp), 0.0);
  for (const ReplayOp& op : ops) {
    const DualPipeVStageTimes& d = stages[size_t(op.stage)];
    double start = clock[size_t(op.stage)];
    if (op.dep >= 0) start = std::max(start, done[size_t(op.dep)] + (op.remote ? t_p2p : 0.0));
    const int c = op.chunk;
    const double dur = op.kind == 2 ? d.wgrad[c] : op.kind == 0 ? d.fwd[c] : d.bwd[c] - (op.defers ? d.wgrad[c] : 0.0);
    clock[size_t(op.stage)] = start + dur;
    if (op.slot >= 0) done[size_t(op.slot)] = start + dur;
  }
  double step = 0, rate = 0;
  for (int s = 0; s < pp; ++s) {
    step = std::max(step, clock[size_t(s)]);
    const DualPipeVStageTimes& d = stages[size_t(s)];
    rate = std::max(rate, d.fwd[0] + d.fwd[1] + d.bwd[0] + d.bwd[1]);
  }
  return step + double(m - replayed) * rate;
}

}  // namespace loom
