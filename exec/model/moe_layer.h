// The MLP of a mixture-of-experts layer (Mixtral, Qwen3-MoE), as Megatron-
// Core's MoELayer with its all-to-all token dispatcher:
//
//   router      logits = h W_r^T (E x C, replicated), softmax, top-k (ties:
//               the lower expert index), weights renormalized or not
//   permute     the token copies sorted by expert (stable: token order), with
//               an optional capacity (Megatron's "probs" drop policy)
//   dispatch    ep > 1: the counts per expert exchanged first, then the rows
//               by an all-to-all with variable splits over the EP group; the
//               rows received regrouped by local expert
//   experts     SwiGLU per local expert on its contiguous rows; the weights
//               split over TP like the dense MLP (Megatron's expert tensor
//               parallel size = tp), or whole under parallel folding (etp=1)
//   combine     the way back, each token's outputs summed with its weights
//   shared      always-active experts (one SwiGLU MLP) added to the output,
//               optionally scaled by sigmoid(h . w_g) (Qwen2-MoE)
//
// Under TP every TP rank routes all N rows alike (the input is the gathered
// one) and returns its partial output, which the caller sums over TP as it
// does the dense MLP's. Losses: the switch-transformer load-balancing loss
// coeff * E * sum_e f_e P_e (f: share of the token copies routed to e before
// dropping, P: mean probability; per micro-batch, Megatron's "aux_loss") and
// the router z-loss coeff * mean(logsumexp(logits)^2), both weighted by the
// micro-batch's share of the step, enter backward through the router.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/comm/communicator.h"
#include "exec/model/params.h"
#include "exec/model/wgrad_defer.h"

namespace loom::exec {

struct MoeRun {
  double aux_coeff = 0;        // load-balancing loss coefficient (0: off)
  double z_coeff = 0;          // router z-loss coefficient (0: off)
  double capacity_factor = 0;  // > 0: at most ceil(cf * N * k / E) rows per expert; 0: dropless
  int ep_size = 1, ep_rank = 0;
  Communicator* ep = nullptr;  // null when ep_size == 1
  double micro_weight = 1;     // a micro-batch's share of the step's loss (1 / micro-batches over DP)
  // Context parallelism: a CP rank routes its chunks of the micro-batch; the
  // load-balancing statistics (tokens and probabilities per expert) are summed
  // over the CP group, as Megatron sums them over its TP x CP group, so the
  // losses are the whole micro-batch's. A capacity stays per rank (Megatron's
  // too). Null when cp_size == 1.
  int cp_size = 1, cp_rank = 0;
  Communicator* cp = nullptr;
  // Parallel folding (etp=1, Megatron-Core): the experts whole on every rank
  // and the EP group over TP x DP; each TP rank routes its 1/tp of the
  // gathered rows (its sequence-parallel shard) and returns the routed output
  // on those rows only (zero elsewhere), so the caller's sum over TP still
  // assembles the layer's output. Routing statistics are summed over TP too.
  bool folded = false;
};

// Per-step diagnostics, weighted by micro_weight and summed over micro-batches
// and layers: what the losses add to the objective.
struct MoeStats {
  double aux_loss = 0, z_loss = 0;
  int64_t dropped = 0;  // token copies dropped for capacity
  // The largest load of this rank's experts over the balanced share (rows
  // received / N*k; 1 without EP): what loom plan --moe-load-imbalance models.
  double max_load = 0;
};

// A micro-batch's saved state of one MoE layer (moe_layer.cc).
struct MoeActs;
void free_moe_acts(MoeActs* a);
struct MoeActsDeleter {
  void operator()(MoeActs* a) const { free_moe_acts(a); }
};
using MoeActsPtr = std::unique_ptr<MoeActs, MoeActsDeleter>;
// Calls f on each large saved tensor (expert rows and intermediates, the
// shared experts'): what mixed precision holds in 16 bits between forward and
// backward, as the dense layer's. Routing state stays fp32.
void for_each_large_moe_act(MoeActs* a, const std::function<void(DeviceBuffer&)>& f);

class MoeLayer {
 public:
  MoeLayer(const ModelDims& dims, const MoeRun& run, int tp_size, int tp_rank, Communicator* tp, ParamStore* params,
           ComputeBackend* backend);

  // h: (N, C) the normed input, whole on every TP rank; y: (N, C) this TP
  // rank's part of the output (summed over TP by the caller).
  Status forward(int layer, const float* h, float* y, int64_t N, MoeActsPtr* acts, MoeStats* stats);
  // dy: (N, C) whole; dh: (N, C) overwritten with this TP rank's part of the
  // input gradient. `grad_scale`: the loss scale (fp16). Frees the state.
  // `defer` (not null): the weight-gradient GEMMs (experts, shared experts,
  // router) go there with the tensors they read, for a later W; h and dy
  // are the caller's to keep.
  Status backward(int layer, const float* h, const float* dy, float* dh, MoeActsPtr* acts, float grad_scale,
                  DeferredWgrad* defer = nullptr);

 private:
  // Rows over the EP group: blocks per peer in `send`, sizes in rows.
  Status exchange(const float* send, const std::vector<int64_t>& send_rows, float* recv,
                  const std::vector<int64_t>& recv_rows);

  ModelDims d_;
  MoeRun run_;
  int tp_size_, tp_rank_;
  Communicator* tp_;
  ParamStore* params_;
  ComputeBackend* backend_;
};

}  // namespace loom::exec
