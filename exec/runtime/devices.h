// The backend and communicator registry: what `loom execute`, `loom
// calibrate` and `loom --version` ask for by name ("cpu", "cuda"), answered
// with a Status where a build or a node lacks it, so no caller carries
// #ifdef blocks for the optional CUDA/NCCL parts (only devices.cc does).
#pragma once

#include <memory>
#include <string>

#include "core/layout.h"
#include "core/status.h"
#include "exec/backend/compute_backend.h"
#include "exec/backend/kernel_bench.h"
#include "exec/comm/communicator.h"

namespace loom::exec {

struct DeviceRequest {
  std::string backend = "cpu";  // cpu | cuda
  std::string precision;        // "" = fp32 on the CPU, the plan's on CUDA
  int device = -1;              // CUDA device; -1 = the local rank modulo the visible GPUs
  double timeout_s = 300;       // NCCL watchdog (0 = none)
};

// The compute backend and the communicator that moves its buffers: the CPU
// backend over `world` itself (both null: the trainer makes its own), or a
// CUDA device with an NCCL communicator over the same ranks, bootstrapped
// through `world`.
struct Devices {
  std::unique_ptr<ComputeBackend> backend;
  std::unique_ptr<Communicator> world;
  std::string description;                 // "cpu (fp32)", "NVIDIA H200 ... (bf16)"
  Precision precision = Precision::kFp32;  // what the math really runs in (MFU's peak)
  int cuda_device = -1;                    // -1 on the CPU
};

// Errors name the fix: an unknown backend, a precision the backend cannot
// run, no GPU, more ranks than GPUs on a node, a build without CUDA or NCCL.
Result<Devices> open_devices(Communicator& world, const DeviceRequest& request, Precision plan_precision);

// Free and total bytes of an opened CUDA device; false on the CPU or when the
// runtime cannot tell.
bool device_memory(const Devices& devices, size_t* free_bytes, size_t* total_bytes);

// The kernels `loom calibrate` measures: "cpu" on `threads` threads, or
// "cuda" on device 0.
Result<std::unique_ptr<KernelBench>> make_kernel_bench(const std::string& backend, int threads);

// `loom --version`'s accelerator lines: CUDA runtime and driver, NCCL, the
// visible GPUs; or that this build has none.
std::string accelerator_report();

}  // namespace loom::exec
