// A host's CPU profile shared out among the ranks launched on it.
#include "core/cpu_ranks.h"

#include <algorithm>
#include <cstdio>

namespace loom {

Result<HwProfile> cpu_local_for_ranks(const HwProfile& host, int cores, int ranks, const NodeSpec& shm_node) {
  if (cores < 1 || ranks < 1)
    return invalid_argument("cpu-local: " + std::to_string(ranks) + " ranks on " + std::to_string(cores) +
                            " cores: both must be at least 1");
  // `loom execute`'s default: max(1, cores / ranks) threads per rank
  // (exec/runtime/compute_threads.h); with more ranks than cores, each rank
  // runs one thread on cores / ranks of a core.
  const int threads = std::max(1, cores / ranks);
  const double rank_cores = std::min(double(threads), double(cores) / ranks);
  const double share = rank_cores / cores;
  HwProfile p = host;
  p.name = "cpu-local";
  AcceleratorSpec& a = p.accel;
  a.peak_fp32_flops *= share;
  a.peak_bf16_flops *= share;
  a.peak_fp16_flops *= share;
  // The ranks stream at once through the host's memory: each gets its share.
  a.memory_bw_bytes_per_s /= ranks;
  a.memory_bytes /= ranks;
  a.cpu_threads = rank_cores;
  // Measured per logit on the whole host: a rank has `share` of it.
  a.xent_fwd_ns_per_logit /= share;
  a.xent_bwd_ns_per_logit /= share;
  char per[160];
  std::snprintf(per, sizeof per, "; as %d rank(s) of %d thread(s): %.3g of the host's compute, 1/%d of its memory "
                "and bandwidth per rank", ranks, threads, share, ranks);
  a.source = host.accel.source + per;
  p.node = shm_node;
  p.node.devices_per_node = ranks;
  p.node.source = "not measured by the first-use measurement (one process): the shipped cpu-local.json's "
                  "shared-memory figures; `mpirun -np N loom calibrate` measures the collectives. " + shm_node.source;
  p.description = "This machine as " + std::to_string(ranks) + " CPU rank(s) of " + std::to_string(threads) +
                  " thread(s): compute and memory measured by `loom plan --hw cpu-local` on first use (the sweeps "
                  "of `loom calibrate --quick`, 1 rank x " + std::to_string(cores) + " threads), shared out among the "
                  "ranks.";
  return p;
}

}  // namespace loom
