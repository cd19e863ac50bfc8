#include <cstdio>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: clear the sticky error
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp p{};
  if (device < 0 || device >= device_count() || cudaGetDeviceProperties(&p, device) != cudaSuccess) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.0f GB, %d SMs)", p.name, p.major, p.minor,
                double(p.totalGlobalMem) / 1e9, p.multiProcessorCount);
  return buf;
}

int device_sm_arch(int device) {
  int major = 0, minor = 0;
  if (device < 0 || device >= device_count() ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 10 * major + minor;
}

size_t device_l2_bytes(int device) {
  int l2 = 0;
  if (device < 0 || device >= device_count() ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return size_t(l2);
}

bool device_memory(int device, size_t* free_bytes, size_t* total_bytes) {
  if (device < 0 || device >= device_count()) return false;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const bool ok = cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  cudaSetDevice(previous);
  return ok;
}

std::string runtime_versions() {
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int runtime = 0, driver = 0;
  std::string out = "CUDA runtime ";
  out += cudaRuntimeGetVersion(&runtime) == cudaSuccess ? ver(runtime) : "unknown";
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    (void)cudaGetLastError();
    out += ", no NVIDIA driver";
  } else {
    out += ", driver supports CUDA " + ver(driver);
  }
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    out += ", cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  return out;
}

}  // namespace loom::cuda
