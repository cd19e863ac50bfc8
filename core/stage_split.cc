#include "core/stage_split.h"

namespace loom {

int StageSplit::stage_layers(int stage) const {
  int n = 0;
  for (int c = 0; c < v; ++c) n += chunk_layers[c * pp + stage];
  return n;
}

int StageSplit::stage_moe_layers(int stage) const {
  int n = 0;
  for (int c = 0; c < v; ++c) n += chunk_moe_layers[c * pp + stage];
  return n;
}

StageSplit split_layers(const ModelSpec& model, int pp, int v) {
  StageSplit s;
  s.pp = pp;
  s.v = v;
  int chunks = pp * v;
  int base = model.num_layers / chunks, extra = model.num_layers % chunks;
  s.chunk_layers.assign(chunks, base);
  // Extra layers: middle chunks first, then the first, then the last.
  std::vector<int> order;
  for (int g = 1; g + 1 < chunks; ++g) order.push_back(g);
  order.push_back(0);
  if (chunks > 1) order.push_back(chunks - 1);
  for (int i = 0; i < extra; ++i) s.chunk_layers[order[i]] += 1;
  s.chunk_first_layer.resize(chunks);
  s.chunk_moe_layers.assign(chunks, 0);
  int first = 0;
  for (int g = 0; g < chunks; ++g) {
    s.chunk_first_layer[g] = first;
    for (int l = first; l < first + s.chunk_layers[g]; ++l) s.chunk_moe_layers[g] += model.is_moe_layer(l) ? 1 : 0;
    first += s.chunk_layers[g];
  }
  return s;
}

}  // namespace loom
