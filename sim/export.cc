#include "sim/export.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/json_util.h"
#include "core/stage_split.h"
#include "sim/report.h"

namespace loom {

namespace {

// Megatron-LM and DeepSpeed run no DualPipeV.
Status refuse_dualpipev(const Layout& l, const std::string& stack) {
  if (l.schedule != Schedule::kDualPipeV) return Status::ok();
  return unsupported("export " + stack + ": schedule=dualpipev has no " +
                     (stack == "megatron" ? "Megatron-LM equivalent (its pipeline runs 1F1B and interleaved 1F1B)"
                                          : "DeepSpeed equivalent (its pipeline engine runs 1F1B)") +
                     "; use --export torchtitan (pipeline_parallel_schedule = \"DualPipeV\", torchtitan 803906b8f and "
                     "later), or plan with schedule=1f1b or interleaved");
}

}  // namespace

Status megatron_split_status(const ModelSpec& m, const Layout& l) {
  if (l.schedule == Schedule::kInterleaved) {
    if (l.first_stage_layers > 0 || l.last_stage_layers > 0)
      return unsupported("first=/last= with the interleaved schedule; Loom pins the first and last model chunks, "
                         "which --num-layers-per-virtual-pipeline-stage cannot express; use schedule=1f1b or drop "
                         "first=/last=");
    if (m.num_layers % (l.pp * l.virtual_stages) != 0)
      return invalid_argument("v=" + std::to_string(l.virtual_stages) + " with pp=" + std::to_string(l.pp) +
                              " splits " + std::to_string(m.num_layers) +
                              " layers unevenly, which Megatron-LM cannot express; choose v so that pp*v divides " +
                              std::to_string(m.num_layers));
    return Status::ok();
  }
  if (l.pp > 2 && (m.num_layers % l.pp != 0 || l.first_stage_layers > 0 || l.last_stage_layers > 0)) {
    const StageSplit split = split_layers(m, l);
    for (int s = 1; s + 1 < l.pp; ++s)
      if (split.chunk_layers[s] != split.chunk_layers[1])
        return unsupported("pp=" + std::to_string(l.pp) + " splits " + std::to_string(m.num_layers) +
                           " layers into middle stages of unequal size, which Megatron-LM cannot express; choose pp "
                           "so that the layers left after the first and last stages divide evenly");
  }
  return Status::ok();
}

std::string megatron_pipeline_layout(const ModelSpec& m, const Layout& l) {
  const StageSplit split = split_layers(m, l);
  const int chunks = int(split.chunk_layers.size());
  // Virtual stage g (= chunk * pp + stage, Megatron's order): its layers,
  // the embedding before the first, the MTP modules and the loss after the
  // last (where Loom costs them).
  std::vector<std::string> stages(chunks);
  for (int g = 0; g < chunks; ++g) {
    if (g == 0) stages[g] += "E";
    stages[g] += std::string(size_t(split.chunk_layers[g]), 't');
    if (g == chunks - 1) stages[g] += std::string(size_t(m.num_mtp_layers), 'm') + "L";
  }
  // Runs of equal stages as Megatron's "(...|)*n"; each stage ends in "|"
  // but the last.
  std::string out;
  for (int g = 0; g < chunks;) {
    int n = 1;
    while (g + n < chunks - 1 && stages[g + n] == stages[g]) ++n;
    if (n > 1) {
      out += "(" + stages[g] + "|)*" + std::to_string(n) + (g + n < chunks ? "," : "");
    } else {
      out += stages[g] + (g + 1 < chunks ? "|" : "");
    }
    g += n;
  }
  return out;
}

Result<std::string> export_megatron_args(const Plan& p) {
  LOOM_RETURN_IF_ERROR(refuse_dualpipev(p.layout, "megatron"));
  const Layout& l = p.layout;
  const ModelSpec& m = p.model;
  const TrainSpec& t = p.train;
  if (l.zero >= 2)
    return unsupported("export megatron: zero=" + std::to_string(l.zero) +
                       " has no Megatron-LM distributed-optimizer equivalent; use zero=0/1, or --export deepspeed");
  if (t.grad_reduce == GradReduce::kFp8)
    return unsupported("export megatron: --grad-reduce fp8 has no Megatron-LM equivalent (it reduces gradients in "
                       "fp32 or, with --grad-reduce-in-bf16, bf16); plan with --grad-reduce bf16 or fp32");
  std::ostringstream o;
  o << "--tensor-model-parallel-size " << l.tp << "\n";
  o << "--pipeline-model-parallel-size " << l.pp << "\n";
  if (l.pp > 1 && !megatron_split_status(m, l).is_ok()) {
    // A split the older flags cannot state (an uneven or pinned interleaved
    // split, unequal middle stages): every virtual stage's layers.
    o << "--pipeline-model-parallel-layout \"" << megatron_pipeline_layout(m, l) << "\"\n";
  } else if (l.schedule == Schedule::kInterleaved) {
    o << "--num-layers-per-virtual-pipeline-stage " << m.num_layers / (l.pp * l.virtual_stages) << "\n";
  } else if (l.pp > 1 && (m.num_layers % l.pp != 0 || l.first_stage_layers > 0 || l.last_stage_layers > 0)) {
    // An uneven split (core/stage_split.h: the extra layers on the middle
    // stages, or the first / last pinned): Megatron-core's
    // --decoder-first/last-pipeline-num-layers, with the middle stages equal.
    const StageSplit split = split_layers(m, l);
    o << "--decoder-first-pipeline-num-layers " << split.chunk_layers.front()
      << "\n--decoder-last-pipeline-num-layers " << split.chunk_layers.back() << "\n";
  }
  if (l.ep > 1) o << "--expert-model-parallel-size " << l.ep << "\n";
  // Megatron-Core defaults the experts' TP size to tp; parallel folding states 1.
  if (l.folded_experts()) o << "--expert-tensor-parallel-size " << l.expert_tp() << "\n";
  // Context parallelism with the plan's K/V exchange (p2p is Megatron's
  // default; docs/simulator.md §3.2b).
  if (l.cp > 1) o << "--context-parallel-size " << l.cp << "\n--cp-comm-type " << cp_comm_name(l.cp_comm) << "\n";
  if (l.sequence_parallel) o << "--sequence-parallel\n";
  LOOM_ASSIGN_OR_RETURN(const SimOptions opt, parse_sim_options(p.sim_options_json));
  // Adam's state as the plan priced it (docs/simulator.md section 2.2):
  // Transformer Engine's FusedAdam under --use-precision-aware-optimizer keeps
  // the master weights' 16-bit remainders beside bf16 weights
  // (OptimizerConfig.store_param_remainders, default True, no flag) and the
  // moments in the --exp-avg(-sq)-dtype given.
  if (opt.optimizer_master_bytes != 4 || opt.optimizer_moment_bytes != 4) {
    o << "--use-precision-aware-optimizer\n";
    if (opt.optimizer_moment_bytes == 2) o << "--exp-avg-dtype bf16\n--exp-avg-sq-dtype bf16\n";
  }
  // Userbuffers as the plan priced them: TE's own defaults need no file;
  // other settings are the YAML `--export tp-comm-overlap-cfg` prints.
  if (opt.tp_comm_overlap && l.sequence_parallel && l.tp > 1) {
    o << "--tp-comm-overlap\n";
    if (!is_te_default_tp_overlap(opt.tp_overlap)) o << "--tp-comm-overlap-cfg " << opt.tp_overlap.name << ".yaml\n";
  }
  // The attention kernel the plan priced (the profile's attention_kernel,
  // docs/simulator.md §3.2): Megatron's --attention-backend (since fa0dcc4872,
  // 2024-12) makes Transformer Engine run it: fused = cuDNN, flash =
  // FlashAttention, pinned to version 2 with --flash-attention-version.
  const std::string& kernel = p.hw.accel.attention_kernel;
  if (opt.flash_attention && kernel.rfind("cudnn", 0) == 0) o << "--attention-backend fused\n";
  if (opt.flash_attention && kernel == "fa2") o << "--attention-backend flash\n--flash-attention-version 2\n";
  if (l.zero == 1) o << "--use-distributed-optimizer\n";
  if (l.overlap_grad_reduce && l.dp > 1) o << "--overlap-grad-reduce\n";
  // Megatron's bf16 reduction is NCCL's (a ring re-rounding partial sums),
  // where Loom's executor sums what arrives in fp32 (docs/executor.md).
  if (t.grad_reduce == GradReduce::kBf16) o << "--grad-reduce-in-bf16\n";
  if (l.overlap_param_gather && l.zero == 1) o << "--overlap-param-gather\n";
  // Megatron-core DDP's gradient-buffer passes as the plan priced them
  // (SimOptions::grad_buffer_zero marks a plan that models them): averaged in
  // the collective instead of a 1/dp pass, and no NaN-check norm, are flags.
  if (opt.grad_buffer_zero && !opt.grad_scale_pass) o << "--ddp-average-in-collective\n";
  if (opt.grad_buffer_zero && !opt.grad_nan_check) o << "--no-check-for-nan-in-loss-and-grad\n";
  // The loss the plan priced (SimOptions::cross_entropy): Megatron's fused
  // one (its functions under torch.compile, the native implementation) is a
  // flag; Transformer Engine's kernel Megatron-LM refuses since 168cb15d70
  // (2026-06). Any other runs as Megatron's default, the unfused one.
  if (opt.cross_entropy == CrossEntropyImpl::kMegatronFused) o << "--cross-entropy-loss-fusion\n";
  if (opt.fp8_attention && t.precision == Precision::kFp8)
    return unsupported("export megatron: --fp8-attention: Megatron-LM's training script has no flag for Transformer "
                       "Engine's fp8_dot_product_attention (TransformerConfig.fp8_dot_product_attention; Megatron-Bridge "
                       "sets it as mixed_precision.fp8_dot_product_attention); plan without --fp8-attention to export "
                       "for Megatron-LM");
  if (opt.cross_entropy == CrossEntropyImpl::kTe)
    return unsupported("export megatron: --cross-entropy te: Megatron-LM refuses Transformer Engine's cross-entropy "
                       "fusion since its commit 168cb15d70 (2026-06, 'stability issues'); plan with --cross-entropy "
                       "megatron_fused (--cross-entropy-loss-fusion, the native implementation) or megatron");
  // Every layer its own checkpoint (uniform, 1), or the first N layers of
  // each model chunk (block: TransformerBlock._checkpointed_forward loops
  // over its own layers, so N counts per virtual stage).
  if (l.recompute == Recompute::kFull && l.recompute_layers > 0)
    o << "--recompute-granularity full\n--recompute-method block\n--recompute-num-layers " << l.recompute_layers
      << "\n";
  else if (l.recompute == Recompute::kFull)
    o << "--recompute-granularity full\n--recompute-method uniform\n--recompute-num-layers 1\n";
  if (l.recompute == Recompute::kSelective) {
    o << "--recompute-granularity selective\n";
    if (l.recompute_modules) {
      std::string mods = recompute_modules_text(l.recompute_modules);
      std::replace(mods.begin(), mods.end(), '+', ' ');
      o << "--recompute-modules " << mods << "\n";
    }
  }
  o << "--micro-batch-size " << l.micro_batch << "\n";
  o << "--global-batch-size " << t.global_batch << "\n";
  o << "--seq-length " << t.seq_len << "\n";
  o << "--max-position-embeddings " << std::max<int64_t>(m.max_position, t.seq_len) << "\n";
  o << "--num-layers " << m.num_layers << "\n";
  o << "--hidden-size " << m.hidden << "\n";
  o << "--ffn-hidden-size " << m.ffn_hidden << "\n";
  o << "--num-attention-heads " << m.num_heads << "\n";
  if (m.head_dim * m.num_heads != m.hidden) o << "--kv-channels " << m.head_dim << "\n";
  if (m.num_kv_heads != m.num_heads && !m.mla.enabled)
    o << "--group-query-attention\n--num-query-groups " << m.num_kv_heads << "\n";
  if (m.norm == NormKind::kRmsNorm) o << "--normalization RMSNorm\n";
  o << "--norm-epsilon " << m.norm_eps << "\n";
  if (m.qk_norm) o << "--qk-layernorm\n";
  if (m.mlp == MlpKind::kSwiGlu) o << "--swiglu\n";
  if (m.position == PositionKind::kRope) {
    o << "--position-embedding-type rope\n--rotary-base " << int64_t(std::llround(m.rope_theta)) << "\n";
    if (m.rope_scaling.type == "llama3") o << "--use-rope-scaling\n--rope-scaling-factor " << m.rope_scaling.factor << "\n";
  }
  // Sliding-window attention: Transformer Engine's (left, right) window, as
  // transformers passes flash attention (sliding_window - 1, ...) with the
  // causal mask.
  if (m.sliding_window > 0) o << "--window-size " << m.sliding_window - 1 << ",0\n";
  // Dropout as the planner assumed it (sim/compute_model.h uses_dropout: the
  // GPT-2 family 0.1, Megatron's default; others none, where Megatron would
  // otherwise apply 0.1).
  if (m.model_type != "gpt2") o << "--hidden-dropout 0.0\n--attention-dropout 0.0\n";
  // The tokenizer: the model's Hugging Face name (its config's
  // _name_or_path, else the file's), whose vocabulary the plan priced.
  o << "--tokenizer-type HuggingFaceTokenizer\n--tokenizer-model " << m.name << "\n--vocab-size " << m.vocab << "\n";
  if (!m.tied_embeddings) o << "--untie-embeddings-and-output-weights\n";
  if (!m.linear_bias) o << "--disable-bias-linear\n";
  if (m.qkv_bias && !m.linear_bias) o << "--add-qkv-bias\n";
  if (m.is_moe()) {
    o << "--num-experts " << m.moe.num_experts << "\n--moe-router-topk " << m.moe.experts_per_token << "\n";
    o << "--moe-ffn-hidden-size " << m.moe.expert_ffn_hidden << "\n";
    if (m.moe.num_shared_experts > 0)
      o << "--moe-shared-expert-intermediate-size " << m.moe.shared_expert_ffn_hidden * m.moe.num_shared_experts
        << "\n";
    // The executor's routing and losses: Megatron's default router (top-k of
    // the logits, then softmax over the k) is the renormalized top-k;
    // softmax first without renormalizing is --moe-router-pre-softmax.
    // The dispatcher the plan priced: one copy per expert (alltoall), or
    // deduplicated per node (Megatron-core's flex dispatcher over DeepEP,
    // its default backend, on the SMs the plan gave it); the all-to-alls
    // behind the other micro-batch's compute as the plan overlapped them.
    if (opt.moe_dedup_dispatch) {
      o << "--moe-token-dispatcher-type flex\n--moe-flex-dispatcher-backend deepep\n";
      if (opt.moe_dispatch_sms > 0) o << "--moe-deepep-num-sms " << opt.moe_dispatch_sms << "\n";
    } else {
      o << "--moe-token-dispatcher-type alltoall\n";
    }
    if (opt.ep_comm_overlap) o << "--overlap-moe-expert-parallel-comm\n";
    if (!m.moe.norm_topk_prob) o << "--moe-router-pre-softmax\n";
    o << "--moe-router-load-balancing-type " << (t.moe_aux_loss_coeff > 0 ? "aux_loss" : "none") << "\n";
    if (t.moe_aux_loss_coeff > 0) o << "--moe-aux-loss-coeff " << t.moe_aux_loss_coeff << "\n";
    if (t.moe_z_loss_coeff > 0) o << "--moe-z-loss-coeff " << t.moe_z_loss_coeff << "\n";
    if (t.moe_capacity_factor > 0)
      o << "--moe-expert-capacity-factor " << t.moe_capacity_factor << "\n--moe-token-drop-policy probs\n";
  }
  if (m.mla.enabled) {
    o << "--multi-latent-attention\n";
    if (m.mla.q_lora_rank > 0) o << "--q-lora-rank " << m.mla.q_lora_rank << "\n";
    o << "--kv-lora-rank " << m.mla.kv_lora_rank << "\n--qk-head-dim " << m.mla.qk_nope_head_dim
      << "\n--qk-pos-emb-head-dim " << m.mla.qk_rope_head_dim << "\n--v-head-dim " << m.mla.v_head_dim << "\n";
  }
  switch (t.precision) {
    case Precision::kBf16: o << "--bf16\n"; break;
    case Precision::kFp16: o << "--fp16\n"; break;
    case Precision::kFp8: o << "--bf16\n--fp8-format hybrid\n"; break;
    case Precision::kFp32: break;
  }
  o << "--lr " << t.lr << "\n--min-lr " << t.min_lr << "\n--lr-warmup-iters " << t.warmup_steps << "\n";
  o << "--lr-decay-style " << (t.lr_schedule == LrSchedule::kCosine ? "cosine" : t.lr_schedule == LrSchedule::kLinear ? "linear" : "constant") << "\n";
  o << "--weight-decay " << t.weight_decay << "\n--adam-beta1 " << t.beta1 << "\n--adam-beta2 " << t.beta2 << "\n";
  o << "--clip-grad " << t.grad_clip << "\n--seed " << t.seed << "\n";
  o << "--train-iters " << (t.steps > 0 ? t.steps : kDefaultTrainSteps) << "\n";
  return o.str();
}

Result<std::string> export_deepspeed_config(const Plan& p) {
  LOOM_RETURN_IF_ERROR(refuse_dualpipev(p.layout, "deepspeed"));
  const Layout& l = p.layout;
  const TrainSpec& t = p.train;
  if (l.pp > 1 && l.zero >= 2)
    return unsupported("export deepspeed: DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only; "
                       "use zero<=1 with pp>1");
  if (l.cp > 1)
    return unsupported("export deepspeed: cp=" + std::to_string(l.cp) +
                       " has no DeepSpeed equivalent (its Ulysses sequence parallelism is another scheme); use cp=1, or "
                       "--export megatron / torchtitan");
  if (t.grad_reduce == GradReduce::kFp8)
    return unsupported("export deepspeed: --grad-reduce fp8 has no DeepSpeed equivalent (communication_data_type "
                       "is fp32, fp16 or bf16); plan with --grad-reduce bf16 or fp32");
  int64_t gas = l.num_micro_batches(t.global_batch);
  OrderedJson j;
  j["train_batch_size"] = t.global_batch;
  j["train_micro_batch_size_per_gpu"] = l.micro_batch;
  j["gradient_accumulation_steps"] = gas;
  j["gradient_clipping"] = t.grad_clip;
  if (t.grad_reduce == GradReduce::kBf16) j["communication_data_type"] = "bf16";
  j["steps_per_print"] = 10;
  j["bf16"] = {{"enabled", t.precision == Precision::kBf16 || t.precision == Precision::kFp8}};
  j["fp16"] = {{"enabled", t.precision == Precision::kFp16}, {"loss_scale", 0}};
  OrderedJson zero;
  zero["stage"] = l.zero;
  zero["overlap_comm"] = l.overlap_grad_reduce;
  zero["contiguous_gradients"] = true;
  if (l.zero == 3) {
    zero["stage3_prefetch_bucket_size"] = 5e7;
    zero["stage3_param_persistence_threshold"] = 1e5;
  }
  j["zero_optimization"] = zero;
  j["optimizer"] = {{"type", "AdamW"},
                    {"params", {{"lr", t.lr}, {"betas", {t.beta1, t.beta2}}, {"eps", t.adam_eps}, {"weight_decay", t.weight_decay}}}};
  j["scheduler"] = {{"type", "WarmupCosineLR"},
                    {"params", {{"total_num_steps", t.steps > 0 ? t.steps : kDefaultTrainSteps}, {"warmup_num_steps", t.warmup_steps}}}};
  if (l.recompute != Recompute::kNone)
    j["activation_checkpointing"] = {{"partition_activations", l.tp > 1}, {"contiguous_memory_optimization", false}};
  // Batch identity DeepSpeed enforces: train_batch = micro * gas * dp.
  LOOM_CHECK(l.micro_batch * gas * l.dp == t.global_batch, "batch identity");
  return j.dump(2) + "\n";
}

Result<std::string> export_torchtitan_toml(const Plan& p) {
  const Layout& l = p.layout;
  const TrainSpec& t = p.train;
  if (l.zero == 1 || l.zero == 2)
    return unsupported("export torchtitan: zero=" + std::to_string(l.zero) +
                       " has no torchtitan equivalent (FSDP2 shards weights too); use zero=3 (FSDP) or zero=0 (DDP)");
  if (l.tp > 1 && !l.sequence_parallel)
    return unsupported("export torchtitan: torchtitan's tensor parallelism always shards the sequence; use sp=1");
  if (l.ep > 1) return unsupported("export torchtitan: expert parallelism is not exported yet; use ep=1");
  if (t.grad_reduce == GradReduce::kFp8)
    return unsupported("export torchtitan: --grad-reduce fp8 has no torchtitan equivalent (mixed_precision_reduce is "
                       "float32 or bfloat16); plan with --grad-reduce bf16 or fp32");
  std::ostringstream o;
  o << "[training]\n";
  o << "local_batch_size = " << t.global_batch / l.dp << "\n";
  o << "global_batch_size = " << t.global_batch << "\n";
  o << "seq_len = " << t.seq_len << "\n";
  o << "mixed_precision_param = \"" << (t.precision == Precision::kFp32 ? "float32" : "bfloat16") << "\"\n";
  o << "mixed_precision_reduce = \"" << (t.grad_reduce == GradReduce::kBf16 ? "bfloat16" : "float32") << "\"\n";
  if (t.steps > 0) o << "steps = " << t.steps << "\n";
  o << "\n[parallelism]\n";
  o << "data_parallel_replicate_degree = " << (l.zero == 0 ? l.dp : 1) << "\n";
  o << "data_parallel_shard_degree = " << (l.zero == 3 ? l.dp : 1) << "\n";
  o << "tensor_parallel_degree = " << l.tp << "\n";
  o << "pipeline_parallel_degree = " << l.pp << "\n";
  if (l.cp > 1) {
    // The ring Loom models: torchtitan's default, allgather, gathers the K/V
    // after the first block instead (frameworks/torchtitan.json).
    if (l.cp_comm != CpComm::kP2p)
      return unsupported(std::string("export torchtitan: cp_comm=") + cp_comm_name(l.cp_comm) +
                         " is not modelled for torchtitan (its allgather rotation gathers after the first block); use "
                         "cp_comm=p2p, which exports as context_parallel_rotate_method = \"alltoall\"");
    o << "context_parallel_degree = " << l.cp << "\n";
    o << "context_parallel_rotate_method = \"alltoall\"\n";
  }
  if (l.pp > 1) {
    const char* sched = l.schedule == Schedule::kGpipe       ? "GPipe"
                        : l.schedule == Schedule::k1F1B      ? "1F1B"
                        : l.schedule == Schedule::kDualPipeV ? "DualPipeV"
                                                             : "Interleaved1F1B";
    o << "pipeline_parallel_schedule = \"" << sched << "\"\n";
    o << "pipeline_parallel_microbatch_size = " << l.micro_batch << "\n";
    // The split stated module by module (torchtitan's module_fqns_per_model_part,
    // model part g = global chunk g, the embedding on the first and the final
    // norm and output on the last), so that torchtitan's own defaults
    // (pipeline_parallel_first/last_stage_less_layers = 1) cannot move it.
    const StageSplit split = split_layers(p.model, l);
    o << "module_fqns_per_model_part = [";
    for (size_t g = 0; g < split.chunk_layers.size(); ++g) {
      o << (g ? ", " : "") << "[";
      bool first_item = true;
      auto item = [&](const std::string& name) {
        o << (first_item ? "" : ", ") << "\"" << name << "\"";
        first_item = false;
      };
      if (g == 0) item("tok_embeddings");
      for (int k = 0; k < split.chunk_layers[g]; ++k) item("layers." + std::to_string(split.chunk_first_layer[g] + k));
      if (g + 1 == split.chunk_layers.size()) {
        item("norm");
        item("output");
      }
      o << "]";
    }
    o << "]\n";
  }
  o << "\n[activation_checkpoint]\n";
  o << "mode = \"" << (l.recompute == Recompute::kFull ? "full" : l.recompute == Recompute::kSelective ? "selective" : "none")
    << "\"\n";
  if (l.recompute == Recompute::kSelective) o << "selective_ac_option = \"op\"\n";
  if (t.precision == Precision::kFp8) o << "\n[model]\nconverters = [\"float8\"]\n";
  return o.str();
}

Result<std::string> export_plan(const Plan& plan, const std::string& dialect) {
  if (dialect == "megatron") return export_megatron_args(plan);
  if (dialect == "deepspeed" || dialect == "torchtitan") {
    LOOM_ASSIGN_OR_RETURN(const SimOptions opt, parse_sim_options(plan.sim_options_json));
    if (opt.optimizer_master_bytes != 4 || opt.optimizer_moment_bytes != 4)
      return unsupported("export " + dialect + ": the plan keeps Adam's state in fewer than fp32's bytes "
                         "(optimizer_master_bytes / optimizer_moment_bytes), which " + dialect +
                         "'s optimizer has no setting for; plan with 4 and 4, or --export megatron "
                         "(--use-precision-aware-optimizer)");
  }
  if (dialect == "tp-comm-overlap-cfg") {
    LOOM_ASSIGN_OR_RETURN(const SimOptions opt, parse_sim_options(plan.sim_options_json));
    if (!opt.tp_comm_overlap || !plan.layout.sequence_parallel || plan.layout.tp <= 1)
      return invalid_argument("export tp-comm-overlap-cfg: the plan has no userbuffers overlap (it needs "
                              "--tp-comm-overlap with tp > 1 and sequence parallelism)");
    return tp_overlap_config_yaml(opt.tp_overlap);
  }
  if ((dialect == "deepspeed" || dialect == "torchtitan") && plan.layout.recompute_layers > 0)
    return unsupported("export " + dialect + ": recompute_layers=" + std::to_string(plan.layout.recompute_layers) +
                       " is Megatron's --recompute-method block; " + dialect +
                       " checkpoints every block or none: use --export megatron, or plan without recompute_layers");
  if ((dialect == "deepspeed" || dialect == "torchtitan") && plan.layout.recompute_modules)
    return unsupported("export " + dialect + ": recompute_modules=" +
                       recompute_modules_text(plan.layout.recompute_modules) + " is Megatron's --recompute-modules; " +
                       dialect + " has no such setting: use --export megatron, or plan without recompute_modules");
  if (dialect == "deepspeed") return export_deepspeed_config(plan);
  if (dialect == "torchtitan") return export_torchtitan_toml(plan);
  return invalid_argument("--export '" + dialect +
                          "' is unknown; use megatron, deepspeed, torchtitan, framework or tp-comm-overlap-cfg");
}

}  // namespace loom
