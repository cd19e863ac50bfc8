// The executor's kernel ops, each described once: an argument struct per op
// (its fields are the op's arguments, its comment the op's contract) with
// describe(), the op's shape and work for the decorators that watch a table
// (exec/backend/kernel_call.h). Everything else about an op is generated from
// the one list LOOM_KERNEL_OPS below: the KernelOp enum and its names, the
// virtual of the table every backend fills (exec/backend/kernels.h), the
// forwarding decorator (observed_kernels.h), and the test that runs every op
// of every backend against the CPU reference (tests/support/kernel_cases.h).
//
// Adding an op: a struct here, its line in LOOM_KERNEL_OPS, describe() in
// kernel_ops.cc, the op in each backend's table (CpuKernels, CudaKernels), and
// its case in tests/support/kernel_cases.cc. The compiler names every place
// that is missing.
//
// Shapes use these letters (contiguous row-major arrays):
//   N  rows (tokens: B * T), B micro-batch (sequences per micro-batch),
//   T  sequence length, C channels (hidden), F MLP intermediate,
//   V  (local) vocabulary, Hq query heads, Hk key/value heads (GQA:
//   Hq % Hk == 0), D head dim.
// Backward ops ACCUMULATE into parameter gradients (dw += ...) and OVERWRITE
// input gradients (dx = ...) unless stated otherwise, so gradient
// accumulation over micro-batches is free and activations never alias.
// Pointers are the backend's memory unless stated otherwise.
//
// Call sites build the struct in place: k.gemm({false, true, M, N, K, 1.f,
// a, b, 0.f, c}) (aggregate initialization: the fields in order, and no
// narrowing conversions).
#pragma once

#include <cstdint>

#include "core/hw_profile.h"  // loom::Precision
#include "exec/backend/grad_format.h"
#include "exec/backend/kernel_call.h"

// X(Type, name) for every op, in KernelOp order.
#define LOOM_KERNEL_OPS(X)                          \
  X(Gemm, gemm)                                     \
  X(GroupedGemm, grouped_gemm)                      \
  X(LayernormForward, layernorm_forward)            \
  X(LayernormBackward, layernorm_backward)          \
  X(RmsnormForward, rmsnorm_forward)                \
  X(RmsnormBackward, rmsnorm_backward)              \
  X(GeluForward, gelu_forward)                      \
  X(GeluBackward, gelu_backward)                    \
  X(SwigluForward, swiglu_forward)                  \
  X(SwigluBackward, swiglu_backward)                \
  X(RopeForward, rope_forward)                      \
  X(RopeBackward, rope_backward)                    \
  X(RopeFreqsForward, rope_freqs_forward)           \
  X(RopeFreqsBackward, rope_freqs_backward)         \
  X(AttentionForward, attention_forward)            \
  X(AttentionBackward, attention_backward)          \
  X(AttentionMerge, attention_merge)                \
  X(EmbeddingForward, embedding_forward)            \
  X(EmbeddingBackward, embedding_backward)          \
  X(AddPositions, add_positions)                    \
  X(PositionsBackward, positions_backward)          \
  X(FillColumns, fill_columns)                      \
  X(XentRowMax, xent_row_max)                       \
  X(XentSumexpAndTarget, xent_sumexp_and_target)    \
  X(XentLoss, xent_loss)                            \
  X(XentBackward, xent_backward)                    \
  X(AdamwUpdate, adamw_update)                      \
  X(AdamwMulti, adamw_multi)                        \
  X(AddInplace, add_inplace)                        \
  X(AddBias, add_bias)                              \
  X(BiasBackward, bias_backward)                    \
  X(ScaleInplace, scale_inplace)                    \
  X(To16bit, to_16bit)                              \
  X(From16bit, from_16bit)                          \
  X(GradPack, grad_pack)                            \
  X(GradUnpack, grad_unpack)                        \
  X(MoeRouterForward, moe_router_forward)           \
  X(MoeRouterBackward, moe_router_backward)         \
  X(MoeGather, moe_gather)                          \
  X(MoeUnpermute, moe_unpermute)                    \
  X(MoeUnpermuteBackward, moe_unpermute_backward)   \
  X(SigmoidGateForward, sigmoid_gate_forward)       \
  X(SigmoidGateBackward, sigmoid_gate_backward)     \
  X(Sum, sum)                                       \
  X(AccumulateSum, accumulate_sum)                  \
  X(AddSumSquares, add_sum_squares)                 \
  X(AddSumSquaresMulti, add_sum_squares_multi)      \
  X(TakeSumSquares, take_sum_squares)

