#include <cstdio>
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

}  // namespace loom::cuda
