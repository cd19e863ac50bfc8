#include "cli/cpu_local.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli/calibrate.h"
#include "cli/regress.h"
#include "core/cpu_ranks.h"
#include "core/json_util.h"
#include "core/output_file.h"
#include "core/resources.h"
#include "exec/backend/backend_error.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/compute_threads.h"
#include "exec/runtime/devices.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

// A measurement whose repeated samples spread more than this (the worst
// interquartile range over the median of any measurement) was taken on a
// busy machine: measured once more, and never cached if still so. A quiet
// 2-core VM shows about 1 (a few short kernels and collectives vary that
// much); one measured while tests ran beside it showed 20.
// LOOM_CPU_LOCAL_MAX_SPREAD overrides it (a fraction; tests pin the outcome).
double noisy_spread() {
  const char* e = std::getenv("LOOM_CPU_LOCAL_MAX_SPREAD");
  if (e && *e) {
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    if (end && *end == 0 && v >= 0) return v;
  }
  return 2.0;
}

Result<HwProfile> measure_host(int cores, const std::string& path) {
  std::fprintf(stderr,
               "loom plan: --hw cpu-local: measuring this machine once (%d cores, the sweeps of `loom calibrate "
               "--quick`, about 10 s); cached in %s\n",
               cores, path.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  CalibArgs a;
  a.name = "cpu-local";
  a.threads = cores;
  a.quick = true;
  a.progress = isatty(fileno(stderr));
  std::string text;
  double spread = 0;
  const double kNoisySpread = noisy_spread();
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<exec::KernelBench> bench, exec::make_kernel_bench("cpu", cores));
      std::unique_ptr<exec::Communicator> self = exec::make_self_communicator("cpu-local");
      LOOM_ASSIGN_OR_RETURN(text, measure_profile_json(*self, *bench, a, false, &spread));
    } catch (const exec::BackendError& e) {
      return e.status().with_context("measuring this machine for --hw cpu-local");
    }
    if (spread <= kNoisySpread) break;
    if (attempt == 0)
      std::fprintf(stderr, "loom plan: --hw cpu-local: the machine was busy (repeated measurements spread %.0f%%); "
                   "measuring again\n", 100 * spread);
  }
  LOOM_ASSIGN_OR_RETURN(HwProfile host, parse_hw_profile(text, "cpu-local"));
  if (spread > kNoisySpread) {
    std::fprintf(stderr, "loom plan: warning: --hw cpu-local: this machine was too busy to measure reliably "
                 "(repeated measurements spread %.0f%%): the profile serves this plan only and is not cached; plan "
                 "again when the machine is quieter, or measure it with `loom calibrate`\n", 100 * spread);
    return host;
  }
  // Written whole under a temporary name, then renamed: two plans measuring
  // at once each leave a complete file.
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Status st = ec ? io_error(ec.message()) : write_text_file(tmp, text);
  if (st.is_ok()) {
    fs::rename(tmp, path, ec);
    if (ec) st = io_error(ec.message());
  }
  if (!st.is_ok()) {
    fs::remove(tmp, ec);
    std::fprintf(stderr, "loom plan: warning: could not cache the measurement in %s (%s); the next plan measures "
                 "again (set LOOM_CACHE_DIR to a writable folder)\n", path.c_str(), st.message().c_str());
  }
  std::fprintf(stderr, "loom plan: --hw cpu-local: measured in %.1f s: GEMM peak %.1f GFLOP/s, memory %.1f GB/s on "
               "the whole host\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               host.accel.peak_fp32_flops / 1e9, host.accel.memory_bw_bytes_per_s / 1e9);
  return host;
}

}  // namespace

Result<HwProfile> measured_cpu_local(int ranks) {
  LOOM_ASSIGN_OR_RETURN(exec::ComputeThreads ct, exec::compute_threads(0, 1));
  const int cores = std::max(1, ct.cores);
  LOOM_ASSIGN_OR_RETURN(HwProfile shipped, load_hw_profile("cpu-local"));
  // Keyed by processor, cores, memory and the cores this process may use.
  const std::string path =
      user_cache_dir() + "/hw/cpu-local-v2-" + this_machine().key + "-" + std::to_string(cores) + "t.json";
  Result<HwProfile> host = not_found(path);
  if (fs::exists(path)) {
    Result<std::string> text = read_text_file(path);
    if (text.is_ok()) host = parse_hw_profile(*text, "cpu-local");
    if (!host.is_ok())
      std::fprintf(stderr, "loom plan: --hw cpu-local: the cached measurement %s is unreadable (%s); measuring again\n",
                   path.c_str(), (text.is_ok() ? host.status() : text.status()).message().c_str());
  }
  if (!host.is_ok()) host = measure_host(cores, path);
  if (!host.is_ok()) return host.status();
  return cpu_local_for_ranks(*host, cores, ranks, shipped.node);
}

}  // namespace loom::cli