namespace loom::exec {

// Every op of the table.
enum class KernelOp : uint8_t {
#define LOOM_KERNEL_OP_ENUM(Type, name) k##Type,
  LOOM_KERNEL_OPS(LOOM_KERNEL_OP_ENUM)
#undef LOOM_KERNEL_OP_ENUM
};
#define LOOM_KERNEL_OP_COUNT(Type, name) +1
inline constexpr int kNumKernelOps = 0 LOOM_KERNEL_OPS(LOOM_KERNEL_OP_COUNT);
#undef LOOM_KERNEL_OP_COUNT

// The op's name, the table's virtual: "attention_backward".
const char* kernel_op_name(KernelOp op);

// Each struct: `Result` is what the op returns to the host (void for all but
// the two host reductions), kOp its enum value, describe() its shape and work
// (flops and bytes by the rules of kernel_call.h; `p` is the table's
// precision, which sets the bytes of a GEMM operand).

// C(M,N) = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. A is (M,K) or,
// transposed, stored (K,M); B is (K,N) or stored (N,K). K = 0 gives C = beta C.
// Operands may be rounded to bf16 / fp16 (fp32 accumulate) when the backend
// runs mixed precision.
// A16 / B16, on a 16-bit table only (precision() bf16 or fp16): the operand
// already in the table's 16-bit format (as to_16bit writes it; a saved
// activation held packed), read in place of A / B (which may then be null).
// The product equals the one from the fp32 operand those 16 bits round.
// The epilogue (a GPU table fuses it into the GEMM; the CPU tables run the
// ops it replaces, in order, so their bits are those of the separate ops):
//   bias      C(i, :) += bias(N) after the product (add_bias's adds)
//   gelu_out  gelu_out(M,N) = GELU(C) after the bias, C keeping the
//             pre-activation (gelu_forward's math); its own buffer
//   dgelu_pre C = C * GELU'(dgelu_pre) after the product, in place
//             (gelu_backward's math with dy = C, x = dgelu_pre(M,N), the
//             forward's pre-activation): GELU's backward fused into the
//             GEMM that makes its incoming gradient. Only with beta 0 and
//             neither bias nor gelu_out.
//   dbias     dbias(N) += the sum of C's rows after dgelu_pre's epilogue
//             (bias_backward's adds): the bias gradient of the layer whose
//             pre-activation dgelu_pre is (cuBLASLt's DGELU_BGRAD). Only
//             with dgelu_pre.
struct Gemm {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kGemm;
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const float* A;
  const float* B;
  float beta;
  float* C;
  const uint16_t* A16 = nullptr;
  const uint16_t* B16 = nullptr;
  const float* bias = nullptr;
  float* gelu_out = nullptr;
  const float* dgelu_pre = nullptr;
  float* dbias = nullptr;
  KernelCall describe(Precision p) const;
};

// Several GEMMs of one kind in one call, each with Gemm's contract and its
// own shape and operands (a MoE layer's local experts, each on its rows):
// C_g = alpha op(A_g) op(B_g) + beta C_g. `groups` is host memory.
struct GemmGroup {
  int64_t M, N, K;
  const float* A;
  const float* B;
  float* C;
};
struct GroupedGemm {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kGroupedGemm;
  bool trans_a, trans_b;
  float alpha, beta;
  const GemmGroup* groups;
  int64_t count;
  KernelCall describe(Precision p) const;
};

// y(N,C) = LayerNorm(x) * w + b; saves mean(N), rstd(N) for backward.
// The residual add fused in (both or neither): with `residual` and `sum`
// the row normalized is x + residual, written to sum(N,C) (float adds, as
// add_inplace makes them: the same bits as the two ops).
struct LayernormForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kLayernormForward;
  const float *x, *w, *b;
  float *y, *mean, *rstd;
  int64_t N, C;
  float eps;
  const float* residual = nullptr;
  float* sum = nullptr;
  KernelCall describe(Precision p) const;
};
// `x` is the normalized input (the forward's sum when it had a residual).
// dx_add: a gradient added to dx (dx = norm's dx + dx_add, as add_inplace
// after the op would make it): the residual branch's.
struct LayernormBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kLayernormBackward;
  const float *dy, *x, *w, *mean, *rstd;
  float *dx, *dw, *db;
  int64_t N, C;
  const float* dx_add = nullptr;
  KernelCall describe(Precision p) const;
};

