#include "exec/runtime/devices.h"

#include <algorithm>

#include "exec/backend/cpu_ops.h"

#ifdef LOOM_HAVE_CUDA
#include "exec/backend/cuda/cuda_backend.h"
#include "exec/backend/cuda/cuda_ops.h"
#endif
#ifdef LOOM_HAVE_NCCL
#include "exec/comm/nccl_communicator.h"
#endif

namespace loom::exec {

Result<Devices> open_devices(Communicator& world, const DeviceRequest& a, Precision plan_precision) {
  Devices d;
  if (a.backend == "cpu") {
    if (!a.precision.empty() && a.precision != "fp32")
      return invalid_argument("--precision " + a.precision + ": the CPU backend computes in fp32; use --backend cuda");
    d.description = "cpu (fp32)";
    return d;
  }
  if (a.backend != "cuda") return invalid_argument("--backend " + a.backend + ": expected cpu or cuda");
#ifdef LOOM_HAVE_CUDA
  Precision precision = plan_precision;
  if (!a.precision.empty()) {
    LOOM_ASSIGN_OR_RETURN(precision, parse_precision(a.precision));
  }
  if (precision == Precision::kFp8)
    return unsupported("the CUDA backend trains in bf16, fp16 (with dynamic loss scaling) or fp32, the plan asks for "
                       "fp8; pass --precision bf16");
  const int devices = cuda::device_count();
  if (devices == 0) return unsupported("--backend cuda: no NVIDIA GPU is visible on this rank; use --backend cpu");
  const LaunchEnv env = detect_launch_env();
  // NCCL refuses two ranks on one GPU (it would fail later as "duplicate GPU").
  if (env.local_world > devices)
    return invalid_argument("--backend cuda: " + std::to_string(env.local_world) + " ranks on this node but " +
                            std::to_string(devices) + " GPU(s) visible; NCCL needs one GPU per rank: launch at most " +
                            std::to_string(devices) + " ranks per node (mpirun -npernode " + std::to_string(devices) +
                            ")");
  if (a.device >= devices)
    return invalid_argument("--device " + std::to_string(a.device) + ": only " + std::to_string(devices) +
                            " GPU(s) visible");
  const int device = a.device >= 0 ? a.device : env.local_rank % devices;
  LOOM_ASSIGN_OR_RETURN(d.backend, make_cuda_backend(device, precision));
#ifdef LOOM_HAVE_NCCL
  NcclOptions no;
  no.timeout_s = a.timeout_s;
  no.device = device;
  no.compute_stream = d.backend->native_stream();
  LOOM_ASSIGN_OR_RETURN(d.world, nccl_world(&world, env.local_rank, no));
#else
  return unsupported("--backend cuda needs the NCCL communicator, which this build lacks (NCCL and MPI are found "
                     "next to the CUDA toolkit at configure time)");
#endif
  d.description = cuda::device_description(device) + " (" + precision_name(precision) + ")";
  d.precision = precision;
  d.cuda_device = device;
  return d;
#else
  (void)world;
  (void)plan_precision;
  return unsupported("--backend cuda: this loom was built without CUDA; rebuild with -DLOOM_WITH_CUDA=ON");
#endif
}

bool device_memory(const Devices& d, size_t* free_bytes, size_t* total_bytes) {
#ifdef LOOM_HAVE_CUDA
  if (d.cuda_device >= 0) return cuda::device_memory(d.cuda_device, free_bytes, total_bytes);
#endif
  (void)d;
  (void)free_bytes;
  (void)total_bytes;
  return false;
}

Result<std::unique_ptr<KernelBench>> make_kernel_bench(const std::string& backend, int threads) {
  if (backend == "cpu") {
    cpu::set_num_threads(std::max(1, threads));
    KernelBenchDevice dev;
    dev.cold_set_bytes = host_cold_set_bytes();
    return make_table_kernel_bench(make_cpu_backend(), dev);
  }
  if (backend == "cuda") {
#ifdef LOOM_HAVE_CUDA
    if (cuda::device_count() == 0)
      return unsupported("--backend cuda: no CUDA device is visible (no NVIDIA driver or GPU on this machine); "
                         "calibrate CPU ranks with --backend cpu");
    // The training precision's table (bf16 GEMMs, as the executor runs them)
    // and an fp32 one for the CUDA-core peak.
    LOOM_ASSIGN_OR_RETURN(auto bf16, make_cuda_backend(0, Precision::kBf16));
    LOOM_ASSIGN_OR_RETURN(auto fp32, make_cuda_backend(0, Precision::kFp32));
    KernelBenchDevice dev;
    dev.name = "cuda:0 " + cuda::device_description(0);
    dev.sm_arch = cuda::device_sm_arch(0);
    size_t free_b = 0, total_b = 0;
    if (cuda::device_memory(0, &free_b, &total_b)) dev.memory_bytes = double(total_b);
    dev.cold_set_bytes = std::max<size_t>(4 * cuda::device_l2_bytes(0), 64u << 20);
    return make_table_kernel_bench(std::move(bf16), dev, std::move(fp32));
#else
    return unsupported("--backend cuda: this build has no CUDA toolkit; rebuild where nvcc is found, or calibrate CPU "
                       "ranks with --backend cpu");
#endif
  }
  return invalid_argument("--backend '" + backend + "' is not one of: cpu, cuda");
}

std::string accelerator_report() {
#ifdef LOOM_HAVE_CUDA
  const int gpus = cuda::device_count();
  std::string out = cuda::runtime_versions();
#ifdef LOOM_HAVE_NCCL
  out += ", NCCL " + nccl_version();
#endif
  out += "\n" + std::to_string(gpus) + " GPU(s)" + (gpus > 0 ? ":" : "\n");
  for (int i = 0; i < gpus; ++i) out += " " + std::to_string(i) + " " + cuda::device_description(i) + "\n";
  return out;
#else
  return "built without CUDA (CPU backend only)\n";
#endif
}

}  // namespace loom::exec
