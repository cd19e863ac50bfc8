#include "core/stage_split.h"

#include "core/layout.h"

namespace loom {

int StageSplit::sum_over_chunks(const std::vector<int>& by_chunk, int stage) const {
  int n = 0;
  for (int c = 0; c < v; ++c) n += by_chunk[size_t(global(stage, c))];
  return n;
}

void StageSplit::keep_stage_totals() {
  stage_total_.assign(size_t(pp), 0);
  stage_moe_total_.assign(size_t(pp), 0);
  for (int s = 0; s < pp; ++s) {
    stage_total_[size_t(s)] = sum_over_chunks(chunk_layers, s);
    stage_moe_total_[size_t(s)] = sum_over_chunks(chunk_moe_layers, s);
  }
  totals_schedule_ = schedule;
}

StageSplit split_layers(const ModelSpec& model, const Layout& l) {
  StageSplit s = split_layers(model, l.pp, l.virtual_stages, l.first_stage_layers, l.last_stage_layers);
  s.schedule = l.schedule;
  s.keep_stage_totals();
  return s;
}

RecomputedLayers chunk_recomputed_layers(const ModelSpec& model, const Layout& l, const StageSplit& split, int g) {
  RecomputedLayers r;
  if (l.recompute != Recompute::kFull) return r;
  const int layers = split.chunk_layers[g];
  if (l.recompute_layers <= 0 || l.recompute_layers >= layers) {
    r.moe = split.chunk_moe_layers[g];
    r.dense = layers - r.moe;
    return r;
  }
  for (int i = 0; i < l.recompute_layers; ++i) {
    if (model.is_moe_layer(split.chunk_first_layer[g] + i)) ++r.moe;
    else ++r.dense;
  }
  return r;
}

RecomputedLayers stage_recomputed_layers(const ModelSpec& model, const Layout& l, const StageSplit& split, int stage) {
  RecomputedLayers r;
  for (int c = 0; c < l.virtual_stages; ++c) {
    const RecomputedLayers x = chunk_recomputed_layers(model, l, split, l.global_chunk(stage, c));
    r.dense += x.dense;
    r.moe += x.moe;
  }
  return r;
}

StageSplit split_layers(const ModelSpec& model, int pp, int v, int first, int last) {
  StageSplit s;
  s.pp = pp;
  s.v = v;
  int chunks = pp * v;
  const bool pin_first = first > 0 && chunks > 1, pin_last = last > 0 && chunks > 1;
  // The chunks that share what the pinned ones leave: middle first, then the
  // first, then the last.
  std::vector<int> order;
  for (int g = 1; g + 1 < chunks; ++g) order.push_back(g);
  if (!pin_first) order.push_back(0);
  if (chunks > 1 && !pin_last) order.push_back(chunks - 1);
  int rest = model.num_layers - (pin_first ? first : 0) - (pin_last ? last : 0);
  const int shared = static_cast<int>(order.size());
  int base = shared > 0 ? rest / shared : 0, extra = shared > 0 ? rest % shared : 0;
  s.chunk_layers.assign(chunks, base);
  if (pin_first) s.chunk_layers[0] = first;
  if (pin_last) s.chunk_layers[chunks - 1] = last;
  for (int i = 0; i < extra; ++i) s.chunk_layers[order[i]] += 1;
  s.chunk_first_layer.resize(chunks);
  s.chunk_moe_layers.assign(chunks, 0);
  int begin = 0;
  for (int g = 0; g < chunks; ++g) {
    s.chunk_first_layer[g] = begin;
    for (int l = begin; l < begin + s.chunk_layers[g]; ++l) s.chunk_moe_layers[g] += model.is_moe_layer(l) ? 1 : 0;
    begin += s.chunk_layers[g];
  }
  s.keep_stage_totals();
  return s;
}

}  // namespace loom
