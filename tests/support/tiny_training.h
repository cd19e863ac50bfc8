// The tiny GPT-2 and Llama models and training setup the executor's tests
// share: 2 layers, 4 heads (Llama: 2 KV heads, untied head), vocabulary 256
// (byte tokens), 64 positions; batch 8 x 32 tokens, warm-up then cosine LR.
#pragma once

#include <string>

#include "core/resources.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "exec/runtime/trainer.h"

namespace loom::exec::test_support {

inline ModelSpec tiny_model(bool gpt2, int hidden = 32) {
  const std::string h = std::to_string(hidden), f = std::to_string(2 * hidden);
  std::string json = gpt2 ? R"({"model_type":"gpt2","n_embd":)" + h +
                                R"(,"n_layer":2,"n_head":4,"n_positions":64,"vocab_size":256})"
                          : R"({"model_type":"llama","hidden_size":)" + h + R"(,"intermediate_size":)" + f +
                                R"(,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,)"
                                R"("vocab_size":256,"max_position_embeddings":64,"tie_word_embeddings":false})";
  auto m = parse_model_spec(json, gpt2 ? "tiny-gpt2" : "tiny-llama");
  LOOM_CHECK(m.is_ok(), m.status().to_string());
  return *m;
}

inline TrainerConfig tiny_config(bool gpt2, const std::string& layout, int64_t steps, int hidden = 32) {
  TrainerConfig c;
  c.model = tiny_model(gpt2, hidden);
  c.train.global_batch = 8;
  c.train.seq_len = 32;
  c.train.steps = steps;
  c.train.lr = 3e-3;
  c.train.min_lr = 3e-4;
  c.train.warmup_steps = 5;
  c.train.weight_decay = 0.0;
  auto l = parse_layout(layout);
  LOOM_CHECK(l.is_ok(), l.status().to_string());
  c.layout = *l;
  return c;
}

// The sample corpus, found like `loom execute` finds it (next to the
// executable in an install tree or bundle, $LOOM_HOME, the source tree).
inline std::string corpus_path() {
  auto path = default_corpus();
  LOOM_CHECK(path.is_ok(), path.status().to_string());
  return *path;
}

}  // namespace loom::exec::test_support
