// ModelChunk: one pipeline chunk of the transformer on one rank — the token
// embedding (first chunk), a run of layers, and the final norm + LM head with
// the vocab-parallel cross-entropy (last chunk) — with forward and backward
// written op by op over the backend's kernel table (exec/backend/kernels.h), Megatron tensor parallelism
// (column/row-parallel linears, vocab-parallel embedding and loss) and
// optional sequence parallelism, and full / selective recompute.
//
// Activations are kept per micro-batch (several are in flight under 1F1B);
// backward(micro) consumes and frees them.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/layout.h"
#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"
#include "exec/model/context_parallel.h"
#include "exec/model/moe_layer.h"
#include "exec/model/params.h"
#include "exec/model/wgrad_defer.h"

namespace loom::exec {

struct ChunkConfig {
  ModelDims dims;
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;
  int64_t micro_batch = 1;  // B: sequences per micro-batch (cpu_ops.h letters)
  int64_t seq = 0;          // T: the tokens of a sequence on this rank (T / cp under CP)
  int tp_size = 1, tp_rank = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  // With full recompute: only the chunk's first recompute_layers layers
  // recompute, the rest keep their activations (Megatron's block method,
  // Layout::recompute_layers); 0 = every layer.
  int recompute_layers = 0;
  MoeRun moe;  // MoE layers: losses, capacity, the EP group
  CpGroup cp;  // context parallelism: rows in the (2, B, seq/2) order of context_parallel.h
  // The head's gradients in its forward, block by block of rows
  // (core/executor_head.h; ZeRO 0-1 only). head_block_rows: rows per block,
  // 0 for executor_head_block_rows' choice.
  bool head_grad_in_forward = false;
  int64_t head_block_rows = 0;
  // Mixed precision: the saved activations that backward reads only as a
  // weight-gradient GEMM's operand (the norm outputs, the MLP's second GEMM
  // input) stay in 16 bits, read by the GEMM as they are (Gemm::B16), instead
  // of being restored to fp32 and cast back per GEMM. Same products bit for
  // bit; less memory and traffic in backward. LOOM_GEMM_PACKED=0 turns it off.
  bool gemm_reads_packed = true;
};

class ModelChunk {
 public:
  // `tp` may be null when tp_size == 1. Parameters are added to `params`
  // (shared by all chunks of the rank) by the caller via add_chunk_params.
  ModelChunk(const ChunkConfig& cfg, ParamStore* params, ComputeBackend* backend, Communicator* tp);
  ~ModelChunk();

  // Rows of the activation this chunk receives / sends: B*T, or B*T/tp with SP.
  int64_t activation_rows() const;
  int64_t activation_floats() const { return activation_rows() * cfg_.dims.C; }

  // Every pointer is the backend's memory (device memory on the CUDA backend).
  // Forward of one micro-batch. First chunk: `tokens` (B*T); otherwise `input`
  // (activation_floats()). Last chunk: `targets` (B*T) and `loss_scale`
  // (1 / tokens of the whole step); it adds the micro-batch's summed token
  // loss * loss_scale to a total on the device (take_loss() reads it). Other
  // chunks write `output`.
  Status forward(int micro, const int32_t* tokens, const float* input, const int32_t* targets, float loss_scale,
                 float* output);
  // The last chunk: the loss the forwards added since the last call (one
  // read of the device total, which starts again at 0); 0 on other chunks.
  double take_loss();
  // Backward of one micro-batch: `dout` is the gradient of the output (not
  // used on the last chunk); writes `dinput` (not on the first chunk).
  // Gradients accumulate into the ParamStore.
  Status backward(int micro, const float* dout, float* dinput);
  // The same in `num_parts` parts run in order (the program's split backward,
  // core/program.h backward_part_layers): part 0 takes `dout` and runs the
  // head and the top layers, the last part runs the bottom layers and the
  // embedding and writes `dinput`; when part k returns, the gradients of its
  // layers (and of the head after part 0) are final for this micro-batch,
  // which is what lets gradient bucket k's sync start.
  Status backward_part(int micro, const float* dout, float* dinput, int part, int num_parts, bool defer_wgrad = false);
  // Zero-bubble backward (DualPipeV, core/program.h Op::defers_wgrad): with
  // `defer_wgrad` the layers' weight-gradient GEMMs (attention, dense MLP, a
  // MoE layer's experts, shared experts and router; the norms, biases, head
  // and embedding still take theirs in the backward) are not run but kept,
  // with the saved inputs and output gradients they read, until
  // weight_grad(micro) runs them: the micro-batch's gradients are complete
  // only then.
  Status weight_grad(int micro);
  // Micro-batches whose weight gradients wait for weight_grad.
  size_t deferred_wgrads() const { return deferred_.size(); }

