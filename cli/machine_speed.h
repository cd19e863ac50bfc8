// The machine's speed at one moment: a fixed reference workload (one GEMM
// and one STREAM triad, through the CPU backend's own kernels on one
// thread), timed for a fraction of a second. `loom regress run` times it
// just before and just after each case, so that `loom regress check` can
// compare a case's throughput with the baseline's at the same machine speed:
// a shared VM's speed moves by 15-25% over minutes, which a raw tokens/s
// comparison reads as a code regression.
#pragma once

#include "core/status.h"

namespace loom::cli {

// Reference runs per second (median over the samples of `seconds`).
Result<double> reference_speed(double seconds);

}  // namespace loom::cli
