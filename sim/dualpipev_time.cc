#include "sim/dualpipev_time.h"

#include <algorithm>
#include <vector>

#include "core/program.h"
#include "core/status.h"

namespace loom {

double dualpipev_pipeline_s(int pp, int64_t m, std::span<const DualPipeVStageTimes> stages, double t_p2p) {
  LOOM_CHECK(pp >= 2 && m >= 2 * int64_t(pp) && int(stages.size()) == pp, "dualpipev_pipeline_s: bad arguments");
  const int64_t replayed = std::min<int64_t>(m, 4 * int64_t(pp));
  const size_t P = size_t(pp), M = size_t(replayed);
  // Finish time of each forward and backward by (chunk, stage, micro); < 0 until run.
  auto at = [&](int c, int s, int64_t i) { return (size_t(c) * P + size_t(s)) * M + size_t(i); };
  std::vector<double> fwd_done(2 * P * M, -1.0), bwd_done(2 * P * M, -1.0);
  std::vector<std::vector<ComputeStep>> order(P);
  for (int s = 0; s < pp; ++s) dualpipev_order(pp, s, replayed, order[size_t(s)]);
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0.0);
  // The op a step waits for on another stage (plus a transfer), or on its own.
  auto ready = [&](int s, const ComputeStep& st, double* t) {
    const int c = st.chunk;
    const int64_t i = st.micro;
    double dep = 0;
    bool remote = true;
    if (st.wgrad) return true;
    if (st.fwd) {
      if (c == 0 && s == 0) return true;
      if (c == 1 && s == pp - 1) dep = fwd_done[at(0, s, i)], remote = false;
      else dep = c == 0 ? fwd_done[at(0, s - 1, i)] : fwd_done[at(1, s + 1, i)];
    } else {
      if (c == 1 && s == 0) dep = fwd_done[at(1, 0, i)], remote = false;
      else if (c == 0 && s == pp - 1) dep = bwd_done[at(1, s, i)], remote = false;
      else dep = c == 1 ? bwd_done[at(1, s - 1, i)] : bwd_done[at(0, s + 1, i)];
    }
    if (dep < 0) return false;
    *t = std::max(*t, dep + (remote ? t_p2p : 0.0));
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      const DualPipeVStageTimes& d = stages[size_t(s)];
      for (; next[size_t(s)] < order[size_t(s)].size(); ++next[size_t(s)]) {
        const ComputeStep& st = order[size_t(s)][next[size_t(s)]];
        double start = clock[size_t(s)];
        if (!ready(s, st, &start)) break;
        const int c = st.chunk;
        const double dur = st.wgrad ? d.wgrad[c] : st.fwd ? d.fwd[c] : d.bwd[c] - (st.defers_wgrad ? d.wgrad[c] : 0.0);
        clock[size_t(s)] = start + dur;
        if (!st.wgrad) (st.fwd ? fwd_done : bwd_done)[at(c, s, st.micro)] = clock[size_t(s)];
        progress = true;
      }
    }
  }
  double step = 0, rate = 0;
  for (int s = 0; s < pp; ++s) {
    LOOM_CHECK(next[size_t(s)] == order[size_t(s)].size(), "dualpipev_pipeline_s: the order deadlocked");
    step = std::max(step, clock[size_t(s)]);
    const DualPipeVStageTimes& d = stages[size_t(s)];
    rate = std::max(rate, d.fwd[0] + d.fwd[1] + d.bwd[0] + d.bwd[1]);
  }
  return step + double(m - replayed) * rate;
}

}  // namespace loom
