// SimOptions: modelling choices that are neither the model, the hardware, the
// training spec nor the layout. Each default is stated and documented in
// docs/simulator.md; none is fitted to published training runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/program.h"
#include "sim/tp_overlap.h"

namespace loom {

// How FP8 training scales its tensors (Transformer Engine recipes; torchao's
// "tensorwise" is current scaling). Delayed: the scale comes from an amax
// history, and the cast kernel records the new amax as it goes (one pass).
// Current: each tensor's amax is reduced first, then it is cast (two passes).
enum class Fp8Scaling { kDelayed, kCurrent };
// What recompute=selective re-runs in backward (SimOptions::selective_recompute).
enum class SelectiveRecompute { kAttentionCore, kEveryOtherMatmul };
const char* selective_recompute_name(SelectiveRecompute s);
// "attention_core" or "every_other_matmul"; false for anything else.
bool parse_selective_recompute(const std::string& text, SelectiveRecompute* out);
// How the training stack computes the loss over the vocabulary (the memory
// passes over the logits, docs/simulator.md §3.5): each names the code it
// reads.
//   fused          one read of the logits, an fp32 softmax written and read
//                  back, the gradient written (the default where no stack
//                  says otherwise)
//   megatron       Megatron's vocab_parallel_cross_entropy, unfused
//   megatron_fused Megatron-core's cross_entropy_loss_fusion, its functions
//                  under torch.compile (jit_fuser)
//   te             Transformer Engine's Triton cross entropy (online softmax,
//                  the gradient written in place in the logits' dtype)
//   torch          torch.nn.functional.cross_entropy on fp32-cast logits, eager
enum class CrossEntropyImpl { kFused, kMegatron, kMegatronFused, kTe, kTorch };
const char* cross_entropy_name(CrossEntropyImpl c);
// One of the names above; false for anything else.
bool parse_cross_entropy(const std::string& text, CrossEntropyImpl* out);
// The names, for an error message: "fused, megatron, megatron_fused, te or torch".
std::string cross_entropy_names();
// Bytes the loss moves per logit, forward and backward, for logits of
// `logit_bytes` each (2 under bf16 / fp16 / fp8, whose output layer stays
// 16-bit; 4 under fp32).
struct CrossEntropyBytes {
  double forward = 0, backward = 0;
  int forward_kernels = 2, backward_kernels = 2;  // those over the logits
};
CrossEntropyBytes cross_entropy_bytes(CrossEntropyImpl c, double logit_bytes);
// How the stack writes a dense layer's non-GEMM work (docs/simulator.md §3.3):
//   fused        fused kernels (Transformer Engine, Megatron's fusions, Loom's
//                executor): a fused QKV projection, one RoPE pass, one
//                SwiGLU kernel (the default)
//   torch_eager  torchtitan's Llama block in eager PyTorch
//                (torchtitan/models/llama/model.py): separate q, k and v
//                projections; RoPE through fp32 complex numbers (cast, complex
//                multiply, cast back); repeat_kv materializing the K and V
//                heads for GQA; F.silu and the multiply as two kernels. The
//                norms stay one kernel (the shipped configs' fused_rmsnorm).
enum class LayerOps { kFused, kTorchEager };
const char* layer_ops_name(LayerOps o);
// "fused" or "torch_eager"; false for anything else.
bool parse_layer_ops(const std::string& text, LayerOps* out);
// How a MoE layer's local experts run their GEMMs:
//   grouped     one grouped kernel for all of them (cuBLASLt or CUTLASS
//               grouped GEMM, torch._grouped_mm, DeepGEMM, Loom's executor;
//               the default)
//   per_expert  one GEMM per local expert: Transformer Engine's
//               GroupedLinear, whose general_grouped_gemm runs
//               multi_stream_cublas_gemm (one cuBLAS GEMM per expert, round-
//               robin on 4 streams; TransformerEngine #853, 2024-06, still the
//               default at d0067d0da, 2026-08), and DeepSpeed's
//               Experts.forward loop
enum class ExpertGemm { kGrouped, kPerExpert };
const char* expert_gemm_name(ExpertGemm e);
// "grouped" or "per_expert"; false for anything else.
bool parse_expert_gemm(const std::string& text, ExpertGemm* out);
// Which model chunks a stack splits into gradient buckets by size
// (SimOptions::grad_bucket_params); the others sync as one bucket each:
//   all    every chunk (Apex's DistributedFusedAdam)
//   first  pipeline rank 0's first chunk only: Megatron-core's DDP sets
//          bucket_size = None where pp_rank > 0 ("data-parallel
//          communication on these stages is not on the critical path",
//          distributed_data_parallel.py) and the trainers pass
//          disable_bucketing for every chunk after the first
//          (megatron/training/training.py, NeMo 2's megatron_parallel.py)
//   none   one bucket per chunk (NeMo 2 and Megatron-LM also disable the
//          first chunk's bucketing under overlap_param_gather_with_optimizer_step)
enum class BucketedChunks { kAll, kFirst, kNone };
const char* bucketed_chunks_name(BucketedChunks b);
// "all", "first" or "none"; false for anything else.
bool parse_bucketed_chunks(const std::string& text, BucketedChunks* out);
const char* fp8_scaling_name(Fp8Scaling s);
// "delayed" or "current" (also "tensorwise"); false for anything else.
bool parse_fp8_scaling(const std::string& text, Fp8Scaling* out);
// SimOptions::optimizer_master_bytes must be 2 or 4, optimizer_moment_bytes
// 2 or 4: the message names `where` and the values allowed.
Status check_optimizer_state_bytes(double master_bytes, double moment_bytes, const std::string& where);
// SimOptions::moe_dispatch_sms as a file states it (`key` names the field):
// 0 (NCCL's channels) or the SMs the MoE dispatcher holds, at most 4096.
Status check_moe_dispatch_sms(int64_t sms, const std::string& key);
// The same for overrides a request or a validation row states, 0 meaning
// not stated (the framework's, else 4); apply_optimizer_state_overrides
// (below SimOptions) applies them.
Status check_optimizer_state_overrides(double master_bytes, double moment_bytes, const std::string& where);

// The largest memory_headroom a plan takes: a plan that keeps more than
// this free is a typo, not a margin.
inline constexpr double kMaxMemoryHeadroom = 0.9;
// A headroom a plan, a request or a validation row may state: in [0, 0.9]
// (NaN is not).
inline bool valid_memory_headroom(double h) { return h >= 0 && h <= kMaxMemoryHeadroom; }
// The share of a device's memory a layout may use under `headroom`.
inline double usable_memory_fraction(double headroom) {
  return 1 - (headroom > 0 ? std::min(headroom, kMaxMemoryHeadroom) : 0.0);
}

struct SimOptions {
  // The training stack whose defaults these options were set from
  // (frameworks/<name>.json, sim/framework.h); empty: none named.
  std::string framework;
  // With no framework named, the buffers are those of Loom's own executor
  // (`loom execute`: sim/memory_model.h, e.g. fp32 logits that become their
  // gradient in place, backward's workspace, the pipeline's buffers from the
  // program). False: the papers' accounting of an unnamed stack (the
  // validation's published runs that name none).
  bool loom_executor = true;
  // Loom's executor's buffers and costs apply: no framework named and
  // loom_executor set.
  bool for_loom_executor() const { return framework.empty() && loom_executor; }
  // The DP collectives progress only while the host calls into the
  // communicator: Open MPI's non-blocking collectives (libnbc) on CPU ranks,
  // without an asynchronous progress thread, move data inside MPI calls, so
  // the executor's reductions and gathers advance in its waits, not beside
  // its compute. The event engine then starts each one when the compute op
  // before its first consumer ends (sim/simulate.cc). On for CPU profiles
  // (make_sim_options); NCCL runs them on a stream of their own.
  bool dp_comm_host_progress = false;
  // Attention kernel: true = a fused flash-style kernel (no s*s activations
  // kept, causal blocks skipped); false = materialized scores + fused
  // scale-mask-softmax as in Megatron-LM 2021.
  bool flash_attention = true;
  // Dropout masks kept for backward (1 byte per element). nullopt-like: -1 =
  // from the model (GPT-2 family: on; Llama-style: off), 0 off, 1 on.
  int dropout = -1;
  // Megatron's fp32 main-gradient convention (4-byte grads) instead of the
  // ZeRO paper's 2-byte grads for 16-bit training.
  bool fp32_main_grads = false;
  // Adam's state a parameter, in bytes: the master copy of a 16-bit or FP8
  // run's weights (4, fp32; 2, the 16 low bits beside the bf16 weights:
  // Apex's DistributedFusedAdam and Transformer Engine's FusedAdam
  // store_param_remainders) and each of the two moments (4, fp32; 2, bf16 as
  // DeepSeek-V3 and Megatron-core's --exp-avg-dtype bf16 keep them). Loom's
  // executor keeps fp32 states whatever these say.
  double optimizer_master_bytes = 4;
  double optimizer_moment_bytes = 4;
  // Memory the runtime takes before any tensor: CUDA context, cuBLAS and
  // Transformer Engine workspaces, the collective communicators' NCCL
  // buffers (bytes per GPU rank; its parts in docs/simulator.md section 2.5).
  // NCCL's point-to-point buffers are counted apart (sim/nccl_buffers.h).
  double runtime_reserve_bytes = 1.5e9;
  // Allocator fragmentation allowance, as a fraction of the transient tensor
  // bytes (activations and communication buffers).
  double fragmentation_fraction = 0.05;
  // Device memory a plan keeps free, as a fraction of the profile's
  // capacity: a layout fits when its worst stage needs at most
  // (1 - memory_headroom) x capacity (usable_memory_bytes, memory_model.h).
  // 0 (the default) sets the model's count of live tensors against the whole
  // device. What the caching allocator reserves beyond the live tensors is
  // not modelled, and on some stacks it is large (docs/validation.md,
  // "Layout sweeps": nvidia-smi 3-18.5 GB above Loom's count on DeepSpeed
  // 2022). At most kMaxMemoryHeadroom.
  double memory_headroom = 0;
  // DP gradient buckets per model chunk (buckets overlap backward).
  int grad_buckets = kDefaultGradBuckets;
  // A published stack's buckets by size, where its configuration states one
  // (0: grad_buckets per chunk, as Loom's executor runs them): a bucket holds
  // max(grad_bucket_params, grad_bucket_params_per_dp x dp) of a chunk's
  // parameters on the rank (Megatron-core's default bucket_size, max(40M,
  // 1M x dp)), on the chunks bucketed_chunks names; the rest sync as one
  // bucket. The engine and the closed form take a chunk's count from
  // StageCosts::chunk_buckets.
  double grad_bucket_params = 0;
  double grad_bucket_params_per_dp = 0;
  BucketedChunks bucketed_chunks = BucketedChunks::kAll;
  // A bucket per transformer layer instead of by size (NeMo 1.x with Apex's
  // DistributedFusedAdam: configure_optimizers groups the buckets by layer,
  // and each group's buckets launch together once the layer's last gradient
  // arrives), on the chunks bucketed_chunks names.
  bool grad_bucket_layers = false;
  // Whether the stack's own buckets are stated (by size or by layer) rather
  // than the program's grad_buckets per chunk.
  bool states_grad_buckets() const { return grad_bucket_params > 0 || grad_bucket_layers; }
  // ZeRO-3 (FSDP) under a pipeline syncs once a step, as torchtitan runs
  // FSDP2 with torch.distributed.pipelining: parameters stay gathered from
  // each chunk's first forward to the step's end (reshard_after_forward off
  // when PP is on), and gradients accumulate unsharded (in the reduce dtype)
  // until the chunk's last backward, after which each chunk reduce-scatters
  // once. Priced as ZeRO-1 whose buckets all follow the chunk's whole last
  // backward (priced_layout below).
  bool pp_fsdp_once = false;
  // Megatron's --tp-comm-overlap (Transformer Engine userbuffers; needs
  // sequence parallelism): forward all-gathers and reduce-scatters
  // ring-exchanged with their GEMMs in t chunks, backward bulk overlaps
  // (sim/compute_model.cc). Off: TP collectives as tp_async_backward says.
  bool tp_comm_overlap = false;
  // How Transformer Engine runs each TP linear's overlap under
  // tp_comm_overlap (Megatron --tp-comm-overlap-cfg, NeMo's and
  // Megatron-Bridge's tp_comm_overlap_cfg; sim/tp_overlap.h): the GEMM
  // slices and the SMs the communication takes. Default: TE >= 2.1's.
  TpOverlapConfig tp_overlap = te2_default_tp_overlap();
  // Megatron-core's asynchronous TP collectives in backward
  // (tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication):
  // a column-parallel linear's input-gradient all-reduce (SP: reduce-scatter)
  // runs behind its weight-gradient GEMM, and with SP its input is re-gathered
  // behind the data-gradient GEMM. Off: the collectives run synchronously, as
  // in Loom's executor and in Megatron-LM of 2021.
  bool tp_async_backward = false;
  // FP8 training (precision fp8): the linear layers' GEMMs run in FP8 with
  // their inputs and output gradients cast by `fp8_scaling`; the attention
  // core runs in 16 bits unless fp8_attention (Transformer Engine's
  // fp8_dot_product_attention, off by default), and so do the LM head and the
  // MoE router, which are not FP8 layers in Megatron-core or torchtitan.
  Fp8Scaling fp8_scaling = Fp8Scaling::kCurrent;
  bool fp8_attention = false;
  // FP8 parameters (Megatron's --fp8-param-gather, NeMo's fp8_params): the
  // model keeps only the FP8 weight and its transpose (2 bytes a parameter
  // instead of 16-bit + FP8 copy), the fp32 master lives in the optimizer,
  // and the distributed optimizer gathers 1 byte a parameter.
  bool fp8_params = false;
  // What recompute=selective re-runs. kAttentionCore: Megatron's selective
  // recompute (Korthikanti et al. 2022), the attention core only.
  // kEveryOtherMatmul: torchtitan's selective op AC (PyTorch selective
  // activation checkpointing with torchtitan's policy: keep the outputs of
  // the matmuls, the attention kernel and the reduce-scatters, except every
  // second matmul of a layer; every other op is re-run), on dense layers in
  // 16 bits; MoE, MLA and FP8 layers keep the attention-core rule.
  SelectiveRecompute selective_recompute = SelectiveRecompute::kAttentionCore;
  // The loss's implementation (frameworks/<name>.json loss.cross_entropy).
  CrossEntropyImpl cross_entropy = CrossEntropyImpl::kFused;
  // The dense layer's non-GEMM kernels (frameworks/<name>.json layer.ops).
  LayerOps layer_ops = LayerOps::kFused;
  // FSDP2's copies around its per-layer collectives (frameworks/<name>.json
  // layer.fsdp_copies; torch/distributed/_composable/fsdp/_fsdp_collectives.py):
  // under ZeRO-3, each all-gather's output is copied out into the
  // parameters' own tensors, and each reduce-scatter's input is copied in
  // from the 16-bit gradients, cast to the reduction dtype; both on the
  // compute stream's path, once per layer per micro-batch (the gather twice:
  // forward and backward).
  bool fsdp_copies = false;
  // Passes a stack makes over each rank's whole gradient buffer (its local,
  // unsharded gradients) on the compute stream, once a step
  // (frameworks/<name>.json gradients.*; Megatron-core's
  // DistributedDataParallel, megatron/core/distributed/param_and_grad_buffer.py):
  // zeroing it before the step's first micro-batch (zero_grad_buffer), one
  // norm per bucket before its collective to catch NaNs (check_for_nan_in_grad),
  // and the 1/dp scaling (read and write) where the collective sums instead
  // of averaging (average_in_collective off; only with data parallelism).
  bool grad_buffer_zero = false;
  bool grad_nan_check = false;
  bool grad_scale_pass = false;
  // Megatron-core's hook per parameter adds the gradient autograd produced
  // into the main gradient (param.main_grad.add_(param.grad)) for every
  // parameter whose GEMM does not accumulate there itself: the word (and
  // position) embedding, norm weights, biases. Every micro-batch.
  bool grad_hook_add = false;
  // The linears' weight-gradient GEMMs add into the main gradient in their
  // epilogue (Megatron's gradient_accumulation_fusion, Transformer Engine's
  // fuse_wgrad_accumulation, DeepGEMM's accumulating kernels): each reads
  // and writes the main gradient (4 bytes each in fp32, 2 in 16 bits) where
  // a plain GEMM writes its output, every micro-batch; priced as exposed
  // memory traffic (compute_parts::wgrad_accumulate_bytes).
  bool wgrad_gemm_accumulate = false;
  // PyTorch's dense embedding backward (embedding_dense_backward_cuda): a
  // zero-filled 16-bit gradient of the whole local table (V/t x h) is written
  // every micro-batch, then the tokens' rows are added into it.
  bool embedding_dense_grad = false;
  // Megatron-core from core_r0.5.0 to core_v0.13 with RoPE fusion on hands
  // Transformer Engine's attention q, k and v in the bshd format:
  // TEDotProductAttention.forward runs x.transpose(0, 1).contiguous() on
  // each, which copies every one that is not contiguous already (v, a view of
  // the fused QKV output; q and k too where no fused RoPE rewrote them), and
  // their gradients, three tensors apart, are concatenated back into the
  // fused QKV's (torch.cat in Transformer Engine's _SplitAlongDim backward).
  bool qkv_bshd_copies = false;
  // The stack's fused layer kernels move what they move in backward, op by
  // op, not twice the forward (sim/compute_model.cc; frameworks/<name>.json
  // layer.fused_backward): Transformer Engine's norm backward, Megatron's
  // swiglu_back, the fused RoPE's backward, autograd's residual
  // accumulation; and with RoPE the concatenation of the q/k/v gradients.
  bool fused_layer_backward = false;
  // Transformer Engine's LayerNormLinear under FP8 delayed scaling writes the
  // norm's output in FP8 (layernorm_fwd_fp8 / the fused norm kernel: read 2
  // bytes, write 1) and transposes it (read 1, write 1), where a plain count
  // prices a 16-bit norm output and a separate cast (4 + 4 bytes an element):
  // the QKV's input norm, and the FC1's on dense layers.
  bool fp8_norm_cast_fused = false;
  // MoE routing: tokens of the busiest rank's experts over the balanced
  // share (1 = balanced, as Megatron-Bridge's MoE benchmarks force it; an
  // auxiliary-loss-balanced router in training runs above 1). The expert
  // GEMMs and the all-to-all of that rank wait for it.
  double moe_load_imbalance = 1.0;
  // MoE all-to-alls overlapped with another micro-batch's compute
  // (DeepSeek-V3's DualPipe, Megatron-core's --overlap-moe-expert-parallel-
  // comm): per MoE layer, only what a forward + backward pair's compute
  // cannot cover is exposed. Off: every dispatch and combine is exposed.
  bool ep_comm_overlap = false;
  // Deduplicated MoE dispatch (DeepEP's internode kernels, Megatron-core's
  // flex dispatcher with --moe-enable-deepep): a token crosses the network
  // once per remote node holding one of its experts and is forwarded over
  // NVLink there; with group-limited routing (ModelSpec n_group/topk_group)
  // it reaches at most topk_group nodes. Off: Megatron's alltoall
  // dispatcher, one copy per expert.
  bool moe_dedup_dispatch = false;
  // Dispatch in FP8 (1 byte an element plus an fp32 scale per 128, DeepSeek-
  // V3's 1x128 tiles) with the combine in 16 bits, as DeepSeek-V3 trains.
  bool moe_fp8_dispatch = false;
  // SMs the MoE dispatcher's kernels hold while an all-to-all runs (DeepEP's
  // and HybridEP's num_sms: Megatron-core --moe-hybridep-num-sms, Megatron-
  // Bridge's performance recipes set 32; DeepSeek-V3 dedicates 20). Under
  // ep_comm_overlap the hidden all-to-all time slows the compute beside it by
  // this share of the GPU's SMs. 0: NCCL's, one block per channel
  // (comm_contention_fraction), as the alltoall dispatcher runs.
  int moe_dispatch_sms = 0;
  // How a MoE layer's local experts run their GEMMs (frameworks/<name>.json
  // moe.expert_gemm; expert_gemms_time_s, sim/compute_model.h).
  ExpertGemm expert_gemm = ExpertGemm::kGrouped;
  // Expert capacity factor (Megatron --moe-expert-capacity-factor): an
  // expert takes at most this many times its balanced share of tokens and
  // drops the rest, so the busiest rank's load is min(moe_load_imbalance,
  // capacity). 0: dropless (Megatron's default).
  double moe_capacity_factor = 0;
  // Pipeline p2p as Megatron and DeepSpeed issue it: batch_isend_irecv, then
  // wait on every request (megatron/core/pipeline_parallel/p2p_communication.py
  // _communicate, wait_on_reqs=True), so a stage's next compute op waits
  // until its send has landed. Off: sends are asynchronous and only the
  // receiver waits, as in Loom's executor (isend, waited at the end of the
  // step).
  bool pp_blocking_p2p = false;
  // Megatron's overlap_p2p_comm (--no-overlap-p2p-communication turns it off;
  // it is forced off for non-interleaved schedules): the interleaved schedule
  // issues its sends asynchronously even when pp_blocking_p2p is on, and
  // posts each receive after the previous op of its direction, which the
  // engine times (simulate.h with_posted_ahead_recvs).
  bool pp_overlap_p2p_comm = false;
  // Per-kernel launch/dispatch overhead (s) for each op the model counts.
  double kernel_overhead_s = 4e-6;
};

// Whether recompute=selective is torchtitan's selective op AC for a layer:
// the option set by a named framework (Loom's executor has its own), and a
// dense 16-bit layer without MLA (the policy names aten.mm, which FP8's
// _scaled_mm and grouped GEMMs are not; MLA keeps the attention-core rule).
inline bool every_other_matmul(const SimOptions& o, Precision p, bool moe_layer, bool mla) {
  return o.selective_recompute == SelectiveRecompute::kEveryOtherMatmul && !o.framework.empty() && !moe_layer && !mla &&
         p != Precision::kFp8;
}

// The ZeRO stages DualPipeV runs with: 0 and 1, and 3 where FSDP syncs once
// a step under a pipeline (`fsdp_once`: its last W ends before the one
// reduce-scatter). A per-micro-batch ZeRO-2/3 reduce-scatter would follow
// a backward whose weight gradients are still deferred.
inline bool dualpipev_runs_zero(int zero, bool fsdp_once) { return zero <= 1 || (fsdp_once && zero == 3); }

// ZeRO-3 under a pipeline on a stack that syncs FSDP once a step
// (SimOptions::pp_fsdp_once).
inline bool fsdp_once_per_step(const Layout& l, const SimOptions& o) {
  return o.pp_fsdp_once && l.pp > 1 && l.zero == 3 && l.dp * l.cp > 1;
}
// The layout the simulator prices for `l`: under fsdp_once_per_step the
// communication and memory of ZeRO-1 (parameters whole from the chunk's
// first forward to the step's end, gathered once and overlapped with the
// forwards; gradients whole in the reduce dtype until one reduce-scatter a
// chunk; the optimizer's state sharded), its syncs after the chunk's whole
// last backward (priced_after_backward); otherwise `l` itself. Under that
// stack a zero=1 pipelined layout is only ever this form (the stack offers
// no ZeRO-1 of its own).
inline Layout priced_layout(const Layout& l, const SimOptions& o) {
  if (!fsdp_once_per_step(l, o)) return l;
  Layout x = l;
  x.zero = 1;
  x.overlap_grad_reduce = true;
  x.overlap_param_gather = true;
  return x;
}
// A priced layout whose gradient syncs start after each chunk's whole last
// backward (FSDP's post-backward under a pipeline), not bucket by bucket in it.
inline bool priced_after_backward(const Layout& l, const SimOptions& o) {
  return o.pp_fsdp_once && l.pp > 1 && l.zero == 1 && l.dp * l.cp > 1;
}

// Sets the optimizer-state bytes a request or a validation row states (0:
// not stated, the option keeps its value); checked first by
// check_optimizer_state_overrides.
void apply_optimizer_state_overrides(double master_bytes, double moment_bytes, SimOptions* opt);

// Whether a stage's compute waits for its pipeline sends under `schedule`.
inline bool blocking_p2p(const SimOptions& o, Schedule schedule) {
  return o.pp_blocking_p2p && !(schedule == Schedule::kInterleaved && o.pp_overlap_p2p_comm);
}

}  // namespace loom