// y(N,C) = x * rsqrt(mean(x^2) + eps) * w; saves rstd(N). residual / sum
// and dx_add as LayernormForward / LayernormBackward.
struct RmsnormForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kRmsnormForward;
  const float *x, *w;
  float *y, *rstd;
  int64_t N, C;
  float eps;
  const float* residual = nullptr;
  float* sum = nullptr;
  KernelCall describe(Precision p) const;
};
struct RmsnormBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kRmsnormBackward;
  const float *dy, *x, *w, *rstd;
  float *dx, *dw;
  int64_t N, C;
  const float* dx_add = nullptr;
  KernelCall describe(Precision p) const;
};

// GELU, tanh approximation (GPT-2): y(n) = gelu(x(n)).
struct GeluForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kGeluForward;
  const float* x;
  float* y;
  int64_t n;
  KernelCall describe(Precision p) const;
};
struct GeluBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kGeluBackward;
  const float *dy, *x;
  float* dx;
  int64_t n;
  KernelCall describe(Precision p) const;
};

// SwiGLU: y(n) = silu(gate) * up.
struct SwigluForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kSwigluForward;
  const float *gate, *up;
  float* y;
  int64_t n;
  KernelCall describe(Precision p) const;
};
struct SwigluBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kSwigluBackward;
  const float *dy, *gate, *up;
  float *dgate, *dup;
  int64_t n;
  KernelCall describe(Precision p) const;
};

// Rotary embedding in place on x(B,T,H,D) (HF/Llama "rotate_half": pairs
// (i, i + D/2)), positions t + pos_offset, frequencies theta^(-2i/D).
struct RopeForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kRopeForward;
  float* x;
  int64_t B, T, H, D;
  float theta;
  int64_t pos_offset;
  KernelCall describe(Precision p) const;
};
// The inverse rotation applied to the gradient, in place.
struct RopeBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kRopeBackward;
  float* dx;
  int64_t B, T, H, D;
  float theta;
  int64_t pos_offset;
  KernelCall describe(Precision p) const;
};
// The same rotations with explicit inverse frequencies inv_freq(D/2), in HOST
// memory and read during the call: pair i at position p turns by
// p * inv_freq[i] (scaled RoPE such as Llama-3.1's rope_scaling).
struct RopeFreqsForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kRopeFreqsForward;
  float* x;
  int64_t B, T, H, D;
  const double* inv_freq;
  int64_t pos_offset;
  KernelCall describe(Precision p) const;
};
struct RopeFreqsBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kRopeFreqsBackward;
  float* dx;
  int64_t B, T, H, D;
  const double* inv_freq;
  int64_t pos_offset;
  KernelCall describe(Precision p) const;
};

