// Each op's description: its shape (the arguments that size it, in field
// order) and its work (exec/backend/kernel_call.h: flops as written, the
// bytes it must move at least; accumulated outputs count a read and a write).
#include "exec/backend/kernel_ops.h"

#include <algorithm>
#include <initializer_list>

namespace loom::exec {

const char* kernel_op_name(KernelOp op) {
  switch (op) {
#define LOOM_KERNEL_OP_NAME(Type, name) \
  case KernelOp::k##Type:               \
    return #name;
    LOOM_KERNEL_OPS(LOOM_KERNEL_OP_NAME)
#undef LOOM_KERNEL_OP_NAME
  }
  return "?";
}

namespace {

constexpr double kF32 = 4;  // bytes of an fp32 (or int32) element

KernelCall call(KernelOp op, std::initializer_list<KernelCall::Dim> dims, double flops, double bytes) {
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

// RoPE, either frequency source: each element read and written once.
KernelCall rope(KernelOp op, int64_t B, int64_t T, int64_t H, int64_t D, int64_t pos_offset) {
  return call(op, {{"B", B}, {"T", T}, {"H", H}, {"D", D}, {"pos_offset", pos_offset}}, 0,
              kF32 * 2 * double(B) * double(T) * double(H) * double(D));
}

}  // namespace

KernelCall GroupedGemm::describe(Precision p) const {
  const double operand = p == Precision::kFp32 ? 4 : 2;
  double flops = 0, bytes = 0;
  int64_t rows = 0;
  for (int64_t g = 0; g < count; ++g) {
    const double m = double(groups[g].M), n = double(groups[g].N), k = double(groups[g].K);
    flops += 2 * m * n * k;
    bytes += operand * (m * k + k * n) + kF32 * m * n * (beta != 0.f ? 2 : 1);
    rows += groups[g].M;
  }
  return call(kOp, {{"groups", count}, {"M", rows}, {"trans_a", trans_a}, {"trans_b", trans_b}}, flops, bytes);
}

// An epilogue reads the bias and writes GELU's output, or reads GELU's
// pre-activation (dGELU) and adds into the bias gradient; its shape names it
// (1 bias, 2 GELU, 3 both, 4 dGELU, 12 dGELU with the bias gradient), so a
// profile keeps fused and plain GEMMs apart.
KernelCall Gemm::describe(Precision p) const {
  const double m = double(M), n = double(N), k = double(K);
  const double operand = p == Precision::kFp32 ? 4 : 2;  // 16-bit operands on mixed-precision tables
  const double bytes = operand * (m * k + k * n) + kF32 * m * n * (beta != 0.f ? 2 : 1) + (bias ? kF32 * n : 0) +
                       (gelu_out ? kF32 * m * n : 0) + (dgelu_pre ? kF32 * m * n : 0) + (dbias ? 2 * kF32 * n : 0);
  KernelCall c = call(kOp, {{"M", M}, {"N", N}, {"K", K}, {"trans_a", trans_a}, {"trans_b", trans_b}}, 2 * m * n * k, bytes);
  if (const int64_t epilogue = (bias ? 1 : 0) + (gelu_out ? 2 : 0) + (dgelu_pre ? 4 : 0) + (dbias ? 8 : 0))
    c.dims[size_t(c.num_dims++)] = {"epilogue", epilogue};
  return c;
}

// A fused residual reads one more (N,C) tensor and writes the sum; a fused
// dx_add reads one more.
KernelCall LayernormForward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 0, kF32 * ((residual ? 4 : 2) * n * ch + 2 * ch + 2 * n));
}

KernelCall LayernormBackward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  // dy, x read, dx written; w read, dw and db accumulated; mean, rstd read.
  return call(kOp, {{"N", N}, {"C", C}}, 0, kF32 * ((dx_add ? 4 : 3) * n * ch + 5 * ch + 2 * n));
}

KernelCall RmsnormForward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 0, kF32 * ((residual ? 4 : 2) * n * ch + ch + n));
}

KernelCall RmsnormBackward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 0, kF32 * ((dx_add ? 4 : 3) * n * ch + 3 * ch + n));
}

KernelCall GeluForward::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * 2 * double(n)); }
KernelCall GeluBackward::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * 3 * double(n)); }
KernelCall SwigluForward::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * 3 * double(n)); }
KernelCall SwigluBackward::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * 5 * double(n)); }

