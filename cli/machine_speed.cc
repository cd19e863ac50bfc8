#include "cli/machine_speed.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "exec/runtime/devices.h"

namespace loom::cli {

Result<double> reference_speed(double seconds) {
  LOOM_ASSIGN_OR_RETURN(auto bench, exec::make_kernel_bench("cpu", 1));
  // 384^3 (113 MFLOP) and 2 Mi floats (24 MB, beyond the caches): about 1 ms
  // each here, one compute-bound and one memory-bound.
  exec::KernelBench::GemmRuns gemm = bench->gemm(384, 384, 384, bench->cold_set_bytes());
  exec::KernelBench::Run triad = bench->triad(size_t{1} << 21);
  using Clock = std::chrono::steady_clock;
  gemm.forward();  // warm-up: first touch of the buffers
  triad();
  std::vector<double> samples;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    gemm.forward();
    triad();
    bench->synchronize();
    samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds || samples.size() < 5);
  LOOM_RETURN_IF_ERROR(bench->status());
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return 1.0 / samples[samples.size() / 2];
}

}  // namespace loom::cli
