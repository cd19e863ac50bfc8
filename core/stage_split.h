// How a model's layers are split over the pp * v model chunks of a layout:
// the one split both the simulator and the executor use.
#pragma once

#include <vector>

#include "core/layout.h"
#include "core/model_spec.h"

namespace loom {

// How the layers are split over the pp*v model chunks.
struct StageSplit {
  int pp = 1, v = 1;
  Schedule schedule = Schedule::k1F1B;  // for the placement (global_chunk_of)
  std::vector<int> chunk_first_layer;  // by global chunk (global_chunk_of)
  std::vector<int> chunk_layers;
  std::vector<int> chunk_moe_layers;
  int global(int stage, int chunk) const { return global_chunk_of(schedule, pp, stage, chunk); }
  // A stage's layers, all its chunks together (from the totals split_layers
  // kept; summed where the split was written by hand or placed since).
  int stage_layers(int stage) const {
    return totals_hold() ? stage_total_[size_t(stage)] : sum_over_chunks(chunk_layers, stage);
  }
  int stage_moe_layers(int stage) const {
    return totals_hold() ? stage_moe_total_[size_t(stage)] : sum_over_chunks(chunk_moe_layers, stage);
  }
  // Keeps the stages' totals of the chunks' layers under the current
  // placement: the closed form asks for them per stage of every layout.
  // split_layers calls it; call it again after changing chunk_layers or
  // chunk_moe_layers by hand (a changed schedule is noticed).
  void keep_stage_totals();

 private:
  bool totals_hold() const { return totals_schedule_ == schedule && int(stage_total_.size()) == pp; }
  int sum_over_chunks(const std::vector<int>& by_chunk, int stage) const;
  std::vector<int> stage_total_, stage_moe_total_;  // by stage, under totals_schedule_
  Schedule totals_schedule_ = Schedule::k1F1B;
};
// Even split; when L is not a multiple of pp*v the extra layers go to middle
// chunks first (the first and last hold the embedding and the head).
// `first` / `last` > 0 pin the layers of the first and the last chunk
// (global chunks 0 and pp*v - 1), as Megatron's --decoder-first-pipeline-
// num-layers / --decoder-last-pipeline-num-layers do; the other chunks share
// the rest by the rule above. validate_layout checks that they fit.
StageSplit split_layers(const ModelSpec& model, int pp, int v, int first = 0, int last = 0);
// The split of a layout (its pp, v, schedule, first_stage_layers, last_stage_layers).
StageSplit split_layers(const ModelSpec& model, const Layout& layout);

// Layers of a chunk that recompute under the layout: all of them with
// recompute=full, the first recompute_layers of them when that is set
// (Megatron's --recompute-method block), none otherwise (selective
// recompute is a part of every layer, not whole layers).
struct RecomputedLayers {
  int dense = 0, moe = 0;
  int total() const { return dense + moe; }
  bool operator==(const RecomputedLayers&) const = default;
};
RecomputedLayers chunk_recomputed_layers(const ModelSpec& model, const Layout& layout, const StageSplit& split,
                                         int global_chunk);
RecomputedLayers stage_recomputed_layers(const ModelSpec& model, const Layout& layout, const StageSplit& split,
                                         int stage);

}  // namespace loom