  // fp16 loss scaling: the gradient of the loss is multiplied by `s` (the
  // reported loss is not).
  void set_grad_scale(float s) { grad_scale_ = s; }
  const ChunkConfig& config() const { return cfg_; }
  // The MoE losses and drops of the forwards since the last call (recomputed
  // forwards not counted).
  MoeStats take_moe_stats() {
    MoeStats s = moe_stats_;
    moe_stats_ = MoeStats{};
    return s;
  }
  size_t in_flight() const { return saved_.size(); }

 private:
  // Whether `layer` (global index) keeps only its input and re-runs its
  // forward in backward.
  bool recomputes(int layer) const {
    return cfg_.recompute == Recompute::kFull &&
           (cfg_.recompute_layers <= 0 || layer - cfg_.first_layer < cfg_.recompute_layers);
  }

  struct LayerActs;
  struct MicroActs;
  struct BackwardInFlight;
  Status layer_forward(int layer, const float* x_in, float* x_out, LayerActs& a, bool keep);
  // `defer` (not null): the layer's linear weight-gradient GEMMs go there.
  Status layer_backward(int layer, const float* dx_out, float* dx_in, LayerActs& a, DeferredWgrad* defer);
  // The head's loss and gradients in its forward (ChunkConfig::head_grad_in_forward).
  double* loss_total();  // the device total, allocated at first use
  Status head_loss_block(const float* hf, const int32_t* targets, const float* W, int64_t n, float loss_scale,
                         float* logits, float* row_max, float* sumexp, float* target_logit, float* loss);
  Status fused_head(MicroActs* acts, const int32_t* targets, const float* W, float* dW, float loss_scale);
  // TP collectives (no-ops when tp_size == 1).
  Status tp_all_reduce(float* buf, int64_t n);
  Status tp_all_gather_rows(const float* local, float* full, int64_t local_rows);
  Status tp_reduce_scatter_rows(const float* full, float* local, int64_t local_rows);
  // "g" (enter a TP region: gather under SP) and "f" (leave it: reduce).
  Status enter_tp(const float* x_local, float* x_full);
  Status leave_tp(float* partial_full, float* out_local);
  Status leave_tp_backward(float* dpartial_full, float* dlocal);
  // Position-dependent ops, over the whole sequence or this CP rank's chunks.
  void apply_rope(float* x, int64_t H, bool backward);
  void positions(float* x, bool backward);
  Status attention_forward(LayerActs& a);
  Status attention_backward(const float* dctx, LayerActs& a, float* dq, float* dk, float* dv);

  ChunkConfig cfg_;
  ParamStore* params_;
  ComputeBackend* backend_;
  Communicator* tp_;
  std::map<int, std::unique_ptr<MicroActs>> saved_;
  std::unique_ptr<BackwardInFlight> bwd_;
  std::map<int, DeferredWgrad> deferred_;  // by micro-batch, until weight_grad
  DeviceBuffer loss_total_;  // one double (the last chunk): the forwards' loss since take_loss()
  float grad_scale_ = 1.f;
  std::unique_ptr<MoeLayer> moe_;  // when the model has MoE layers
  std::unique_ptr<CpAttention> cp_attn_;  // under context parallelism (ring or all-gathered K/V)
  MoeStats moe_stats_;
};

}  // namespace loom::exec
