#include "exec/backend/kernel_call.h"

namespace loom::exec {

const char* kernel_op_name(KernelOp op) {
  switch (op) {
    case KernelOp::kGemm: return "gemm";
    case KernelOp::kLayernormForward: return "layernorm_forward";
    case KernelOp::kLayernormBackward: return "layernorm_backward";
    case KernelOp::kRmsnormForward: return "rmsnorm_forward";
    case KernelOp::kRmsnormBackward: return "rmsnorm_backward";
    case KernelOp::kGeluForward: return "gelu_forward";
    case KernelOp::kGeluBackward: return "gelu_backward";
    case KernelOp::kSwigluForward: return "swiglu_forward";
    case KernelOp::kSwigluBackward: return "swiglu_backward";
    case KernelOp::kRopeForward: return "rope_forward";
    case KernelOp::kRopeBackward: return "rope_backward";
    case KernelOp::kAttentionForward: return "attention_forward";
    case KernelOp::kAttentionBackward: return "attention_backward";
    case KernelOp::kEmbeddingForward: return "embedding_forward";
    case KernelOp::kEmbeddingBackward: return "embedding_backward";
    case KernelOp::kAddPositions: return "add_positions";
    case KernelOp::kPositionsBackward: return "positions_backward";
    case KernelOp::kFillColumns: return "fill_columns";
    case KernelOp::kXentRowMax: return "xent_row_max";
    case KernelOp::kXentSumexpAndTarget: return "xent_sumexp_and_target";
    case KernelOp::kXentLoss: return "xent_loss";
    case KernelOp::kXentBackward: return "xent_backward";
    case KernelOp::kAdamwUpdate: return "adamw_update";
    case KernelOp::kAddInplace: return "add_inplace";
    case KernelOp::kAddBias: return "add_bias";
    case KernelOp::kBiasBackward: return "bias_backward";
    case KernelOp::kScaleInplace: return "scale_inplace";
    case KernelOp::kTo16bit: return "to_16bit";
    case KernelOp::kFrom16bit: return "from_16bit";
    case KernelOp::kSum: return "sum";
    case KernelOp::kAddSumSquares: return "add_sum_squares";
    case KernelOp::kTakeSumSquares: return "take_sum_squares";
  }
  return "?";
}

std::string KernelCall::to_string() const {
  std::string s = kernel_op_name(op);
  if (num_dims == 0) return s;
  s += " (";
  for (int i = 0; i < num_dims; ++i) {
    if (i) s += ", ";
    s += dims[size_t(i)].name;
    s += '=';
    s += std::to_string(dims[size_t(i)].value);
  }
  s += ')';
  return s;
}

}  // namespace loom::exec
