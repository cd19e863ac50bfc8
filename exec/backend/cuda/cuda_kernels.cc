#include "exec/backend/cuda/cuda_kernels.h"

#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_gemm_lt.h"
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/backend/cuda/cudnn_sdpa.h"
#include "exec/backend/memory_ledger.h"

namespace loom::exec {

namespace {

// LOOM_CUDA_ATTENTION: which attention the table runs.
//   gemm  (default) cuBLAS strided-batched GEMMs over a slice of heads' scores
//   cudnn cuDNN's fused flash attention (cudnn_sdpa.h) in bf16 / fp16 runs;
//         fp32 runs, a node without cuDNN or a shape no engine takes fall
//         back to gemm with a one-line notice
//   fused the one-block-per-row reference kernel (comparisons; much slower)
enum class AttentionPath { kGemm, kCudnn, kFused };

Result<AttentionPath> attention_path_from_env() {
  const char* e = std::getenv("LOOM_CUDA_ATTENTION");
  const std::string v = e ? e : "";
  if (v.empty() || v == "gemm") return AttentionPath::kGemm;
  if (v == "cudnn") return AttentionPath::kCudnn;
  if (v == "fused") return AttentionPath::kFused;
  return invalid_argument("LOOM_CUDA_ATTENTION='" + v + "' is not one of gemm (the default), cudnn, fused");
}

// LOOM_GEMM_EPILOGUE: how a GEMM's bias / GELU epilogue (kernel_ops.h Gemm)
// runs. separate (default): the GEMM, then the add_bias and gelu_forward
// kernels; cublaslt: fused into one cuBLASLt call (cuda_gemm_lt.h), shapes
// it refuses falling back to separate with a one-line notice.
Result<bool> epilogue_lt_from_env() {
  const char* e = std::getenv("LOOM_GEMM_EPILOGUE");
  const std::string v = e ? e : "";
  if (v.empty() || v == "separate") return false;
  if (v == "cublaslt") return true;
  return invalid_argument("LOOM_GEMM_EPILOGUE='" + v + "' is not one of separate (the default), cublaslt");
}

class CudaKernels final : public Kernels {
 public:
  CudaKernels(ComputeBackend* be, cudaStream_t stream, cublasHandle_t handle, Precision p, AttentionPath path,
              bool epilogue_lt)
      : be_(be), s_(stream), blas_(handle), precision_(p), path_(path), epilogue_lt_(epilogue_lt) {}
  ~CudaKernels() override {
    cudaStreamSynchronize(s_);
    if (host_sum_) cudaFreeHost(host_sum_);
    cublasDestroy(blas_);
  }

  Precision precision() const override { return precision_; }
  Status status() override {
    if (status_.is_ok()) note(cuda::cuda_status(cudaPeekAtLastError(), "a CUDA kernel", __FILE__, __LINE__));
    return status_;
  }
  void set_weights(const float* params, int64_t n) override {
    weights_ = params;
    weights_n_ = n;
    weights_bf16_ = DeviceBuffer();
    stale_.assign(1, {0, n});
  }
  void weights_changed(const float* begin, int64_t n) override {
    if (!weights_ || begin < weights_ || begin + n > weights_ + weights_n_) return;
    const std::pair<int64_t, int64_t> r{begin - weights_, begin - weights_ + n};
    if (std::find(stale_.begin(), stale_.end(), r) == stale_.end()) stale_.push_back(r);
  }

