// cuBLASLt GEMMs with a fused epilogue (cuda_gemm_lt.h).
//
// Row-major C(M,N) = op(A) op(B) is computed column-major as
// C^T(N,M) = op(B)^T op(A)^T, as cuda_gemm.cc does: cuBLASLt's A is our B
// and its B is our A. The epilogue's vectors run along cuBLASLt's rows,
// i.e. our N: the bias has N values, and the aux matrix (the
// pre-activation) has C's layout, leading dimension N.
//
// What cuBLASLt refuses (no algorithm, an attribute it rejects) comes back
// as kUnsupported with nothing enqueued, so the caller runs the separate
// ops; only a failure after the launch was accepted is an error.
#include "exec/backend/cuda/cuda_gemm_lt.h"

#include <cublasLt.h>

#include <atomic>
#include <map>
#include <tuple>

#include "exec/backend/cuda/cuda_check.h"

namespace loom::cuda {

namespace {

std::atomic<int64_t> g_executions{0};

// The largest power of two (up to 256) that divides the address: the
// alignment the heuristic may assume (its default is 256 bytes).
uint32_t alignment_of(const void* p) {
  if (!p) return 256;
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

cudaDataType_t operand_type(GemmInput in) {
  return in == GemmInput::kBf16 ? CUDA_R_16BF : in == GemmInput::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

// A cuBLASLt call's status: ok, or the refusal it is (nothing enqueued).
bool refused(cublasStatus_t e) { return e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_INVALID_VALUE; }

}  // namespace

int64_t lt_gemm_executions() { return g_executions.load(); }

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
  std::string init_refusal;  // why cuBLASLt cannot be used at all, once known
  // (input, trans_a, trans_b, M, N, K, epilogue, alignments of A, B, D, the
  // bias vector and the aux matrix): the heuristic's choice depends on each.
  using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int, uint32_t, uint32_t, uint32_t, uint32_t,
                         uint32_t>;
  std::map<Key, std::unique_ptr<LtPlan>> plans;

  Impl() {
    const cublasStatus_t e = cublasLtCreate(&handle);
    if (e != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      init_refusal = std::string("cublasLtCreate failed: ") + cublasGetStatusName(e);
    }
  }
  ~Impl() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
  }

  // Sets one attribute; false (and the refusal named) where cuBLASLt rejects it.
  static bool set(LtPlan* p, cublasLtMatmulDescAttributes_t attr, const void* v, size_t n, const char* what) {
    const cublasStatus_t e = cublasLtMatmulDescSetAttribute(p->op, attr, v, n);
    if (e == CUBLAS_STATUS_SUCCESS) return true;
    p->refusal = std::string("cuBLASLt refused ") + what + ": " + cublasGetStatusName(e);
    return false;
  }

  // The plan of this shape, made and cached on first use. The bias and aux
  // pointers are set before the heuristic, which reads their alignment
  // from them; a plan that cannot be made is cached as refused.
  Result<LtPlan*> plan(const LtGemmArgs& x, cublasLtEpilogue_t epilogue, const void* bias_ptr, const void* aux_ptr,
                       size_t workspace_bytes, const Key& key) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    auto p = std::make_unique<LtPlan>();
    LtPlan* raw = p.get();
    plans.emplace(key, std::move(p));
    raw->refusal = "cuBLASLt could not make this GEMM's descriptors";  // until the plan is made
    cublasStatus_t e = cublasLtMatmulDescCreate(&raw->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (e != CUBLAS_STATUS_SUCCESS) {
      raw->op = nullptr;
      raw->refusal = std::string("cublasLtMatmulDescCreate failed: ") + cublasGetStatusName(e);
      return raw;
    }
    const cublasOperation_t ta = x.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    const cublasOperation_t tb = x.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t bt = CUDA_R_32F;
    const int64_t ld = x.N;
    bool ok = set(raw, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta), "transa") &&
              set(raw, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb), "transb") &&
              set(raw, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue), "the epilogue");
    // The aux matrix keeps its default type (D's, fp32): cuBLASLt documents
    // setting it for fp8 only.
    if (ok && bias_ptr)
      ok = set(raw, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt), "the bias type") &&
           set(raw, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr), "the bias pointer");
    if (ok && aux_ptr)
      ok = set(raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld), "the aux leading dimension") &&
           set(raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr, sizeof(aux_ptr), "the aux pointer");
    if (!ok) return raw;
    // Column-major: our B is cuBLASLt's A, stored (K,N) row-major = N x K
    // (ld N), or transposed (N,K) = K x N (ld K); our A likewise.
    const cudaDataType_t ab = operand_type(x.input);
    const uint64_t M = uint64_t(x.M), N = uint64_t(x.N), K = uint64_t(x.K);
    LOOM_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&raw->a, ab, x.trans_b ? K : N, x.trans_b ? N : K, int64_t(x.trans_b ? K : N)));
    LOOM_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&raw->b, ab, x.trans_a ? M : K, x.trans_a ? K : M, int64_t(x.trans_a ? M : K)));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw->c, CUDA_R_32F, N, M, int64_t(N)));

    cublasLtMatmulPreference_t pref = nullptr;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = workspace_bytes;
    // cuBLASLt's A is our B (key slot 8), its B our A (slot 7).
    const uint32_t al_a = std::get<8>(key), al_b = std::get<7>(key), al_d = std::get<9>(key);
    e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a},
                           std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b},
                           std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_d},
                           std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d}})
      if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v));
    cublasLtMatmulHeuristicResult_t h{};
    int found = 0;
    if (e == CUBLAS_STATUS_SUCCESS)
      e = cublasLtMatmulAlgoGetHeuristic(handle, raw->op, raw->a, raw->b, raw->c, raw->c, pref, 1, &h, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS && !refused(e))
      return cublas_status(e, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    if (e != CUBLAS_STATUS_SUCCESS || found == 0) {
      raw->refusal = std::string("cuBLASLt has no algorithm for this GEMM and epilogue (") +
                     (e == CUBLAS_STATUS_SUCCESS ? "none found" : cublasGetStatusName(e)) + ")";
      return raw;
    }
    raw->algo = h.algo;
    raw->usable = true;
    return raw;
  }
};