// Causal softmax attention with grouped KV heads: q(B,T,Hq,D), k(B,T,Hk,D),
// v(B,T,Hk,D) -> out(B,T,Hq,D); lse(B,Hq,T) keeps the log-sum-exp of each
// score row (scale 1/sqrt(D)) for backward, which recomputes the
// probabilities (no T*T buffer is kept between the calls).
// `causal` false: every query row sees all T keys (context parallelism's
// blocks of keys that lie wholly in the queries' past).
struct AttentionForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAttentionForward;
  const float *q, *k, *v;
  float *out, *lse;
  int64_t B, T, Hq, Hk, D;
  bool causal = true;
  KernelCall describe(Precision p) const;
};
// dq, dk, dv are overwritten. `out` and `lse` may be those of a larger
// attention that this (q, k, v) block is part of (ring attention's backward:
// the final output and log-sum-exp give each block's exact share).
struct AttentionBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAttentionBackward;
  const float *dout, *q, *k, *v, *out, *lse;
  float *dq, *dk, *dv;
  int64_t B, T, Hq, Hk, D;
  bool causal = true;
  KernelCall describe(Precision p) const;
};
// The log-sum-exp merge of ring attention: the running output out(B,T,H,D)
// with lse(B,H,T) and a block's (out_b, lse_b) over other keys become the
// attention over both key sets:
//   m = max(lse, lse_b), w = exp(lse - m), w_b = exp(lse_b - m),
//   out = (w out + w_b out_b) / (w + w_b), lse = m + log(w + w_b).
// A row with no visible keys has lse = -inf (weight 0).
struct AttentionMerge {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAttentionMerge;
  float *out, *lse;
  const float *out_b, *lse_b;
  int64_t B, T, H, D;
  KernelCall describe(Precision p) const;
};

// Token embedding over a vocabulary slice [v_begin, v_begin + V) of wte(V,C):
// rows of out(N,C) for tokens outside the slice are zero (vocab-parallel: the
// TP all-reduce sums the slices).
struct EmbeddingForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kEmbeddingForward;
  const int32_t* tokens;
  const float* wte;
  float* out;
  int64_t N, C, v_begin, V;
  KernelCall describe(Precision p) const;
};
// dwte row of each token in the slice += its dout row, tokens in order.
struct EmbeddingBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kEmbeddingBackward;
  const int32_t* tokens;
  const float* dout;
  float* dwte;
  int64_t N, C, v_begin, V;
  KernelCall describe(Precision p) const;
};

// x(R,C) row r += wpe(((row0 + r) % T), :) (learned positions; rows are
// (batch, time) flattened, row0 the first global row of x under SP).
struct AddPositions {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAddPositions;
  float* x;
  const float* wpe;
  int64_t R, C, T, row0;
  KernelCall describe(Precision p) const;
};
// dwpe(t, :) += the sum of dx rows r with (row0 + r) % T == t, rows in order.
struct PositionsBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kPositionsBackward;
  const float* dx;
  float* dwpe;
  int64_t R, C, T, row0;
  KernelCall describe(Precision p) const;
};

// x(R, ld) columns [c_begin, c_end) = value (masks the padded vocabulary).
struct FillColumns {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kFillColumns;
  float* x;
  int64_t R, ld, c_begin, c_end;
  float value;
  KernelCall describe(Precision p) const;
};

// Vocab-parallel cross-entropy in passes, so a communicator can combine the
// slices between them (Megatron's vocab-parallel loss):
//   row_max(N) = max over the local slice of logits(N,V) (then MAX-reduced);
struct XentRowMax {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kXentRowMax;
  const float* logits;
  float* row_max;
  int64_t N, V;
  KernelCall describe(Precision p) const;
};
//   row_sumexp(N) = sum exp(logit - row_max); target_logit(N) = the target's
//   logit when it lies in [v_begin, v_begin + V), else 0 (then SUM-reduced);
struct XentSumexpAndTarget {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kXentSumexpAndTarget;
  const float* logits;
  const int32_t* targets;
  const float* row_max;
  float *row_sumexp, *target_logit;
  int64_t N, V, v_begin;
  KernelCall describe(Precision p) const;
};
//   loss(n) = log(row_sumexp) + row_max - target_logit;
struct XentLoss {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kXentLoss;
  const float *row_max, *row_sumexp, *target_logit;
  float* loss;
  int64_t N;
  KernelCall describe(Precision p) const;
};
//   dlogits(N,V) = scale * (softmax - onehot(target)) with the global row_max
//   and row_sumexp; scale is usually 1 / (tokens of the step). May be in
//   place (dlogits == logits).
struct XentBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kXentBackward;
  const float* logits;
  const int32_t* targets;
  const float *row_max, *row_sumexp;
  float* dlogits;
  int64_t N, V, v_begin;
  float scale;
  KernelCall describe(Precision p) const;
};