  void gemm(const Gemm& a) override {
    const auto& [ta, tb, M, N, K, alpha, A, B, beta, C, A16, B16, bias, gelu_out, dgelu_pre, dbias] = a;
    if (dgelu_pre && (beta != 0.f || bias || gelu_out))
      return note(invalid_argument("Gemm::dgelu_pre needs beta 0 and neither bias nor gelu_out (kernel_ops.h)"));
    if (dbias && !dgelu_pre) return note(invalid_argument("Gemm::dbias needs dgelu_pre (kernel_ops.h)"));
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // C = beta C, as the CPU GEMM does (cuBLAS rejects K = 0 leading dimensions)
      if (beta == 0.f) be_->fill_zero(C, size_t(M * N) * sizeof(float));
      else if (beta != 1.f) note(cuda::scale_inplace(C, beta, M * N, s_));
      return epilogue_ops(a);
    }
    if (input_ == cuda::GemmInput::kF32 && (A16 || B16))
      return note(internal_error("a GEMM with a 16-bit operand on the fp32 kernel table"));
    const void* a_op = A;
    const void* b_op = B;
    if (input_ != cuda::GemmInput::kF32) {
      a_op = A16 ? A16 : half_of(A, M * K, 0);
      b_op = B16 ? B16 : half_of(B, K * N, 1);
      if (!a_op || !b_op) return;
    }
    if ((bias || gelu_out || dgelu_pre) && beta == 0.f && fused_epilogue(a, a_op, b_op)) return;
    if (input_ == cuda::GemmInput::kF32)
      note(cuda::gemm_f32(blas_, ta, tb, M, N, K, alpha, A, B, beta, C, s_));
    else if (input_ == cuda::GemmInput::kBf16)
      note(cuda::gemm_bf16(blas_, ta, tb, M, N, K, alpha, static_cast<const uint16_t*>(a_op),
                           static_cast<const uint16_t*>(b_op), beta, C, s_));
    else
      note(cuda::gemm_fp16(blas_, ta, tb, M, N, K, alpha, static_cast<const uint16_t*>(a_op),
                           static_cast<const uint16_t*>(b_op), beta, C, s_));
    epilogue_ops(a);
  }
  // The epilogue as the separate ops it replaces (add_bias, gelu_forward,
  // gelu_backward in place: elementwise, bias_backward).
  void epilogue_ops(const Gemm& a) {
    if (a.bias) note(cuda::add_bias(a.C, a.bias, a.M, a.N, s_));
    if (a.gelu_out) note(cuda::gelu_forward(a.C, a.gelu_out, a.M * a.N, s_));
    if (a.dgelu_pre) note(cuda::gelu_backward(a.C, a.dgelu_pre, a.C, a.M * a.N, s_));
    if (a.dbias) note(cuda::bias_backward(a.C, a.dbias, a.M, a.N, s_));
  }
  // LOOM_GEMM_EPILOGUE=cublaslt: the GEMM and its epilogue as one cuBLASLt
  // call. False (nothing enqueued) where the switch is off or cuBLASLt
  // refuses the shape; each refused shape prints one line (the first eight).
  bool fused_epilogue(const Gemm& g, const void* a_op, const void* b_op) {
    if (!epilogue_lt_) return false;
    if (!lt_) lt_ = std::make_unique<cuda::LtGemm>();
    {
      // The workspace, from the backend's allocator (its out-of-memory
      // retry; the ledger sees it).
      MemoryClassScope workspace(MemoryClass::kWorkspace);
      if (lt_workspace_.empty()) lt_workspace_ = DeviceBuffer(be_, cuda::kLtWorkspaceBytes);
    }
    // cuBLASLt writes the bias gradient (DGELU_BGRAD); Gemm::dbias adds it:
    // into a buffer of its own, then added.
    if (g.dbias && lt_dbias_.bytes() < size_t(g.N) * sizeof(float)) {
      MemoryClassScope workspace(MemoryClass::kWorkspace);
      lt_dbias_ = DeviceBuffer(be_, size_t(g.N) * sizeof(float));
    }
    const cuda::LtGemmArgs x{input_, g.trans_a, g.trans_b, g.M,        g.N,         g.K,
                             g.alpha, a_op,      b_op,      g.C,        g.bias,      g.gelu_out,
                             g.dgelu_pre, g.dbias ? lt_dbias_.f32() : nullptr};
    auto r = lt_->run(x, lt_workspace_.f32(), cuda::kLtWorkspaceBytes, s_);
    if (r.is_ok() && *r == cuda::LtOutcome::kDone && g.dbias) note(cuda::add_inplace(g.dbias, lt_dbias_.f32(), g.N, s_));
    if (!r.is_ok()) {
      note(r.status());
      return true;  // the error stands; nothing to fall back to
    }
    if (*r == cuda::LtOutcome::kDone) return true;
    // One line per refused shape (the first eight).
    if (lt_refused_.size() < 8 && lt_refused_.insert({g.M, g.N, g.K}).second) {
      std::fprintf(stderr,
                   "loom: cuBLASLt epilogue unavailable for a GEMM (%lld x %lld x %lld): %s; that shape runs the "
                   "GEMM, then its epilogue's kernels\n",
                   static_cast<long long>(g.M), static_cast<long long>(g.N), static_cast<long long>(g.K),
                   lt_->last_refusal().c_str());
    }
    return false;
  }
  // The groups as cuBLAS calls on the table's stream, each through gemm()
  // (its 16-bit operand casts and K = 0 rule); one op for the profile and
  // the timers. A fused grouped kernel (cublasGemmGroupedBatchedEx) would
  // save the launches.
  void grouped_gemm(const GroupedGemm& a) override {
    for (int64_t g = 0; g < a.count; ++g) {
      const GemmGroup& x = a.groups[g];
      gemm(Gemm{a.trans_a, a.trans_b, x.M, x.N, x.K, a.alpha, x.A, x.B, a.beta, x.C});
    }
  }
  void layernorm_forward(const LayernormForward& a) override {
    note(cuda::layernorm_forward(a.x, a.w, a.b, a.y, a.mean, a.rstd, a.N, a.C, a.eps, s_, a.residual, a.sum));
  }
  void layernorm_backward(const LayernormBackward& a) override {
    note(cuda::layernorm_backward(a.dy, a.x, a.w, a.mean, a.rstd, a.dx, a.dw, a.db, a.N, a.C, s_, a.dx_add));
  }
  void rmsnorm_forward(const RmsnormForward& a) override {
    note(cuda::rmsnorm_forward(a.x, a.w, a.y, a.rstd, a.N, a.C, a.eps, s_, a.residual, a.sum));
  }
  void rmsnorm_backward(const RmsnormBackward& a) override {
    note(cuda::rmsnorm_backward(a.dy, a.x, a.w, a.rstd, a.dx, a.dw, a.N, a.C, s_, a.dx_add));
  }
  void gelu_forward(const GeluForward& a) override { note(cuda::gelu_forward(a.x, a.y, a.n, s_)); }
  void gelu_backward(const GeluBackward& a) override { note(cuda::gelu_backward(a.dy, a.x, a.dx, a.n, s_)); }
  void swiglu_forward(const SwigluForward& a) override { note(cuda::swiglu_forward(a.gate, a.up, a.y, a.n, s_)); }
  void swiglu_backward(const SwigluBackward& a) override {
    note(cuda::swiglu_backward(a.dy, a.gate, a.up, a.dgate, a.dup, a.n, s_));
  }
  void rope_forward(const RopeForward& a) override {
    note(cuda::rope_forward(a.x, a.B, a.T, a.H, a.D, a.theta, a.pos_offset, s_));
  }
  void rope_backward(const RopeBackward& a) override {
    note(cuda::rope_backward(a.dx, a.B, a.T, a.H, a.D, a.theta, a.pos_offset, s_));
  }
  void rope_freqs_forward(const RopeFreqsForward& a) override {
    note(cuda::rope_freqs_forward(a.x, a.B, a.T, a.H, a.D, a.inv_freq, a.pos_offset, s_));
  }
  void rope_freqs_backward(const RopeFreqsBackward& a) override {
    note(cuda::rope_freqs_backward(a.dx, a.B, a.T, a.H, a.D, a.inv_freq, a.pos_offset, s_));
  }
  void attention_forward(const AttentionForward& a) override {
    if (path_ == AttentionPath::kCudnn && cudnn_forward(a)) return;
    if (path_ == AttentionPath::kFused)
      return note(cuda::attention_forward(a.q, a.k, a.v, a.out, a.lse, a.B, a.T, a.Hq, a.Hk, a.D, a.causal, s_));
    note(cuda::attention_forward_gemm(blas_, input_, a.q, a.k, a.v, a.out, a.lse, a.B, a.T, a.Hq, a.Hk, a.D,
                                      attention_scratch(a.B, a.T, a.Hq, a.Hk, a.D), a.causal, s_));
  }
  void attention_backward(const AttentionBackward& a) override {
    if (path_ == AttentionPath::kCudnn && cudnn_backward(a)) return;
    if (path_ == AttentionPath::kFused)
      return note(cuda::attention_backward(a.dout, a.q, a.k, a.v, a.out, a.lse, a.dq, a.dk, a.dv, a.B, a.T, a.Hq,
                                           a.Hk, a.D, a.causal, s_));
    note(cuda::attention_backward_gemm(blas_, input_, a.dout, a.q, a.k, a.v, a.out, a.lse, a.dq, a.dk, a.dv, a.B,
                                       a.T, a.Hq, a.Hk, a.D, attention_scratch(a.B, a.T, a.Hq, a.Hk, a.D), a.causal,
                                       s_));
  }
  void attention_merge(const AttentionMerge& a) override {
    note(cuda::attention_merge(a.out, a.lse, a.out_b, a.lse_b, a.B, a.T, a.H, a.D, s_));
  }
  void embedding_forward(const EmbeddingForward& a) override {
    note(cuda::embedding_forward(a.tokens, a.wte, a.out, a.N, a.C, a.v_begin, a.V, s_));
  }
  void embedding_backward(const EmbeddingBackward& a) override {
    note(cuda::embedding_backward(a.tokens, a.dout, a.dwte, a.N, a.C, a.v_begin, a.V, s_));
  }
  void add_positions(const AddPositions& a) override {
    note(cuda::add_positions(a.x, a.wpe, a.R, a.C, a.T, a.row0, s_));
  }
  void positions_backward(const PositionsBackward& a) override {
    note(cuda::positions_backward(a.dx, a.dwpe, a.R, a.C, a.T, a.row0, s_));
  }
  void fill_columns(const FillColumns& a) override {
    note(cuda::fill_columns(a.x, a.R, a.ld, a.c_begin, a.c_end, a.value, s_));
  }
  void xent_row_max(const XentRowMax& a) override { note(cuda::xent_row_max(a.logits, a.row_max, a.N, a.V, s_)); }
  void xent_sumexp_and_target(const XentSumexpAndTarget& a) override {
    note(cuda::xent_sumexp_and_target(a.logits, a.targets, a.row_max, a.row_sumexp, a.target_logit, a.N, a.V,
                                      a.v_begin, s_));
  }
  void xent_loss(const XentLoss& a) override {
    note(cuda::xent_loss(a.row_max, a.row_sumexp, a.target_logit, a.loss, a.N, s_));
  }
  void xent_backward(const XentBackward& a) override {
    note(cuda::xent_backward(a.logits, a.targets, a.row_max, a.row_sumexp, a.dlogits, a.N, a.V, a.v_begin, a.scale,
                             s_));
  }
  void adamw_multi(const AdamwMulti& a) override {
    note(cuda::adamw_multi(a.param, a.grad, a.m, a.v, a.table, a.count, a.max_n, a.lr, a.beta1, a.beta2, a.eps,
                           a.weight_decay, a.step, a.grad_scale, s_));
  }
  void adamw_update(const AdamwUpdate& a) override {
    note(cuda::adamw_update(a.param, a.grad, a.m, a.v, a.n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                            a.grad_scale, s_));
  }
  void add_inplace(const AddInplace& a) override { note(cuda::add_inplace(a.y, a.x, a.n, s_, a.base)); }
  void add_bias(const AddBias& a) override { note(cuda::add_bias(a.y, a.bias, a.N, a.C, s_)); }
  void bias_backward(const BiasBackward& a) override { note(cuda::bias_backward(a.dy, a.dbias, a.N, a.C, s_)); }
  void scale_inplace(const ScaleInplace& a) override { note(cuda::scale_inplace(a.y, a.s, a.n, s_)); }
  double sum(const Sum& a) override {
    return host_result([&](double* out) { return cuda::sum(a.x, a.n, out, s_); });
  }
  void accumulate_sum(const AccumulateSum& a) override {
    note(cuda::accumulate_sum(a.x, a.n, a.scale, a.acc, s_));
  }
  void to_16bit(const To16bit& a) override {
    note(precision_ == Precision::kFp16 ? cuda::cast_to_fp16(a.x, a.y, a.n, s_)
                                        : cuda::cast_to_bf16(a.x, a.y, a.n, s_));
  }
  void from_16bit(const From16bit& a) override {
    note(precision_ == Precision::kFp16 ? cuda::cast_from_fp16(a.x, a.y, a.n, s_)
                                        : cuda::cast_from_bf16(a.x, a.y, a.n, s_));
  }
  void grad_pack(const GradPack& a) override { note(cuda::grad_pack(a.x, a.y, a.n, a.format, s_)); }
  void grad_unpack(const GradUnpack& a) override {
    note(cuda::grad_unpack(a.x, a.y, a.n, a.format, a.accumulate, s_));
  }
  void moe_router_forward(const MoeRouterForward& a) override {
    note(cuda::moe_router_forward(a.logits, a.probs, a.lse, a.topk_idx, a.topk_w, a.N, a.E, a.k, a.normalize, s_));
  }
  void moe_router_backward(const MoeRouterBackward& a) override {
    note(cuda::moe_router_backward(a.probs, a.lse, a.topk_idx, a.topk_w, a.dw, a.aux_grad, a.z_grad, a.dlogits, a.N,
                                   a.E, a.k, a.normalize, s_));
  }
  void moe_gather(const MoeGather& a) override { note(cuda::moe_gather(a.x, a.rows, a.y, a.M, a.C, s_)); }
  void moe_unpermute(const MoeUnpermute& a) override {
    note(cuda::moe_unpermute(a.y, a.slot_rows, a.w, a.out, a.N, a.k, a.C, a.accumulate, s_));
  }
  void moe_unpermute_backward(const MoeUnpermuteBackward& a) override {
    note(cuda::moe_unpermute_backward(a.dout, a.y, a.slot_rows, a.w, a.dy, a.dw, a.N, a.k, a.C, s_));
  }
  void sigmoid_gate_forward(const SigmoidGateForward& a) override {
    note(cuda::sigmoid_gate_forward(a.g, a.y, a.out, a.N, a.C, s_));
  }
  void sigmoid_gate_backward(const SigmoidGateBackward& a) override {
    note(cuda::sigmoid_gate_backward(a.dout, a.g, a.y, a.dy, a.dg, a.N, a.C, s_));
  }
  void add_sum_squares(const AddSumSquares& a) override { note(cuda::sum_squares(a.x, a.n, next_pieces(1), s_)); }
  void add_sum_squares_multi(const AddSumSquaresMulti& a) override {
    if (a.count <= 0) return;
    note(cuda::sum_squares_multi(a.x, a.table, a.count, a.max_n, next_pieces(size_t(a.count)), s_));
  }
  double take_sum_squares(const TakeSumSquares&) override {
    std::vector<double> host(pieces_n_);
    if (pieces_n_) be_->copy_to_host(host.data(), pieces_.f32(), pieces_n_ * sizeof(double));
    pieces_n_ = 0;
    double total = 0;
    for (double v : host) total += v;
    return status_.is_ok() ? total : 0;
  }

