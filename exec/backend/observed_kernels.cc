// Each op: its description (shape, FLOPs, minimum bytes moved; see
// kernel_call.h for the rules), then the inner table's call with the same
// arguments.
#include "exec/backend/observed_kernels.h"

#include <algorithm>

namespace loom::exec {

namespace {

constexpr double kF32 = 4;  // bytes of an fp32 (or int32) element

}  // namespace

KernelCall ObservedKernels::describe(KernelOp op, std::initializer_list<KernelCall::Dim> dims, double flops,
                                     double bytes) {
  KernelCall c;
  c.op = op;
  c.flops = flops;
  c.bytes = bytes;
  for (const KernelCall::Dim& d : dims) {
    if (c.num_dims == int(c.dims.size())) break;
    c.dims[size_t(c.num_dims++)] = d;
  }
  return c;
}

double ObservedKernels::gemm_operand_bytes() const { return inner_.precision() == Precision::kFp32 ? 4 : 2; }

void ObservedKernels::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           const float* B, float beta, float* C) {
  const double m = double(M), n = double(N), k = double(K);
  const KernelCall c =
      describe(KernelOp::kGemm, {{"M", M}, {"N", N}, {"K", K}, {"trans_a", ta}, {"trans_b", tb}}, 2 * m * n * k,
               gemm_operand_bytes() * (m * k + k * n) + kF32 * m * n * (beta != 0.f ? 2 : 1));
  observe(c, [&] { inner_.gemm(ta, tb, M, N, K, alpha, A, B, beta, C); });
}

void ObservedKernels::layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                                        float* rstd, int64_t N, int64_t C, float eps) {
  const double n = double(N), ch = double(C);
  const KernelCall c =
      describe(KernelOp::kLayernormForward, {{"N", N}, {"C", C}}, 0, kF32 * (2 * n * ch + 2 * ch + 2 * n));
  observe(c, [&] { inner_.layernorm_forward(x, w, b, y, mean, rstd, N, C, eps); });
}

void ObservedKernels::layernorm_backward(const float* dy, const float* x, const float* w, const float* mean,
                                         const float* rstd, float* dx, float* dw, float* db, int64_t N, int64_t C) {
  const double n = double(N), ch = double(C);
  // dy, x read, dx written; w read, dw and db accumulated; mean, rstd read.
  const KernelCall c =
      describe(KernelOp::kLayernormBackward, {{"N", N}, {"C", C}}, 0, kF32 * (3 * n * ch + 5 * ch + 2 * n));
  observe(c, [&] { inner_.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, N, C); });
}

void ObservedKernels::rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                                      float eps) {
  const double n = double(N), ch = double(C);
  const KernelCall c = describe(KernelOp::kRmsnormForward, {{"N", N}, {"C", C}}, 0, kF32 * (2 * n * ch + ch + n));
  observe(c, [&] { inner_.rmsnorm_forward(x, w, y, rstd, N, C, eps); });
}

void ObservedKernels::rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                                       float* dw, int64_t N, int64_t C) {
  const double n = double(N), ch = double(C);
  const KernelCall c =
      describe(KernelOp::kRmsnormBackward, {{"N", N}, {"C", C}}, 0, kF32 * (3 * n * ch + 3 * ch + n));
  observe(c, [&] { inner_.rmsnorm_backward(dy, x, w, rstd, dx, dw, N, C); });
}

void ObservedKernels::gelu_forward(const float* x, float* y, int64_t n) {
  const KernelCall c = describe(KernelOp::kGeluForward, {{"n", n}}, 0, kF32 * 2 * double(n));
  observe(c, [&] { inner_.gelu_forward(x, y, n); });
}

void ObservedKernels::gelu_backward(const float* dy, const float* x, float* dx, int64_t n) {
  const KernelCall c = describe(KernelOp::kGeluBackward, {{"n", n}}, 0, kF32 * 3 * double(n));
  observe(c, [&] { inner_.gelu_backward(dy, x, dx, n); });
}

void ObservedKernels::swiglu_forward(const float* gate, const float* up, float* y, int64_t n) {
  const KernelCall c = describe(KernelOp::kSwigluForward, {{"n", n}}, 0, kF32 * 3 * double(n));
  observe(c, [&] { inner_.swiglu_forward(gate, up, y, n); });
}

void ObservedKernels::swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                                      int64_t n) {
  const KernelCall c = describe(KernelOp::kSwigluBackward, {{"n", n}}, 0, kF32 * 5 * double(n));
  observe(c, [&] { inner_.swiglu_backward(dy, gate, up, dgate, dup, n); });
}

void ObservedKernels::rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                                   int64_t pos_offset) {
  const KernelCall c =
      describe(KernelOp::kRopeForward, {{"B", B}, {"T", T}, {"H", H}, {"D", D}, {"pos_offset", pos_offset}}, 0,
               kF32 * 2 * double(B) * double(T) * double(H) * double(D));
  observe(c, [&] { inner_.rope_forward(x, B, T, H, D, theta, pos_offset); });
}

