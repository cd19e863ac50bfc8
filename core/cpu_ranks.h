// A host's CPU profile (1 rank running on all its cores) as `ranks` CPU
// ranks launched on that host: `loom plan --hw cpu-local` (cli/cpu_local.h).
#pragma once

#include "core/hw_profile.h"
#include "core/status.h"

namespace loom {

// The host profile (1 rank x `cores` threads) as `ranks` ranks on this host,
// each with the executor's default threads, max(1, cores / ranks):
// compute, memory capacity and bandwidth are shared out; the node section is
// `shm_node`'s with devices_per_node = ranks. Pure (tested without measuring).
Result<HwProfile> cpu_local_for_ranks(const HwProfile& host, int cores, int ranks, const NodeSpec& shm_node);

}  // namespace loom
