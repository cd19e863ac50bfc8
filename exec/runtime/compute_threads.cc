#include "exec/runtime/compute_threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace loom::exec {

std::string ComputeThreads::describe() const {
  std::string s = std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " per rank (" +
                  std::to_string(cores) + (cores == 1 ? " core" : " cores");
  s += std::string(bound ? " in this rank's CPU mask" : "") + ", " + std::to_string(local_ranks) +
       (local_ranks == 1 ? " rank" : " ranks") + " on this node";
  return s + ")";
}

Result<ComputeThreads> compute_threads(int requested, int local_ranks, int affinity_cores, int machine_cores) {
  ComputeThreads t;
  t.local_ranks = std::max(1, local_ranks);
  machine_cores = std::max(1, machine_cores);
  t.cores = affinity_cores > 0 ? std::min(affinity_cores, machine_cores) : machine_cores;
  // A mask narrower than the machine with room for every local rank's own
  // mask may be a launcher's per-rank binding: then the ranks do not share
  // these cores, and ranks x threads above them is no oversubscription. The
  // default divides them anyway (conservative: never oversubscribes).
  t.bound = t.cores < machine_cores && long(t.cores) * t.local_ranks <= machine_cores;
  const int share = std::max(1, t.cores / t.local_ranks);
  if (requested < 0)
    return invalid_argument("--threads " + std::to_string(requested) + ": give a positive count, or 0 for the default (" +
                            std::to_string(share) + " here)");
  const int limit = 4 * t.cores;
  if (requested > limit)
    return invalid_argument("--threads " + std::to_string(requested) + ": this process may run on " +
                            std::to_string(t.cores) + " cores, so at most " + std::to_string(limit) +
                            " threads make sense; the default (0) takes " + std::to_string(share) + " per rank");
  t.threads = requested > 0 ? requested : share;
  const long busy = long(t.threads) * t.local_ranks;
  if (busy > t.cores && !t.bound) {
    if (t.local_ranks > t.cores)
      t.warning = std::to_string(t.local_ranks) + " ranks on this node share " + std::to_string(t.cores) +
                  " cores: more ranks than cores, so every step will be several times slower than on a machine "
                  "with a core per rank (launch at most " + std::to_string(t.cores) + " ranks per node)";
    else
      t.warning = std::to_string(t.local_ranks) + " rank(s) on this node x " + std::to_string(t.threads) +
                  " threads on " + std::to_string(t.cores) +
                  " cores: the cores are oversubscribed and every step will be much slower; use --threads " +
                  std::to_string(share) + " (or 0)";
  }
  return t;
}

Result<ComputeThreads> compute_threads(int requested, int local_ranks) {
  int affinity = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  int machine = online > 0 ? int(online) : int(std::max(1u, std::thread::hardware_concurrency()));
  return compute_threads(requested, local_ranks, affinity, machine);
}

}  // namespace loom::exec
