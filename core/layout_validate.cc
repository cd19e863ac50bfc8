// validate_layout: every impossible layout is rejected with a message that
// names the field and the fix.
#include <algorithm>
#include <sstream>

#include "core/layout.h"
#include "core/stage_split.h"

namespace loom {

namespace {

std::string divisors_of(int64_t n, int64_t limit = 1 << 20) {
  std::ostringstream ss;
  ss << "{";
  bool first = true;
  for (int64_t d = 1; d <= n && d <= limit; ++d) {
    if (n % d) continue;
    ss << (first ? "" : ",") << d;
    first = false;
  }
  ss << "}";
  return ss.str();
}

}  // namespace

Status validate_layout(const Layout& l, const ModelSpec& m, const TrainSpec& t, int world) {
  struct Named {
    const char* name;
    int value;
  };
  for (Named n : {Named{"dp", l.dp}, Named{"tp", l.tp}, Named{"pp", l.pp}, Named{"ep", l.ep}, Named{"cp", l.cp},
                  Named{"micro", l.micro_batch}, Named{"v", l.virtual_stages}}) {
    if (n.value < 1)
      return invalid_argument(std::string("layout: ") + n.name + "=" + std::to_string(n.value) + " must be >= 1");
  }
  for (Named n : {Named{"dp", l.dp}, Named{"tp", l.tp}, Named{"pp", l.pp}, Named{"ep", l.ep}, Named{"cp", l.cp},
                  Named{"micro", l.micro_batch}, Named{"v", l.virtual_stages}}) {
    if (n.value > kMaxLayoutValue)
      return invalid_argument(std::string("layout: ") + n.name + "=" + std::to_string(n.value) +
                              " is too large (at most " + std::to_string(kMaxLayoutValue) + ")");
  }
  // Before anything forms the world in int (Layout::world()).
  // One factor at a time (each <= 2^24 here): no partial product overflows.
  int64_t world64 = 1;
  for (int size : {l.dp, l.tp, l.pp, l.cp}) {
    world64 *= size;
    if (world64 > kMaxLayoutValue)
      return invalid_argument("layout: dp*tp*pp*cp = " + std::to_string(l.dp) + "*" + std::to_string(l.tp) + "*" +
                              std::to_string(l.pp) + "*" + std::to_string(l.cp) + " ranks is too large (at most " +
                              std::to_string(kMaxLayoutValue) + ")");
  }
  LOOM_RETURN_IF_ERROR(parse_rank_order(l.rank_order).status());
  if (world > 0 && l.world() != world) {
    return invalid_argument("layout: dp*tp*pp*cp = " + std::to_string(l.dp) + "*" + std::to_string(l.tp) + "*" +
                            std::to_string(l.pp) + "*" + std::to_string(l.cp) + " = " + std::to_string(l.world()) +
                            " but the run has " + std::to_string(world) +
                            " ranks; choose sizes whose product is " + std::to_string(world));
  }
  if (l.zero < 0 || l.zero > 3)
    return invalid_argument("layout: zero=" + std::to_string(l.zero) + " is not a ZeRO stage; use 0, 1, 2 or 3");
  // Context parallelism cuts each sequence into 2*cp chunks (two per CP rank,
  // Megatron's load-balanced order for the causal mask).
  if (l.cp > 1 && t.seq_len % (2 * int64_t(l.cp)) != 0)
    return invalid_argument("layout: cp=" + std::to_string(l.cp) + " cuts each sequence into " +
                            std::to_string(2 * l.cp) + " chunks, and seq_len=" + std::to_string(t.seq_len) +
                            " does not divide into them; use a seq_len that is a multiple of " +
                            std::to_string(2 * l.cp) + " or another cp");
  if (l.cp_comm != CpComm::kP2p && l.cp <= 1)
    return invalid_argument(std::string("layout: cp_comm=") + cp_comm_name(l.cp_comm) +
                            " is how context parallelism exchanges keys and values, and cp=1 has none; "
                            "drop cp_comm or set cp >= 2");

  // Tensor parallelism splits heads, KV heads, the MLP and the vocabulary.
  if (m.num_heads % l.tp != 0)
    return invalid_argument("layout: tp=" + std::to_string(l.tp) + " does not divide num_attention_heads=" +
                            std::to_string(m.num_heads) + "; use tp in " + divisors_of(m.num_heads));
  if (!m.mla.enabled && m.num_kv_heads % l.tp != 0)
    return invalid_argument("layout: tp=" + std::to_string(l.tp) + " does not divide num_key_value_heads=" +
                            std::to_string(m.num_kv_heads) + "; use tp in " + divisors_of(m.num_kv_heads) +
                            " (KV heads are not replicated in this version)");
  // The heads exchange hands each CP rank heads/cp of a TP rank's heads, of
  // the queries and of the keys and values alike (Transformer Engine asserts
  // num_heads % cp_size == 0 for Q, K and V).
  if (l.cp > 1 && l.cp_comm == CpComm::kA2a) {
    const int q_heads = m.num_heads / l.tp, kv_heads = (m.mla.enabled ? m.num_heads : m.num_kv_heads) / l.tp;
    if (q_heads % l.cp != 0 || kv_heads % l.cp != 0)
      return invalid_argument("layout: cp_comm=a2a splits each TP rank's heads over the cp=" + std::to_string(l.cp) +
                              " ranks, and it holds " + std::to_string(q_heads) + " query and " +
                              std::to_string(kv_heads) + " key/value heads; use a cp dividing both, or cp_comm=p2p "
                              "or all_gather");
  }
  if (m.ffn_hidden % l.tp != 0)
    return invalid_argument("layout: tp=" + std::to_string(l.tp) + " does not divide intermediate_size=" +
                            std::to_string(m.ffn_hidden) + "; use tp in " + divisors_of(m.ffn_hidden, 1024));
  if (l.etp != 0 && l.etp != 1 && l.etp != l.tp)
    return invalid_argument("layout: etp=" + std::to_string(l.etp) + " (expert tensor parallel size) must be tp=" +
                            std::to_string(l.tp) + " (experts split like the MLP) or 1 (parallel folding)");
  if (l.folded_experts() && !m.is_moe())
    return invalid_argument("layout: etp=1 folds expert parallelism over TP, and " + m.name +
                            " has no experts; drop etp");
  if (l.folded_experts() && !l.sequence_parallel)
    return invalid_argument("layout: etp=1 with tp=" + std::to_string(l.tp) +
                            " routes each TP rank's share of the tokens, which needs sequence parallelism (as "
                            "Megatron-Core requires for MoE with TP); set sp=1");
  if (m.is_moe() && !l.folded_experts() && m.moe.expert_ffn_hidden % l.tp != 0)
    return invalid_argument("layout: tp=" + std::to_string(l.tp) + " does not divide the expert intermediate size " +
                            std::to_string(m.moe.expert_ffn_hidden) + "; use tp in " +
                            divisors_of(m.moe.expert_ffn_hidden, 1024));
  if (l.sequence_parallel && l.tp == 1)
    return invalid_argument("layout: sp=1 (sequence parallel) needs tp > 1; set sp=0 or raise tp");

  // Expert parallelism is carved out of data parallelism.
  if (l.ep > 1 && !m.is_moe())
    return invalid_argument("layout: ep=" + std::to_string(l.ep) + " but " + m.name +
                            " has no experts; use ep=1 for dense models");
  if (l.folded_experts() && (int64_t(l.tp) * l.dp) % l.ep != 0)
    return invalid_argument("layout: ep=" + std::to_string(l.ep) + " must divide tp*dp=" +
                            std::to_string(int64_t(l.tp) * l.dp) + " (etp=1 folds the experts over TP x DP); use ep in " +
                            divisors_of(l.tp * l.dp));
  if (!l.folded_experts() && l.dp % l.ep != 0)
    return invalid_argument("layout: ep=" + std::to_string(l.ep) + " must divide dp=" + std::to_string(l.dp) +
                            " (experts are sharded over ranks of the DP group); use ep in " + divisors_of(l.dp) +
                            (l.tp > 1 && (int64_t(l.tp) * l.dp) % l.ep == 0
                                 ? ", or etp=1,sp=1 to fold expert parallelism over TP x DP (Megatron-Core's parallel "
                                   "folding)"
                                 : ""));
  if (m.is_moe() && m.moe.num_experts % l.ep != 0)
    return invalid_argument("layout: ep=" + std::to_string(l.ep) + " does not divide num_experts=" +
                            std::to_string(m.moe.num_experts) + "; use ep in " + divisors_of(m.moe.num_experts));

  // Pipeline parallelism: every model chunk gets at least one layer.
  if (l.pp > m.num_layers)
    return invalid_argument("layout: pp=" + std::to_string(l.pp) + " is more than the model's " +
                            std::to_string(m.num_layers) + " layers; use pp <= " + std::to_string(m.num_layers));
  if (l.schedule == Schedule::kDualPipeV) {
    if (l.virtual_stages != 2)
      return invalid_argument("layout: schedule=dualpipev places two model chunks on each stage (v=2), got v=" +
                              std::to_string(l.virtual_stages) + "; set v=2 or leave v out");
    if (l.pp < 2)
      return invalid_argument("layout: schedule=dualpipev needs pp >= 2 (it runs 2*pp chunks as a V over the stages); "
                              "use schedule=1f1b with pp=1");
    if (2 * int64_t(l.pp) > m.num_layers)
      return invalid_argument("layout: schedule=dualpipev runs 2*pp = " + std::to_string(2 * int64_t(l.pp)) +
                              " chunks but the model has only " + std::to_string(m.num_layers) + " layers; lower pp");
  } else if (l.virtual_stages > 1 && l.schedule != Schedule::kInterleaved) {
    return invalid_argument("layout: v=" + std::to_string(l.virtual_stages) +
                            " needs schedule=interleaved; set v=1 or schedule=interleaved");
  }
  if (l.first_stage_layers < 0 || l.last_stage_layers < 0)
    return invalid_argument("layout: first= and last= must be >= 0 (0 = the even split)");
  if (l.first_stage_layers > 0 || l.last_stage_layers > 0) {
    const int64_t chunks = int64_t(l.pp) * l.virtual_stages;
    if (chunks < 2)
      return invalid_argument("layout: first=/last= pin the layers of the first and last pipeline chunk; they need pp >= 2");
    const int64_t pinned = int64_t(l.first_stage_layers) + l.last_stage_layers;
    const int64_t others = chunks - (l.first_stage_layers > 0) - (l.last_stage_layers > 0);
    // Every other chunk keeps at least one layer; with both pinned and no
    // other chunk, they must hold every layer.
    if (others == 0 ? pinned != m.num_layers : pinned + others > m.num_layers)
      return invalid_argument("layout: first=" + std::to_string(l.first_stage_layers) + ",last=" +
                              std::to_string(l.last_stage_layers) + " leaves " +
                              std::to_string(m.num_layers - pinned) + " of the model's " + std::to_string(m.num_layers) +
                              " layers for the other " + std::to_string(others) +
                              " chunks, which need at least one each; pin fewer layers");
  }
  if (l.schedule == Schedule::kInterleaved) {
    if (l.pp < 2)
      return invalid_argument("layout: schedule=interleaved needs pp >= 2; use schedule=1f1b with pp=1");
    if (l.virtual_stages < 2)
      return invalid_argument("layout: schedule=interleaved needs v >= 2 model chunks per stage; set v=2 or more");
    if (int64_t(l.pp) * l.virtual_stages > m.num_layers)
      return invalid_argument("layout: pp*v = " + std::to_string(int64_t(l.pp) * l.virtual_stages) + " chunks but only " +
                              std::to_string(m.num_layers) + " layers; lower v or pp");
  }

  // Partial recompute: the first N layers of each chunk (Megatron's block method).
  if (l.recompute_layers < 0)
    return invalid_argument("layout: recompute_layers must be >= 0 (0 = every layer under recompute=full)");
  if (l.recompute_layers > 0) {
    if (l.recompute != Recompute::kFull)
      return invalid_argument("layout: recompute_layers=" + std::to_string(l.recompute_layers) +
                              " recomputes whole layers; it needs recompute=full (set recompute=full or drop "
                              "recompute_layers)");
    const StageSplit split = split_layers(m, l);
    const int most = *std::max_element(split.chunk_layers.begin(), split.chunk_layers.end());
    if (l.recompute_layers >= most)
      return invalid_argument("layout: recompute_layers=" + std::to_string(l.recompute_layers) +
                              " covers every layer of each model chunk (at most " + std::to_string(most) +
                              "); drop recompute_layers for full recompute, or use fewer than " +
                              std::to_string(most));
  }

  // Selective recompute by module (Megatron's --recompute-modules): what
  // Megatron-core's TransformerConfig refuses is refused here too.
  if (l.recompute_modules & ~kAllRecomputeModules)
    return invalid_argument("layout: recompute_modules holds an unknown module");
  if (l.recompute_modules) {
    const std::string mods = recompute_modules_text(l.recompute_modules);
    if (l.recompute != Recompute::kSelective)
      return invalid_argument("layout: recompute_modules=" + mods +
                              " names parts of a layer to re-run; it needs recompute=selective (Megatron's "
                              "--recompute-granularity selective)");
    if ((l.recompute_modules & kRecomputeMlaUpProj) && !m.mla.enabled)
      return invalid_argument("layout: recompute_modules=" + mods + ": mla_up_proj needs a model with multi-latent "
                              "attention, and " + m.name + " has none; drop mla_up_proj");
    if ((l.recompute_modules & kRecomputeMoeAct) && !m.is_moe())
      return invalid_argument("layout: recompute_modules=" + mods + ": moe_act re-runs the experts' activation, and " +
                              m.name + " has no experts; drop moe_act");
  }

  // Batch: B = dp * micro * m.
  LOOM_RETURN_IF_ERROR(validate_train_spec(t));
  int64_t per_step = int64_t(l.dp) * l.micro_batch;
  if (t.global_batch < l.dp)
    return invalid_argument("layout: dp=" + std::to_string(l.dp) + " is more than the global batch of " +
                            std::to_string(t.global_batch) + " sequences; raise --global-batch to a multiple of " +
                            std::to_string(l.dp) + " or use fewer data-parallel ranks (more tp/pp)");
  if (t.global_batch % per_step != 0)
    return invalid_argument("layout: global batch " + std::to_string(t.global_batch) + " is not divisible by dp*micro = " +
                            std::to_string(l.dp) + "*" + std::to_string(l.micro_batch) +
                            "; choose a global batch that is a multiple of " + std::to_string(per_step) +
                            " or a micro batch in " + divisors_of(t.global_batch / std::max(1, l.dp), 4096));
  int64_t micro_batches = t.global_batch / per_step;
  if (l.schedule == Schedule::kDualPipeV && micro_batches < 2 * int64_t(l.pp))
    return invalid_argument("layout: schedule=dualpipev needs at least 2*pp = " + std::to_string(2 * int64_t(l.pp)) +
                            " micro-batches per step (deepseek-ai/DualPipe asserts num_chunks >= num_ranks * 2), got " +
                            std::to_string(micro_batches) + "; raise the global batch or lower the micro batch");
  if (l.schedule == Schedule::kInterleaved && micro_batches % l.pp != 0)
    return invalid_argument("layout: interleaved schedule needs the number of micro-batches (" +
                            std::to_string(micro_batches) + ") to be a multiple of pp=" + std::to_string(l.pp) +
                            "; change the global batch or micro batch, or use schedule=1f1b");
  if (m.max_position > 0 && m.position == PositionKind::kLearned && t.seq_len > m.max_position)
    return invalid_argument("train: seq_len=" + std::to_string(t.seq_len) + " exceeds the model's learned positions (" +
                            std::to_string(m.max_position) + "); use --seq <= " + std::to_string(m.max_position));
  return Status::ok();
}

}  // namespace loom