// AdamW with decoupled weight decay (Loshchilov & Hutter), bias-corrected
// moments; `step` counts from 1. Updates param, m, v in place. The gradient
// enters as grad * grad_scale (clipping and the loss scale folded in, as
// fused optimizers take them, so no separate pass rescales the gradients).
struct AdamwUpdate {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAdamwUpdate;
  float* param;
  const float* grad;
  float *m, *v;
  int64_t n;
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  float grad_scale = 1.0f;
  KernelCall describe(Precision p) const;
};

// AdamwUpdate over many tensors in one call (Apex's multi_tensor_apply,
// Megatron's fused Adam): `count` segments, segment i given by
// table[4i .. 4i+3] = {param offset, state offset, n, decay} (int64, in the
// backend's memory, built once: the layout does not change between steps).
// param + param_offset is updated from grad, m, v at state offset; decay 1
// applies weight_decay, 0 none. `max_n`: the largest segment's n (launch
// shape); `total`: the segments' n summed (the op's bytes). Each element's
// arithmetic is AdamwUpdate's, so the result is bit for bit that of one
// AdamwUpdate per segment on the CPU.
struct AdamwMulti {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAdamwMulti;
  float* param;
  const float* grad;
  float *m, *v;
  const int64_t* table;
  int64_t count, max_n, total;
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  float grad_scale = 1.0f;
  KernelCall describe(Precision p) const;
};

// y(n) += x(n). With `base`: y = base + x, y's old contents unread (the
// copy and the add it replaces, the same bits).
struct AddInplace {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAddInplace;
  float* y;
  const float* x;
  int64_t n;
  const float* base = nullptr;
  KernelCall describe(Precision p) const;
};
// y(N,C) += bias(C).
struct AddBias {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAddBias;
  float* y;
  const float* bias;
  int64_t N, C;
  KernelCall describe(Precision p) const;
};
// dbias(C) += the sum of the rows of dy(N,C).
struct BiasBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kBiasBackward;
  const float* dy;
  float* dbias;
  int64_t N, C;
  KernelCall describe(Precision p) const;
};
// y(n) *= s.
struct ScaleInplace {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kScaleInplace;
  float* y;
  float s;
  int64_t n;
  KernelCall describe(Precision p) const;
};

// Saved activations in the table's 16-bit format (bf16 or fp16 by its
// precision; bf16 on the fp32 CPU table), round to nearest even, NaN stays NaN.
struct To16bit {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kTo16bit;
  const float* x;
  uint16_t* y;
  int64_t n;
  KernelCall describe(Precision p) const;
};
struct From16bit {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kFrom16bit;
  const uint16_t* x;
  float* y;
  int64_t n;
  KernelCall describe(Precision p) const;
};

// The compressed gradient reduction (exec/backend/grad_format.h for the
// formats): x(n) packed into y (grad_packed_bytes(format, n) bytes; fp8 puts
// the block's amax in its header first).
struct GradPack {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kGradPack;
  const float* x;
  uint8_t* y;
  int64_t n;
  GradFormat format;
  KernelCall describe(Precision p) const;
};
// y(n) = unpacked x, or y(n) += unpacked x when `accumulate`.
struct GradUnpack {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kGradUnpack;
  const uint8_t* x;
  float* y;
  int64_t n;
  GradFormat format;
  bool accumulate;
  KernelCall describe(Precision p) const;
};