void ObservedKernels::rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                                    int64_t pos_offset) {
  const KernelCall c =
      describe(KernelOp::kRopeBackward, {{"B", B}, {"T", T}, {"H", H}, {"D", D}, {"pos_offset", pos_offset}}, 0,
               kF32 * 2 * double(B) * double(T) * double(H) * double(D));
  observe(c, [&] { inner_.rope_backward(dx, B, T, H, D, theta, pos_offset); });
}

// Counted as the rope ops they are (same work, another frequency source).
void ObservedKernels::rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                                         int64_t pos_offset) {
  const KernelCall c =
      describe(KernelOp::kRopeForward, {{"B", B}, {"T", T}, {"H", H}, {"D", D}, {"pos_offset", pos_offset}}, 0,
               kF32 * 2 * double(B) * double(T) * double(H) * double(D));
  observe(c, [&] { inner_.rope_freqs_forward(x, B, T, H, D, inv_freq, pos_offset); });
}

void ObservedKernels::rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D,
                                          const double* inv_freq, int64_t pos_offset) {
  const KernelCall c =
      describe(KernelOp::kRopeBackward, {{"B", B}, {"T", T}, {"H", H}, {"D", D}, {"pos_offset", pos_offset}}, 0,
               kF32 * 2 * double(B) * double(T) * double(H) * double(D));
  observe(c, [&] { inner_.rope_freqs_backward(dx, B, T, H, D, inv_freq, pos_offset); });
}

void ObservedKernels::attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                                        int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D) {
  const double b = double(B), t = double(T), hq = double(Hq), hk = double(Hk), d = double(D);
  // S = Q K^T and O = P V over the causal half of the scores.
  const double flops = 2 * (2 * b * hq * t * t * d / 2);
  const double bytes = kF32 * (2 * b * t * hq * d + 2 * b * t * hk * d + b * hq * t);
  const KernelCall c =
      describe(KernelOp::kAttentionForward, {{"B", B}, {"T", T}, {"Hq", Hq}, {"Hk", Hk}, {"D", D}}, flops, bytes);
  observe(c, [&] { inner_.attention_forward(q, k, v, out, lse, B, T, Hq, Hk, D); });
}

void ObservedKernels::attention_backward(const float* dout, const float* q, const float* k, const float* v,
                                         const float* out, const float* lse, float* dq, float* dk, float* dv,
                                         int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D) {
  const double b = double(B), t = double(T), hq = double(Hq), hk = double(Hk), d = double(D);
  // S again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: five causal halves.
  const double flops = 5 * (2 * b * hq * t * t * d / 2);
  // dout, q, out read and dq written (Hq heads); k, v read and dk, dv written; lse read.
  const double bytes = kF32 * (4 * b * t * hq * d + 4 * b * t * hk * d + b * hq * t);
  const KernelCall c =
      describe(KernelOp::kAttentionBackward, {{"B", B}, {"T", T}, {"Hq", Hq}, {"Hk", Hk}, {"D", D}}, flops, bytes);
  observe(c, [&] { inner_.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, B, T, Hq, Hk, D); });
}

void ObservedKernels::embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C,
                                        int64_t v_begin, int64_t V) {
  const double n = double(N), ch = double(C);
  const KernelCall c = describe(KernelOp::kEmbeddingForward, {{"N", N}, {"C", C}, {"v_begin", v_begin}, {"V", V}}, 0,
                                kF32 * (n + 2 * n * ch));
  observe(c, [&] { inner_.embedding_forward(tokens, wte, out, N, C, v_begin, V); });
}

void ObservedKernels::embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                                         int64_t v_begin, int64_t V) {
  const double n = double(N), ch = double(C);
  // Tokens and dout read; a row of dwte accumulated per token (at most N rows).
  const KernelCall c = describe(KernelOp::kEmbeddingBackward, {{"N", N}, {"C", C}, {"v_begin", v_begin}, {"V", V}},
                                0, kF32 * (n + 3 * n * ch));
  observe(c, [&] { inner_.embedding_backward(tokens, dout, dwte, N, C, v_begin, V); });
}

void ObservedKernels::add_positions(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0) {
  const double r = double(R), ch = double(C), rows = double(std::min(R, T));
  const KernelCall c = describe(KernelOp::kAddPositions, {{"R", R}, {"C", C}, {"T", T}, {"row0", row0}}, 0,
                                kF32 * (2 * r * ch + rows * ch));
  observe(c, [&] { inner_.add_positions(x, wpe, R, C, T, row0); });
}

void ObservedKernels::positions_backward(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T, int64_t row0) {
  const double r = double(R), ch = double(C), rows = double(std::min(R, T));
  const KernelCall c = describe(KernelOp::kPositionsBackward, {{"R", R}, {"C", C}, {"T", T}, {"row0", row0}}, 0,
                                kF32 * (r * ch + 2 * rows * ch));
  observe(c, [&] { inner_.positions_backward(dx, dwpe, R, C, T, row0); });
}

