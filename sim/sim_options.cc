#include "sim/sim_options.h"

#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <string>

namespace loom {

namespace {

// The value among `values` whose name is `text`; false when none is.
template <typename E, typename NameOf>
bool parse_named(const std::string& text, std::initializer_list<E> values, NameOf name_of, E* out) {
  for (E v : values)
    if (text == name_of(v)) {
      *out = v;
      return true;
    }
  return false;
}

}  // namespace

const char* fp8_scaling_name(Fp8Scaling s) { return s == Fp8Scaling::kDelayed ? "delayed" : "current"; }

const char* selective_recompute_name(SelectiveRecompute s) {
  return s == SelectiveRecompute::kEveryOtherMatmul ? "every_other_matmul" : "attention_core";
}

bool parse_selective_recompute(const std::string& text, SelectiveRecompute* out) {
  return parse_named(text, {SelectiveRecompute::kAttentionCore, SelectiveRecompute::kEveryOtherMatmul},
                     selective_recompute_name, out);
}

namespace {
constexpr struct {
  CrossEntropyImpl impl;
  const char* name;
} kCrossEntropyNames[] = {{CrossEntropyImpl::kFused, "fused"},
                          {CrossEntropyImpl::kMegatron, "megatron"},
                          {CrossEntropyImpl::kMegatronFused, "megatron_fused"},
                          {CrossEntropyImpl::kTe, "te"},
                          {CrossEntropyImpl::kTorch, "torch"}};
}  // namespace

const char* cross_entropy_name(CrossEntropyImpl c) {
  for (const auto& n : kCrossEntropyNames)
    if (n.impl == c) return n.name;
  return "?";
}

bool parse_cross_entropy(const std::string& text, CrossEntropyImpl* out) {
  for (const auto& n : kCrossEntropyNames)
    if (text == n.name) {
      *out = n.impl;
      return true;
    }
  return false;
}

std::string cross_entropy_names() {
  std::string s;
  const size_t n = std::size(kCrossEntropyNames);
  for (size_t i = 0; i < n; ++i) s += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + kCrossEntropyNames[i].name;
  return s;
}

const char* layer_ops_name(LayerOps o) { return o == LayerOps::kTorchEager ? "torch_eager" : "fused"; }

bool parse_layer_ops(const std::string& text, LayerOps* out) {
  return parse_named(text, {LayerOps::kFused, LayerOps::kTorchEager}, layer_ops_name, out);
}

const char* bucketed_chunks_name(BucketedChunks b) {
  switch (b) {
    case BucketedChunks::kAll: return "all";
    case BucketedChunks::kFirst: return "first";
    case BucketedChunks::kNone: return "none";
  }
  return "all";
}

bool parse_bucketed_chunks(const std::string& text, BucketedChunks* out) {
  return parse_named(text, {BucketedChunks::kAll, BucketedChunks::kFirst, BucketedChunks::kNone},
                     bucketed_chunks_name, out);
}

const char* expert_gemm_name(ExpertGemm e) { return e == ExpertGemm::kPerExpert ? "per_expert" : "grouped"; }

bool parse_expert_gemm(const std::string& text, ExpertGemm* out) {
  return parse_named(text, {ExpertGemm::kGrouped, ExpertGemm::kPerExpert}, expert_gemm_name, out);
}

CrossEntropyBytes cross_entropy_bytes(CrossEntropyImpl c, double e) {
  // Per logit, e bytes each, fp32 = 4 bytes (docs/simulator.md §3.5 lists
  // each kernel and the code it is read from). `cast`: a 16-bit tensor's
  // fp32 copy (read e, write 4), and backward's cast of the fp32 gradient
  // to the logits' dtype (read 4, write e); none for fp32 logits.
  const double cast = e < 4 ? e + 4 : 0;
  switch (c) {
    case CrossEntropyImpl::kFused:
      // Read the logits, write the fp32 softmax and read it back; backward
      // reads it and writes the gradient.
      return {e + 4 + 4, 4 + e, 2, 2};
    case CrossEntropyImpl::kMegatron:
      // .float(), max (4), sub_ (8), exp in place (8), sum (4), div_ (8);
      // backward: mul_ by the loss's gradient (8), the cast.
      return {cast + 4 + 8 + 8 + 4 + 8, 8 + cast, cast > 0 ? 6 : 5, cast > 0 ? 2 : 1};
    case CrossEntropyImpl::kMegatronFused:
      // Three compiled functions: the fp32 copy with its max (e + 4; 4 for
      // fp32 logits); the shift, exp and sum, written over it (8); the
      // division (8). Backward: the compiled mul (8), the cast.
      return {(e < 4 ? e + 4 : 4) + 8 + 8, 8 + cast, 3, cast > 0 ? 2 : 1};
    case CrossEntropyImpl::kTe:
      // online_softmax_kernel reads the row (e); cross_entropy_kernel reads
      // it again and writes the gradient over it (2e); backward's
      // element_mul_kernel scales it in place (2e).
      return {3 * e, 2 * e, 2, 1};
    case CrossEntropyImpl::kTorch:
      // .float(); log_softmax over a row larger than shared memory: max,
      // sum-exp and output passes (3 reads + 1 write, 16). Backward:
      // nll_loss's zeroed gradient (4), log_softmax's backward (a sum pass
      // and a read-read-write pass, 16), the cast.
      return {cast + 16, 4 + 16 + cast, cast > 0 ? 2 : 1, cast > 0 ? 3 : 2};
  }
  return {e + 8, 4 + e, 2, 2};
}

Status check_optimizer_state_bytes(double master_bytes, double moment_bytes, const std::string& where) {
  char got[32];
  if (master_bytes != 2 && master_bytes != 4) {
    std::snprintf(got, sizeof got, "%g", master_bytes);
    return invalid_argument(where + ": the master weights' bytes must be 4 (fp32) or 2 (the 16-bit remainder beside "
                            "bf16 weights), got " + got);
  }
  if (moment_bytes != 2 && moment_bytes != 4) {
    std::snprintf(got, sizeof got, "%g", moment_bytes);
    return invalid_argument(where + ": Adam's moments' bytes must be 4 (fp32) or 2 (bf16), got " + got);
  }
  return Status::ok();
}

Status check_moe_dispatch_sms(int64_t sms, const std::string& key) {
  if (sms >= 0 && sms <= 4096) return Status::ok();
  return invalid_argument(key + " must be 0 (NCCL's channels) or the SMs the MoE dispatcher holds (1 to 4096), got " +
                          std::to_string(sms));
}

Status check_optimizer_state_overrides(double master_bytes, double moment_bytes, const std::string& where) {
  if (master_bytes == 0 && moment_bytes == 0) return Status::ok();
  return check_optimizer_state_bytes(master_bytes != 0 ? master_bytes : 4, moment_bytes != 0 ? moment_bytes : 4, where);
}

void apply_optimizer_state_overrides(double master_bytes, double moment_bytes, SimOptions* opt) {
  if (master_bytes != 0) opt->optimizer_master_bytes = master_bytes;
  if (moment_bytes != 0) opt->optimizer_moment_bytes = moment_bytes;
}

bool parse_fp8_scaling(const std::string& text, Fp8Scaling* out) {
  if (text == "delayed") {
    *out = Fp8Scaling::kDelayed;
    return true;
  }
  if (text == "current" || text == "tensorwise") {
    *out = Fp8Scaling::kCurrent;
    return true;
  }
  return false;
}

}  // namespace loom