// Mixture-of-experts (exec/model/moe_layer.h). E experts, top-k per token;
// M permuted rows (token copies sorted by expert).
// Router: probs(N,E) = softmax(logits), lse(N) = logsumexp(logits); each
// token's k largest probabilities (ties: the lower expert index first, so
// every layout routes alike) into topk_idx(N,k) (descending) and topk_w(N,k):
// the probability, or divided by the k's sum when `normalize` (Mixtral,
// Qwen-MoE norm_topk_prob).
struct MoeRouterForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kMoeRouterForward;
  const float* logits;
  float *probs, *lse;
  int32_t* topk_idx;
  float* topk_w;
  int64_t N, E, k;
  bool normalize;
  KernelCall describe(Precision p) const;
};
// dlogits(N,E) = the softmax's backward of dprobs, where dprobs(t,e) =
// aux_grad(e) (the load-balancing loss's d/dprobs, null: none) + what the
// weights' gradient dw(N,k) gives through top-k (and the normalization);
// plus the z-loss's z_grad * lse(t) * probs(t,e) (d(z_grad/2 * lse^2)).
struct MoeRouterBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kMoeRouterBackward;
  const float *probs, *lse;
  const int32_t* topk_idx;
  const float *topk_w, *dw, *aux_grad;
  float z_grad;
  float* dlogits;
  int64_t N, E, k;
  bool normalize;
  KernelCall describe(Precision p) const;
};
// y(M,C): y[r] = x[rows[r]] (x has at least max(rows)+1 rows).
struct MoeGather {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kMoeGather;
  const float* x;
  const int32_t* rows;
  float* y;
  int64_t M, C;
  KernelCall describe(Precision p) const;
};
// out(N,C) (=, or += when `accumulate`) sum over j < k of w[t,j] * y[slot_rows[t*k+j]]
// (w null: weight 1; slot row -1: a dropped slot, nothing), in j order.
struct MoeUnpermute {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kMoeUnpermute;
  const float* y;
  const int32_t* slot_rows;
  const float* w;
  float* out;
  int64_t N, k, C;
  bool accumulate;
  KernelCall describe(Precision p) const;
};
// The weighted MoeUnpermute's backward: dy[slot_rows[t*k+j]] = w[t,j] * dout[t]
// (every one of the M rows is some slot's), dw[t,j] = dout[t] . y[row] (0 for a
// dropped slot), both overwritten.
struct MoeUnpermuteBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kMoeUnpermuteBackward;
  const float *dout, *y;
  const int32_t* slot_rows;
  const float* w;
  float *dy, *dw;
  int64_t N, k, C;
  KernelCall describe(Precision p) const;
};

// A per-row sigmoid gate (Qwen2-MoE's shared expert): out(N,C) += sigmoid(g[t]) * y[t].
struct SigmoidGateForward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kSigmoidGateForward;
  const float *g, *y;
  float* out;
  int64_t N, C;
  KernelCall describe(Precision p) const;
};
// Its backward: dy[t] = sigmoid(g[t]) * dout[t]; dg[t] = sigmoid'(g[t]) * (dout[t] . y[t]),
// both overwritten.
struct SigmoidGateBackward {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kSigmoidGateBackward;
  const float *dout, *g, *y;
  float *dy, *dg;
  int64_t N, C;
  KernelCall describe(Precision p) const;
};

// Host results: these wait for the work queued before them.
// The sum of x(n), in double (elements in order on the CPU).
struct Sum {
  using Result = double;
  static constexpr KernelOp kOp = KernelOp::kSum;
  const float* x;
  int64_t n;
  KernelCall describe(Precision p) const;
};
// acc[0] += scale * sum of x(n), on the device: the loss of each block of
// rows added up without a host read per block (acc: one double in the
// backend's memory; the sum in double, elements in order on the CPU, so
// acc ends bit for bit where a host adding Sum's results would).
struct AccumulateSum {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAccumulateSum;
  const float* x;
  int64_t n;
  double scale;
  double* acc;
  KernelCall describe(Precision p) const;
};
// The gradient norm's many pieces without a wait per piece: queue each sum of
// squares, then take their total (added in call order) at once.
struct AddSumSquares {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAddSumSquares;
  const float* x;
  int64_t n;
  KernelCall describe(Precision p) const;
};
// AddSumSquares over `count` segments of x in one call: table[2i .. 2i+1] =
// {offset, n} (int64, backend memory); one piece per segment, queued in
// table order (the same total as one AddSumSquares per segment). max_n and
// total as AdamwMulti's.
struct AddSumSquaresMulti {
  using Result = void;
  static constexpr KernelOp kOp = KernelOp::kAddSumSquaresMulti;
  const float* x;
  const int64_t* table;
  int64_t count, max_n, total;
  KernelCall describe(Precision p) const;
};
struct TakeSumSquares {
  using Result = double;
  static constexpr KernelOp kOp = KernelOp::kTakeSumSquares;
  KernelCall describe(Precision p) const;
};

}  // namespace loom::exec
