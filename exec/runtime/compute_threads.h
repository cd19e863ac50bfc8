// How many compute threads a rank uses: `loom execute --threads`, or by
// default this rank's share of the cores it may run on.
//
// The cores are those of the process's CPU affinity mask (taskset, cgroups,
// a launcher's binding); the default is cores / local ranks (at least 1), so
// the ranks of a node never oversubscribe it. When the mask is narrower than
// the machine with room for each local rank's own (a launcher's per-rank
// binding, say), ranks x threads above it draws no warning.
// An explicit request above 4 x the cores is refused (it only slows the run
// down, and libgomp fails or crashes on tens of thousands of threads);
// ranks x threads above the cores gives a warning.
#pragma once

#include <string>

#include "core/status.h"

namespace loom::exec {

struct ComputeThreads {
  int threads = 1;
  int cores = 1;          // usable by this process
  int local_ranks = 1;
  bool bound = false;     // the mask may be this rank's own (see above)
  std::string warning;    // "" unless oversubscribed
  std::string describe() const;  // "2 threads per rank (2 cores, 1 rank on this node)"
};

// `requested` 0 = the default. `affinity_cores` / `machine_cores`: see above.
Result<ComputeThreads> compute_threads(int requested, int local_ranks, int affinity_cores, int machine_cores);
// The same with this process's affinity mask and the machine's core count.
Result<ComputeThreads> compute_threads(int requested, int local_ranks);

}  // namespace loom::exec
