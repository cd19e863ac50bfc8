// Measuring this machine into a hardware profile: `loom calibrate`, and
// `loom plan --hw cpu-local` on first use (cli/cpu_local.h).
#pragma once

#include <string>

#include "core/status.h"
#include "exec/backend/kernel_bench.h"
#include "exec/comm/communicator.h"

namespace loom::cli {

struct CalibArgs {
  std::string out;
  std::string name = "cpu-calibrated";
  int threads = 1;
  bool quick = false;
  std::string backend = "cpu";
  bool progress = false;  // one line on stderr (rank 0 on a terminal): stage, measurements, ETA
};

// Every rank runs the sweeps at once; rank 0 gets the profile's JSON text
// (the others an empty string). `summary` prints the measured figures;
// `worst_spread` gets the worst interquartile spread of repeated
// measurements (relative to their median: the machine's noise).
Result<std::string> measure_profile_json(exec::Communicator& w, exec::KernelBench& bench, const CalibArgs& a,
                                         bool summary, double* worst_spread = nullptr);

}  // namespace loom::cli