LtGemm::LtGemm() : impl_(std::make_unique<Impl>()) {}
LtGemm::~LtGemm() = default;

Result<LtOutcome> LtGemm::run(const LtGemmArgs& x, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!impl_->init_refusal.empty()) {
    refusal_ = impl_->init_refusal;
    return LtOutcome::kUnsupported;
  }
  if (!x.bias && !x.gelu_out && !x.dgelu_pre) return invalid_argument("cuBLASLt epilogue GEMM without a bias or GELU");
  if (x.dgelu_pre && (x.bias || x.gelu_out))
    return invalid_argument("cuBLASLt dGELU epilogue with a bias or a GELU output: the backward has neither");
  if (x.dbias && !x.dgelu_pre) return invalid_argument("cuBLASLt bias gradient without dGELU (DGELU_BGRAD only)");
  // The bias and the aux matrix: 16-byte aligned (every epilogue kernel
  // handles that), the aux's leading dimension a multiple of 8; else the
  // separate ops.
  const bool aux = x.gelu_out || x.dgelu_pre;
  if ((x.bias && alignment_of(x.bias) < 16) || (x.dbias && alignment_of(x.dbias) < 16) || (x.gelu_out && (alignment_of(x.gelu_out) < 16 || alignment_of(x.C) < 16)) ||
      (x.dgelu_pre && (alignment_of(x.dgelu_pre) < 16 || alignment_of(x.C) < 16))) {
    refusal_ = "the bias or a GELU operand is not 16-byte aligned";
    return LtOutcome::kUnsupported;
  }
  if (aux && x.N % 8 != 0) {
    refusal_ = "GELU's rows are not a multiple of 8 values";
    return LtOutcome::kUnsupported;
  }
  const cublasLtEpilogue_t epilogue =
      x.dgelu_pre  ? (x.dbias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU)
      : x.gelu_out ? (x.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                   : CUBLASLT_EPILOGUE_BIAS;
  float* d = x.gelu_out ? x.gelu_out : x.C;  // D; with GELU, C gets the pre-activation (aux)
  // The bias vector: read (BIAS), or the bias gradient written (BGRAD: one
  // value per row of cuBLASLt's column-major D, i.e. per column of our C,
  // summed over our rows).
  const void* bias_ptr = x.dbias ? static_cast<const void*>(x.dbias) : static_cast<const void*>(x.bias);
  // The aux matrix: the pre-activation GELU writes, or the one dGELU reads.
  const void* aux_ptr = x.gelu_out ? static_cast<const void*>(x.C) : static_cast<const void*>(x.dgelu_pre);
  const Impl::Key key{int(x.input),          x.trans_a,           x.trans_b,      x.M, x.N, x.K, int(epilogue),
                      alignment_of(x.A),     alignment_of(x.B),   alignment_of(d), alignment_of(bias_ptr),
                      alignment_of(aux_ptr)};
  LOOM_ASSIGN_OR_RETURN(LtPlan * p, impl_->plan(x, epilogue, bias_ptr, aux_ptr, workspace_bytes, key));
  if (!p->usable) {
    refusal_ = p->refusal;
    return LtOutcome::kUnsupported;
  }
  // This call's pointers (the plan was made for ones of the same
  // alignment); the descriptor is read when the launch is enqueued.
  if (bias_ptr)
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  if (aux_ptr)
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr, sizeof(aux_ptr)));
  const float beta = 0.f;
  const cublasStatus_t e = cublasLtMatmul(impl_->handle, p->op, &x.alpha, x.B, p->a, x.A, p->b, &beta, d, p->c, d,
                                          p->c, &p->algo, workspace, workspace_bytes, stream);
  if (refused(e)) {  // refused at launch: nothing enqueued, never asked again
    p->usable = false;
    p->refusal = refusal_ = std::string("cublasLtMatmul refused the algorithm its heuristic gave (") +
                            cublasGetStatusName(e) + ")";
    return LtOutcome::kUnsupported;
  }
  LOOM_RETURN_IF_ERROR(cublas_status(e, "cublasLtMatmul", __FILE__, __LINE__));
  ++g_executions;
  return LtOutcome::kDone;
}

}  // namespace loom::cuda
