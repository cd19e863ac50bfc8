// OpenMP helpers shared by the CPU kernels (private to exec/backend/).
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#define LOOM_PRAGMA_(x) _Pragma(#x)
// Parallel only when the loop has enough work to pay for waking the team.
#define LOOM_OMP_FOR_IF(work) \
  LOOM_PRAGMA_(omp parallel for schedule(static) if ((work) >= ::loom::cpu::kMinParallelWork))
#else
#define LOOM_OMP_FOR_IF(work)
#endif

namespace loom::cpu {

// Elements of work below which a loop runs on the calling thread: waking an
// OpenMP team costs microseconds (milliseconds on a loaded machine).
inline constexpr int64_t kMinParallelWork = int64_t{1} << 15;

}  // namespace loom::cpu