void ObservedKernels::fill_columns(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t c_end, float value) {
  const KernelCall c = describe(KernelOp::kFillColumns, {{"R", R}, {"ld", ld}, {"c_begin", c_begin}, {"c_end", c_end}},
                                0, kF32 * double(R) * double(std::max<int64_t>(0, c_end - c_begin)));
  observe(c, [&] { inner_.fill_columns(x, R, ld, c_begin, c_end, value); });
}

void ObservedKernels::xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V) {
  const double n = double(N), v = double(V);
  const KernelCall c = describe(KernelOp::kXentRowMax, {{"N", N}, {"V", V}}, 0, kF32 * (n * v + n));
  observe(c, [&] { inner_.xent_row_max(logits, row_max, N, V); });
}

void ObservedKernels::xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max,
                                             float* row_sumexp, float* target_logit, int64_t N, int64_t V,
                                             int64_t v_begin) {
  const double n = double(N), v = double(V);
  const KernelCall c = describe(KernelOp::kXentSumexpAndTarget, {{"N", N}, {"V", V}, {"v_begin", v_begin}}, 0,
                                kF32 * (n * v + 4 * n));
  observe(c, [&] { inner_.xent_sumexp_and_target(logits, targets, row_max, row_sumexp, target_logit, N, V, v_begin); });
}

void ObservedKernels::xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss,
                                int64_t N) {
  const KernelCall c = describe(KernelOp::kXentLoss, {{"N", N}}, 0, kF32 * 4 * double(N));
  observe(c, [&] { inner_.xent_loss(row_max, row_sumexp, target_logit, loss, N); });
}

void ObservedKernels::xent_backward(const float* logits, const int32_t* targets, const float* row_max,
                                    const float* row_sumexp, float* dlogits, int64_t N, int64_t V, int64_t v_begin,
                                    float scale) {
  const double n = double(N), v = double(V);
  const KernelCall c = describe(KernelOp::kXentBackward, {{"N", N}, {"V", V}, {"v_begin", v_begin}}, 0,
                                kF32 * (2 * n * v + 3 * n));
  observe(c, [&] { inner_.xent_backward(logits, targets, row_max, row_sumexp, dlogits, N, V, v_begin, scale); });
}

void ObservedKernels::adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  // param, grad, m, v read; param, m, v written.
  const KernelCall c = describe(KernelOp::kAdamwUpdate, {{"n", n}, {"step", step}}, 0, kF32 * 7 * double(n));
  observe(c, [&] { inner_.adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step); });
}

void ObservedKernels::add_inplace(float* y, const float* x, int64_t n) {
  const KernelCall c = describe(KernelOp::kAddInplace, {{"n", n}}, 0, kF32 * 3 * double(n));
  observe(c, [&] { inner_.add_inplace(y, x, n); });
}

void ObservedKernels::add_bias(float* y, const float* bias, int64_t N, int64_t C) {
  const double n = double(N), ch = double(C);
  const KernelCall c = describe(KernelOp::kAddBias, {{"N", N}, {"C", C}}, 0, kF32 * (2 * n * ch + ch));
  observe(c, [&] { inner_.add_bias(y, bias, N, C); });
}

void ObservedKernels::bias_backward(const float* dy, float* dbias, int64_t N, int64_t C) {
  const double n = double(N), ch = double(C);
  const KernelCall c = describe(KernelOp::kBiasBackward, {{"N", N}, {"C", C}}, 0, kF32 * (n * ch + 2 * ch));
  observe(c, [&] { inner_.bias_backward(dy, dbias, N, C); });
}

void ObservedKernels::scale_inplace(float* y, float s, int64_t n) {
  const KernelCall c = describe(KernelOp::kScaleInplace, {{"n", n}}, 0, kF32 * 2 * double(n));
  observe(c, [&] { inner_.scale_inplace(y, s, n); });
}

void ObservedKernels::to_16bit(const float* x, uint16_t* y, int64_t n) {
  const KernelCall c = describe(KernelOp::kTo16bit, {{"n", n}}, 0, 6 * double(n));
  observe(c, [&] { inner_.to_16bit(x, y, n); });
}

void ObservedKernels::from_16bit(const uint16_t* x, float* y, int64_t n) {
  const KernelCall c = describe(KernelOp::kFrom16bit, {{"n", n}}, 0, 6 * double(n));
  observe(c, [&] { inner_.from_16bit(x, y, n); });
}

double ObservedKernels::sum(const float* x, int64_t n) {
  const KernelCall c = describe(KernelOp::kSum, {{"n", n}}, 0, kF32 * double(n));
  double result = 0;
  observe(c, [&] { result = inner_.sum(x, n); });
  return result;
}

void ObservedKernels::add_sum_squares(const float* x, int64_t n) {
  const KernelCall c = describe(KernelOp::kAddSumSquares, {{"n", n}}, 0, kF32 * double(n));
  observe(c, [&] { inner_.add_sum_squares(x, n); });
}

double ObservedKernels::take_sum_squares() {
  const KernelCall c = describe(KernelOp::kTakeSumSquares, {}, 0, 0);
  double result = 0;
  observe(c, [&] { result = inner_.take_sum_squares(); });
  return result;
}

}  // namespace loom::exec
