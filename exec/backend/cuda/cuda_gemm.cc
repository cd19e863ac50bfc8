// Row-major GEMMs on cuBLAS (column-major): C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS gets (B, A) with the same transposes.
#include <cublas_v2.h>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

Status gemm_ex(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, const void* B, cudaDataType ab_type, float beta, float* C, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return Status::ok();
  if (!handle) return invalid_argument("gemm: no cuBLAS handle");
  LOOM_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const int64_t lda_b = trans_b ? K : N;  // B stored (K,N) or (N,K), row-major
  const int64_t lda_a = trans_a ? M : K;  // A stored (M,K) or (K,M)
  LOOM_CUBLAS_CHECK(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 int(N), int(M), int(K), &alpha, B, ab_type, int(lda_b), A, ab_type, int(lda_a), &beta,
                                 C, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

}  // namespace

Status gemm_f32(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, const float* B, float beta, float* C, cudaStream_t stream) {
  return gemm_ex(handle, trans_a, trans_b, M, N, K, alpha, A, B, CUDA_R_32F, beta, C, stream);
}

Status gemm_bf16(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t* A, const uint16_t* B, float beta, float* C, cudaStream_t stream) {
  return gemm_ex(handle, trans_a, trans_b, M, N, K, alpha, A, B, CUDA_R_16BF, beta, C, stream);
}

Status gemm_fp16(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t* A, const uint16_t* B, float beta, float* C, cudaStream_t stream) {
  return gemm_ex(handle, trans_a, trans_b, M, N, K, alpha, A, B, CUDA_R_16F, beta, C, stream);
}

}  // namespace loom::cuda
