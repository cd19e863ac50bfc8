// Error checks for the CUDA backend: every CUDA runtime, cuBLAS and NCCL call
// goes through one of these; a failure becomes a Status naming the call, the
// file and line and the library's own message (never an abort or a hang).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace loom::cuda {

inline Status cuda_status(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return Status::ok();
  return internal_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                        cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status cublas_status(cublasStatus_t e, const char* what, const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internal_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                        cublasGetStatusName(e) + " (" + cublasGetStatusString(e) + ")");
}

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(call) LOOM_RETURN_IF_ERROR(::loom::cuda::cuda_status((call), #call, __FILE__, __LINE__))
#define LOOM_CUBLAS_CHECK(call) LOOM_RETURN_IF_ERROR(::loom::cuda::cublas_status((call), #call, __FILE__, __LINE__))
// After a kernel launch: the launch error (bad configuration), not the
// kernel's completion.
#define LOOM_CUDA_CHECK_LAUNCH() LOOM_CUDA_CHECK(cudaGetLastError())
