// `loom plan --hw cpu-local`: this machine as CPU ranks, measured on first use.
//
// The shipped hwprofiles/cpu-local.json cannot know the machine it runs on
// (its compute figures were 3x and its ranks' cores 4x off on the 2-core
// development VM), so the name means a measurement instead: one quick
// calibration of the whole host (1 rank x all its cores, the sweeps of
// `loom calibrate --quick`), cached per machine under the cache directory
// ($LOOM_CACHE_DIR, else ~/.cache/loom, as the data cache), and divided among
// the plan's ranks as `loom execute` divides the cores by default. The
// collectives between ranks are not measured here: they keep the shipped
// file's shared-memory figures, and the profile says so; `mpirun -np N loom
// calibrate` measures everything.
#pragma once

#include <string>

#include "core/cpu_ranks.h"
#include "core/hw_profile.h"
#include "core/status.h"

namespace loom::cli {

// The measured host profile for this machine: from the cache, else measured
// now (a line on stderr says so, with the cache path and the time it took).
Result<HwProfile> measured_cpu_local(int ranks);

}  // namespace loom::cli