KernelCall RopeForward::describe(Precision) const { return rope(kOp, B, T, H, D, pos_offset); }
KernelCall RopeBackward::describe(Precision) const { return rope(kOp, B, T, H, D, pos_offset); }
KernelCall RopeFreqsForward::describe(Precision) const { return rope(kOp, B, T, H, D, pos_offset); }
KernelCall RopeFreqsBackward::describe(Precision) const { return rope(kOp, B, T, H, D, pos_offset); }

KernelCall AttentionForward::describe(Precision) const {
  const double b = double(B), t = double(T), hq = double(Hq), hk = double(Hk), d = double(D);
  // S = Q K^T and O = P V over the causal half of the scores (all of them
  // when not causal).
  const double flops = 2 * (2 * b * hq * t * t * d / (causal ? 2 : 1));
  const double bytes = kF32 * (2 * b * t * hq * d + 2 * b * t * hk * d + b * hq * t);
  return call(kOp, {{"B", B}, {"T", T}, {"Hq", Hq}, {"Hk", Hk}, {"D", D}}, flops, bytes);
}

KernelCall AttentionBackward::describe(Precision) const {
  const double b = double(B), t = double(T), hq = double(Hq), hk = double(Hk), d = double(D);
  // S again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: five causal halves.
  const double flops = 5 * (2 * b * hq * t * t * d / (causal ? 2 : 1));
  // dout, q, out read and dq written (Hq heads); k, v read and dk, dv written; lse read.
  const double bytes = kF32 * (4 * b * t * hq * d + 4 * b * t * hk * d + b * hq * t);
  return call(kOp, {{"B", B}, {"T", T}, {"Hq", Hq}, {"Hk", Hk}, {"D", D}}, flops, bytes);
}

KernelCall AttentionMerge::describe(Precision) const {
  const double n = double(B) * double(T) * double(H);
  // out and out_b read, out written; lse and lse_b read, lse written.
  return call(kOp, {{"B", B}, {"T", T}, {"H", H}, {"D", D}}, 4 * n * double(D), kF32 * (3 * n * double(D) + 3 * n));
}

KernelCall EmbeddingForward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  return call(kOp, {{"N", N}, {"C", C}, {"v_begin", v_begin}, {"V", V}}, 0, kF32 * (n + 2 * n * ch));
}

KernelCall EmbeddingBackward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  // Tokens and dout read; a row of dwte accumulated per token (at most N rows).
  return call(kOp, {{"N", N}, {"C", C}, {"v_begin", v_begin}, {"V", V}}, 0, kF32 * (n + 3 * n * ch));
}

KernelCall AddPositions::describe(Precision) const {
  const double r = double(R), ch = double(C), rows = double(std::min(R, T));
  return call(kOp, {{"R", R}, {"C", C}, {"T", T}, {"row0", row0}}, 0, kF32 * (2 * r * ch + rows * ch));
}

KernelCall PositionsBackward::describe(Precision) const {
  const double r = double(R), ch = double(C), rows = double(std::min(R, T));
  return call(kOp, {{"R", R}, {"C", C}, {"T", T}, {"row0", row0}}, 0, kF32 * (r * ch + 2 * rows * ch));
}

KernelCall FillColumns::describe(Precision) const {
  return call(kOp, {{"R", R}, {"ld", ld}, {"c_begin", c_begin}, {"c_end", c_end}}, 0,
              kF32 * double(R) * double(std::max<int64_t>(0, c_end - c_begin)));
}

KernelCall XentRowMax::describe(Precision) const {
  const double n = double(N), v = double(V);
  return call(kOp, {{"N", N}, {"V", V}}, 0, kF32 * (n * v + n));
}

KernelCall XentSumexpAndTarget::describe(Precision) const {
  const double n = double(N), v = double(V);
  return call(kOp, {{"N", N}, {"V", V}, {"v_begin", v_begin}}, 0, kF32 * (n * v + 4 * n));
}

KernelCall XentLoss::describe(Precision) const { return call(kOp, {{"N", N}}, 0, kF32 * 4 * double(N)); }

KernelCall XentBackward::describe(Precision) const {
  const double n = double(N), v = double(V);
  return call(kOp, {{"N", N}, {"V", V}, {"v_begin", v_begin}}, 0, kF32 * (2 * n * v + 3 * n));
}