 private:
  // `n` more device doubles of sum-of-squares pieces (one per piece; take_sum_squares() reads them all back).
  double* next_pieces(size_t n) {
    if (pieces_.bytes() < (pieces_n_ + n) * sizeof(double)) {
      MemoryClassScope workspace(MemoryClass::kWorkspace);
      DeviceBuffer bigger(be_, std::max<size_t>(256, 2 * (pieces_n_ + n)) * sizeof(double));
      if (pieces_n_) be_->copy(bigger.f32(), pieces_.f32(), pieces_n_ * sizeof(double));
      pieces_ = std::move(bigger);
    }
    double* out = reinterpret_cast<double*>(pieces_.f32()) + pieces_n_;
    pieces_n_ += n;
    return out;
  }
  void note(const Status& st) {
    if (status_.is_ok() && !st.is_ok()) status_ = st;
  }
  // A double computed on the stream, read back through pinned memory.
  template <typename F>
  double host_result(F&& compute) {
    MemoryClassScope workspace(MemoryClass::kWorkspace);
    if (result_.empty()) result_ = DeviceBuffer(be_, sizeof(double));
    if (!host_sum_) note(cuda::cuda_status(cudaMallocHost(reinterpret_cast<void**>(&host_sum_), sizeof(double)),
                                           "cudaMallocHost", __FILE__, __LINE__));
    if (!status_.is_ok()) return 0;
    auto* out = static_cast<double*>(static_cast<void*>(result_.f32()));
    note(compute(out));
    note(cuda::cuda_status(cudaMemcpyAsync(host_sum_, out, sizeof(double), cudaMemcpyDeviceToHost, s_),
                           "cudaMemcpyAsync", __FILE__, __LINE__));
    note(cuda::cuda_status(cudaStreamSynchronize(s_), "cudaStreamSynchronize", __FILE__, __LINE__));
    return status_.is_ok() ? *host_sum_ : 0;
  }
  // cuDNN attention (LOOM_CUDA_ATTENTION=cudnn): false, after a one-line
  // notice, where it cannot run the call (the caller takes the cuBLAS path).
  static void attention_notice(const std::string& why) {
    std::fprintf(stderr, "loom: LOOM_CUDA_ATTENTION=cudnn: %s; attention runs on the cuBLAS path\n", why.c_str());
  }
  bool sdpa_ready(const cuda::SdpaShape& s, bool backward, size_t* workspace) {
    if (!sdpa_tried_) {
      sdpa_tried_ = true;
      if (input_ == cuda::GemmInput::kF32) {
        attention_notice("cuDNN's fused attention takes bf16 / fp16 inputs and this run is " +
                         std::string(precision_name(precision_)));
        return false;
      }
      auto made = cuda::make_cudnn_sdpa(s_);
      if (!made.is_ok()) {
        attention_notice(made.status().message());
        return false;
      }
      sdpa_ = std::move(made).value();
      std::fprintf(stderr, "loom: attention through %s\n", sdpa_->version().c_str());
    }
    if (!sdpa_) return false;
    auto ws = sdpa_->prepare(s, backward);
    if (!ws.is_ok()) {
      if (sdpa_refused_.insert({s, backward}).second) attention_notice(ws.status().message());
      return false;
    }
    *workspace = ws.value();
    return true;
  }
  void* sdpa_scratch(int i, size_t bytes) {
    MemoryClassScope workspace(MemoryClass::kWorkspace);
    DeviceBuffer& b = sdpa_buf_[i];
    if (b.bytes() < bytes) b = DeviceBuffer(be_, std::max<size_t>(bytes, 256));
    return b.f32();
  }
  uint16_t* sdpa_half(int i, int64_t n) { return static_cast<uint16_t*>(sdpa_scratch(i, size_t(n) * 2)); }
  void cast_from_16(const uint16_t* x, float* y, int64_t n) {
    note(input_ == cuda::GemmInput::kBf16 ? cuda::cast_from_bf16(x, y, n, s_) : cuda::cast_from_fp16(x, y, n, s_));
  }
  bool cudnn_forward(const AttentionForward& a) {
    const cuda::SdpaShape s{a.B, a.T, a.Hq, a.Hk, a.D, a.causal, input_ == cuda::GemmInput::kBf16};
    size_t ws = 0;
    if (!sdpa_ready(s, false, &ws)) return false;
    const int64_t nq = a.B * a.T * a.Hq * a.D, nk = a.B * a.T * a.Hk * a.D;
    uint16_t *q = sdpa_half(0, nq), *k = sdpa_half(1, nk), *v = sdpa_half(2, nk), *o = sdpa_half(3, nq);
    void* w = sdpa_scratch(8, ws);
    note(cuda::cast_to_16(input_, a.q, q, nq, s_));
    note(cuda::cast_to_16(input_, a.k, k, nk, s_));
    note(cuda::cast_to_16(input_, a.v, v, nk, s_));
    note(sdpa_->forward(s, q, k, v, o, a.lse, w));
    cast_from_16(o, a.out, nq);
    return true;
  }
  bool cudnn_backward(const AttentionBackward& a) {
    const cuda::SdpaShape s{a.B, a.T, a.Hq, a.Hk, a.D, a.causal, input_ == cuda::GemmInput::kBf16};
    size_t ws = 0;
    if (!sdpa_ready(s, true, &ws)) return false;
    const int64_t nq = a.B * a.T * a.Hq * a.D, nk = a.B * a.T * a.Hk * a.D;
    uint16_t *q = sdpa_half(0, nq), *k = sdpa_half(1, nk), *v = sdpa_half(2, nk), *o = sdpa_half(3, nq),
             *dout = sdpa_half(4, nq), *dq = sdpa_half(5, nq), *dk = sdpa_half(6, nk), *dv = sdpa_half(7, nk);
    void* w = sdpa_scratch(8, ws);
    note(cuda::cast_to_16(input_, a.q, q, nq, s_));
    note(cuda::cast_to_16(input_, a.k, k, nk, s_));
    note(cuda::cast_to_16(input_, a.v, v, nk, s_));
    note(cuda::cast_to_16(input_, a.out, o, nq, s_));
    note(cuda::cast_to_16(input_, a.dout, dout, nq, s_));
    note(sdpa_->backward(s, q, k, v, o, dout, a.lse, dq, dk, dv, w));
    cast_from_16(dq, a.dq, nq);
    cast_from_16(dk, a.dk, nk);
    cast_from_16(dv, a.dv, nk);
    return true;
  }
  // The attention workspace for a shape, grown on demand and kept.
  cuda::AttentionGemmScratch attention_scratch(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D) {
    auto grow = [&](DeviceBuffer& b, size_t bytes) -> void* {
      MemoryClassScope workspace(MemoryClass::kWorkspace);
      if (b.bytes() < bytes) b = DeviceBuffer(be_, bytes);
      return b.f32();
    };
    const size_t scores = size_t(cuda::attention_gemm_workspace_floats(T, Hk));
    cuda::AttentionGemmScratch w;
    w.scores = static_cast<float*>(grow(att_[0], scores * sizeof(float)));
    w.dscores = static_cast<float*>(grow(att_[1], scores * sizeof(float)));
    if (input_ != cuda::GemmInput::kF32) {
      w.scores16 = static_cast<uint16_t*>(grow(att_[2], scores * sizeof(uint16_t)));
      w.q16 = static_cast<uint16_t*>(grow(att_[3], size_t(B * T * Hq * D) * sizeof(uint16_t)));
      w.do16 = static_cast<uint16_t*>(grow(att_[4], size_t(B * T * Hq * D) * sizeof(uint16_t)));
      w.k16 = static_cast<uint16_t*>(grow(att_[5], size_t(B * T * Hk * D) * sizeof(uint16_t)));
      w.v16 = static_cast<uint16_t*>(grow(att_[6], size_t(B * T * Hk * D) * sizeof(uint16_t)));
    }
    return w;
  }
  // The 16-bit image of an fp32 operand of n elements: the weight copy when
  // it lies in the parameter buffer, else a cast into scratch slot `slot`.
  const uint16_t* half_of(const float* x, int64_t n, int slot) {
    if (weights_ && x >= weights_ && x + n <= weights_ + weights_n_) {
      MemoryClassScope workspace(MemoryClass::kWorkspace);
      if (weights_bf16_.empty()) weights_bf16_ = DeviceBuffer(be_, size_t(weights_n_) * sizeof(uint16_t));
      auto* w16 = reinterpret_cast<uint16_t*>(weights_bf16_.f32());
      // Cast the stale ranges this operand touches (whole ranges: a chunk's
      // parameters at a time), and only those.
      const int64_t b = x - weights_, e = b + n;
      for (size_t i = 0; i < stale_.size();) {
        auto [rb, re] = stale_[i];
        if (rb < e && b < re) {
          note(cuda::cast_to_16(input_, weights_ + rb, w16 + rb, re - rb, s_));
          stale_[i] = stale_.back();
          stale_.pop_back();
        } else {
          ++i;
        }
      }
      return status_.is_ok() ? w16 + (x - weights_) : nullptr;
    }
    DeviceBuffer& buf = scratch_[slot];
    MemoryClassScope workspace(MemoryClass::kWorkspace);
    if (buf.bytes() < size_t(n) * sizeof(uint16_t)) buf = DeviceBuffer(be_, size_t(n) * sizeof(uint16_t));
    auto* out = reinterpret_cast<uint16_t*>(buf.f32());
    note(cuda::cast_to_16(input_, x, out, n, s_));
    return status_.is_ok() ? out : nullptr;
  }

