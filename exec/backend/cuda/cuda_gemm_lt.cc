// cuBLASLt GEMMs with a fused bias / GELU epilogue (cuda_gemm_lt.h).
//
// Row-major C(M,N) = op(A) op(B) is computed column-major as
// C^T(N,M) = op(B)^T op(A)^T, as cuda_gemm.cc does: cuBLASLt's A is our B
// and its B is our A. The epilogue's vectors run along cuBLASLt's rows,
// i.e. our N: the bias has N values, and the pre-activation (aux) has C's
// layout, leading dimension N.
#include "exec/backend/cuda/cuda_gemm_lt.h"

#include <cublasLt.h>

#include "exec/backend/cuda/cuda_check.h"

namespace loom::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// The largest power of two (up to 256) that divides the address: the
// alignment the heuristic may assume (its default is 256 bytes).
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

cudaDataType_t operand_type(GemmInput in) {
  return in == GemmInput::kBf16 ? CUDA_R_16BF : in == GemmInput::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

}  // namespace

// One shape's descriptors and algorithm, asked of the heuristic once.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
  std::string refusal;
  ~LtPlan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  Status init = Status::ok();
  // (input, trans_a, trans_b, M, N, K, epilogue, alignments of A, B, C)
  using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int, uint32_t, uint32_t, uint32_t>;
  std::map<Key, std::unique_ptr<LtPlan>> plans;

  Impl() {
    init = cublas_status(cublasLtCreate(&handle), "cublasLtCreate", __FILE__, __LINE__);
    if (init.is_ok()) init = cuda_status(cudaMalloc(&workspace, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)",
                                         __FILE__, __LINE__);
  }
  ~Impl() {
    plans.clear();
    if (workspace) cudaFree(workspace);
    if (handle) cublasLtDestroy(handle);
  }

  Result<LtPlan*> plan(const LtGemmArgs& x, cublasLtEpilogue_t epilogue, const Key& key) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    auto p = std::make_unique<LtPlan>();
    const cudaDataType_t ab = operand_type(x.input);
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = x.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const cublasOperation_t tb = x.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (x.bias) {
      const cudaDataType_t bt = CUDA_R_32F;
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (x.gelu_out) {
      const int64_t ld = x.N;
      const cudaDataType_t at = CUDA_R_32F;
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
      LOOM_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof(at)));
    }
    // Column-major: our B is cuBLASLt's A, stored (K,N) row-major = N x K
    // (ld N), or transposed (N,K) = K x N (ld K); our A likewise.
    const uint64_t M = uint64_t(x.M), N = uint64_t(x.N), K = uint64_t(x.K);
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, ab, x.trans_b ? K : N, x.trans_b ? N : K,
                                                 int64_t(x.trans_b ? K : N)));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, ab, x.trans_a ? M : K, x.trans_a ? K : M,
                                                 int64_t(x.trans_a ? M : K)));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, N, M, int64_t(N)));

    cublasLtMatmulPreference_t pref = nullptr;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    const uint32_t al_a = std::get<8>(key), al_b = std::get<7>(key), al_c = std::get<9>(key);
    Status st = cublas_status(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
        "cublasLtMatmulPreferenceSetAttribute", __FILE__, __LINE__);
    for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a},
                           std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b},
                           std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c},
                           std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_c}})
      if (st.is_ok())
        st = cublas_status(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)),
                           "cublasLtMatmulPreferenceSetAttribute", __FILE__, __LINE__);
    cublasLtMatmulHeuristicResult_t h{};
    int found = 0;
    if (st.is_ok()) {
      const cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(handle, p->op, p->a, p->b, p->c, p->c, pref, 1, &h, &found);
      if (e != CUBLAS_STATUS_SUCCESS && e != CUBLAS_STATUS_NOT_SUPPORTED)
        st = cublas_status(e, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
      else if (e == CUBLAS_STATUS_NOT_SUPPORTED || found == 0)
        p->refusal = "cuBLASLt has no algorithm for this GEMM and epilogue";
    }
    cublasLtMatmulPreferenceDestroy(pref);
    LOOM_RETURN_IF_ERROR(st);
    if (found > 0 && p->refusal.empty()) {
      p->algo = h.algo;
      p->usable = true;
    }
    LtPlan* raw = p.get();
    plans.emplace(key, std::move(p));
    return raw;
  }
};

LtGemm::LtGemm() : impl_(std::make_unique<Impl>()) {}
LtGemm::~LtGemm() = default;

Result<LtOutcome> LtGemm::run(const LtGemmArgs& x, cudaStream_t stream) {
  LOOM_RETURN_IF_ERROR(impl_->init);
  if (!x.bias && !x.gelu_out) return invalid_argument("cuBLASLt epilogue GEMM without a bias or GELU");
  // The bias and the pre-activation have no alignment preference: take the
  // 16 bytes every epilogue kernel handles (and the aux's leading dimension
  // a multiple of 8), else run the separate ops.
  if ((x.bias && alignment_of(x.bias) < 16) || (x.gelu_out && (alignment_of(x.gelu_out) < 16 || alignment_of(x.C) < 16 || x.N % 8 != 0))) {
    refusal_ = "the bias or the GELU output is not 16-byte aligned";
    return LtOutcome::kUnsupported;
  }
  const cublasLtEpilogue_t epilogue = x.gelu_out ? (x.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                                 : CUBLASLT_EPILOGUE_BIAS;
  float* d = x.gelu_out ? x.gelu_out : x.C;  // D; with GELU, C gets the pre-activation (aux)
  const Impl::Key key{int(x.input), x.trans_a, x.trans_b, x.M, x.N, x.K, int(epilogue), alignment_of(x.A),
                      alignment_of(x.B), alignment_of(d)};
  LOOM_ASSIGN_OR_RETURN(LtPlan * p, impl_->plan(x, epilogue, key));
  if (!p->usable) {
    refusal_ = p->refusal;
    return LtOutcome::kUnsupported;
  }
  if (x.bias)
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias, sizeof(x.bias)));
  if (x.gelu_out)
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.C, sizeof(x.C)));
  const float beta = 0.f;
  const cublasStatus_t e = cublasLtMatmul(impl_->handle, p->op, &x.alpha, x.B, p->a, x.A, p->b, &beta, d, p->c, d,
                                          p->c, &p->algo, impl_->workspace, kWorkspaceBytes, stream);
  if (e == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused at launch: nothing enqueued, never asked again
    p->usable = false;
    p->refusal = refusal_ = "cublasLtMatmul refused the algorithm its heuristic gave";
    return LtOutcome::kUnsupported;
  }
  LOOM_RETURN_IF_ERROR(cublas_status(e, "cublasLtMatmul", __FILE__, __LINE__));
  return LtOutcome::kDone;
}

}  // namespace loom::cuda