KernelCall AdamwUpdate::describe(Precision) const {
  // param, grad, m, v read; param, m, v written.
  return call(kOp, {{"n", n}, {"step", step}}, 0, kF32 * 7 * double(n));
}

KernelCall AdamwMulti::describe(Precision) const {
  // AdamwUpdate's 7 floats per element, and the table read once.
  return call(kOp, {{"n", total}, {"count", count}, {"step", step}}, 0, kF32 * 7 * double(total) + 32 * double(count));
}

KernelCall AddInplace::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * 3 * double(n)); }  // with or without base

KernelCall AddBias::describe(Precision) const {
  const double n = double(N), ch = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 0, kF32 * (2 * n * ch + ch));
}

KernelCall BiasBackward::describe(Precision) const {
  const double n = double(N), ch = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 0, kF32 * (n * ch + 2 * ch));
}

KernelCall ScaleInplace::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * 2 * double(n)); }
KernelCall To16bit::describe(Precision) const { return call(kOp, {{"n", n}}, 0, 6 * double(n)); }
KernelCall From16bit::describe(Precision) const { return call(kOp, {{"n", n}}, 0, 6 * double(n)); }
KernelCall GradPack::describe(Precision) const {
  return call(kOp, {{"n", n}, {"fp8", format == GradFormat::kFp8 ? 1 : 0}}, 0,
              kF32 * double(n) * (format == GradFormat::kFp8 ? 2 : 1) + double(grad_packed_bytes(format, n)));
}
KernelCall GradUnpack::describe(Precision) const {
  return call(kOp, {{"n", n}, {"fp8", format == GradFormat::kFp8 ? 1 : 0}, {"accumulate", accumulate ? 1 : 0}}, 0,
              double(grad_packed_bytes(format, n)) + kF32 * double(n) * (accumulate ? 2 : 1));
}
KernelCall MoeRouterForward::describe(Precision) const {
  const double n = double(N), e = double(E), kk = double(k);
  return call(kOp, {{"N", N}, {"E", E}, {"k", k}}, 0, kF32 * (2 * n * e + n + 2 * n * kk));
}
KernelCall MoeRouterBackward::describe(Precision) const {
  const double n = double(N), e = double(E), kk = double(k);
  return call(kOp, {{"N", N}, {"E", E}, {"k", k}}, 0, kF32 * (2 * n * e + n + 3 * n * kk + e));
}
KernelCall MoeGather::describe(Precision) const {
  const double m = double(M), c = double(C);
  return call(kOp, {{"M", M}, {"C", C}}, 0, kF32 * (2 * m * c + m));
}
KernelCall MoeUnpermute::describe(Precision) const {
  const double n = double(N), kk = double(k), c = double(C);
  return call(kOp, {{"N", N}, {"k", k}, {"C", C}, {"accumulate", accumulate ? 1 : 0}}, 2 * n * kk * c,
              kF32 * (n * kk * c + n * c * (accumulate ? 2 : 1) + 2 * n * kk));
}
KernelCall MoeUnpermuteBackward::describe(Precision) const {
  const double n = double(N), kk = double(k), c = double(C);
  return call(kOp, {{"N", N}, {"k", k}, {"C", C}}, 4 * n * kk * c, kF32 * (2 * n * kk * c + n * c + 3 * n * kk));
}
KernelCall SigmoidGateForward::describe(Precision) const {
  const double n = double(N), c = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 2 * n * c, kF32 * (3 * n * c + n));
}
KernelCall SigmoidGateBackward::describe(Precision) const {
  const double n = double(N), c = double(C);
  return call(kOp, {{"N", N}, {"C", C}}, 3 * n * c, kF32 * (3 * n * c + 2 * n));
}
KernelCall Sum::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * double(n)); }
KernelCall AccumulateSum::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * double(n) + 16); }
KernelCall AddSumSquares::describe(Precision) const { return call(kOp, {{"n", n}}, 0, kF32 * double(n)); }
KernelCall AddSumSquaresMulti::describe(Precision) const {
  return call(kOp, {{"n", total}, {"count", count}}, 0, kF32 * double(total) + 16 * double(count));
}
KernelCall TakeSumSquares::describe(Precision) const { return call(kOp, {}, 0, 0); }

}  // namespace loom::exec