  ComputeBackend* be_;
  cudaStream_t s_;
  cublasHandle_t blas_;
  Precision precision_;
  cuda::GemmInput input_ = precision_ == Precision::kBf16   ? cuda::GemmInput::kBf16
                           : precision_ == Precision::kFp16 ? cuda::GemmInput::kF16
                                                            : cuda::GemmInput::kF32;
  Status status_ = Status::ok();
  const float* weights_ = nullptr;
  int64_t weights_n_ = 0;
  DeviceBuffer weights_bf16_;
  std::vector<std::pair<int64_t, int64_t>> stale_;  // [begin, end) offsets to cast again
  DeviceBuffer scratch_[2];
  DeviceBuffer att_[7];
  const AttentionPath path_;
  // The cuDNN path: made on first use; its 16-bit staging buffers (q, k, v,
  // out, dout, dq, dk, dv) and workspace.
  std::unique_ptr<cuda::CudnnSdpa> sdpa_;
  // The cuBLASLt epilogue GEMMs (LOOM_GEMM_EPILOGUE=cublaslt), made on first use.
  const bool epilogue_lt_;
  std::unique_ptr<cuda::LtGemm> lt_;
  DeviceBuffer lt_workspace_;
  DeviceBuffer lt_dbias_;  // cuBLASLt's bias gradient, before it is added into Gemm::dbias
  std::set<std::array<int64_t, 3>> lt_refused_;  // shapes whose refusal was printed
  bool sdpa_tried_ = false;
  std::set<std::pair<cuda::SdpaShape, bool>> sdpa_refused_;
  DeviceBuffer sdpa_buf_[9];
  DeviceBuffer result_;
  DeviceBuffer pieces_;
  size_t pieces_n_ = 0;
  double* host_sum_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<Kernels>> make_cuda_kernels(ComputeBackend* backend, cudaStream_t stream, Precision precision) {
  LOOM_ASSIGN_OR_RETURN(const AttentionPath path, attention_path_from_env());
  LOOM_ASSIGN_OR_RETURN(const bool epilogue_lt, epilogue_lt_from_env());
  cublasHandle_t handle = nullptr;
  LOOM_CUBLAS_CHECK(cublasCreate(&handle));
  if (cublasStatus_t e = cublasSetStream(handle, stream); e != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle);
    return cuda::cublas_status(e, "cublasSetStream", __FILE__, __LINE__);
  }
  return std::unique_ptr<Kernels>(std::make_unique<CudaKernels>(backend, stream, handle, precision, path, epilogue_lt));
}

}  // namespace loom::exec
