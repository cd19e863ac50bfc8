// GptDataset: Megatron-style fixed-length GPT samples from one IndexedDataset,
// as a pure function of (dataset, seq_len, seed) and the sample index.
//
// Token stream. Epoch e is every document of the dataset (a document is the
// concatenation of its sequences, including the EOD token the preprocessor
// appended) in an order shuffled with seed (seed, e). Epochs are concatenated
// into one unbounded stream of tokens, so the stream never runs out: a run
// that asks for more samples than one epoch holds simply reads further epochs.
//
// Samples. Stream sample s is the seq_len+1 tokens starting at stream position
// s*seq_len (consecutive samples overlap by one token: inputs are the first
// seq_len, targets the last seq_len), read across document and epoch
// boundaries. Samples are shuffled in blocks of W = max(1, T / seq_len)
// samples (T = tokens per epoch, so a block is about one epoch): sample i is
// stream sample (i / W) * W + perm_b[i % W], perm_b seeded with (seed, b).
//
// Differences from Megatron's GPTDataset (same shape, not the same numbers):
// the RNG is splitmix64 + Fisher-Yates, not numpy's RandomState, and the sample
// shuffle is per block instead of over the whole (finite) sample index, which
// is what makes the stream unbounded and every sample O(log D) to locate with
// no index files to build, cache or share between ranks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "exec/data/indexed_dataset.h"

namespace loom::data {

// splitmix64 finaliser: a well-mixed 64-bit hash, used to derive every seed.
uint64_t mix_seed(uint64_t a, uint64_t b);

class GptDataset {
 public:
  // Fails (invalid_argument) for a null or empty dataset or seq_len < 1.
  static Result<std::unique_ptr<GptDataset>> create(std::shared_ptr<const IndexedDataset> dataset, int64_t seq_len,
                                                    uint64_t seed);

  int64_t seq_len() const { return seq_len_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  int64_t samples_per_block() const { return block_samples_; }  // W
  const IndexedDataset& dataset() const { return *dataset_; }

  // Writes the seq_len+1 tokens of sample i (any i >= 0) to out.
  // Not thread-safe: it keeps small caches of epoch orders and block permutations.
  Status sample(int64_t i, int32_t* out);

  // Stream sample that sample i reads (exposed for tests).
  int64_t stream_sample(int64_t i);

 private:
  struct Epoch {
    int64_t id = -1;
    std::vector<int32_t> order;  // (D) document ids in this epoch's order
    std::vector<int64_t> ends;   // (D) stream offset inside the epoch where order[p] ends
  };
  struct Block {
    int64_t id = -1;
    std::vector<int64_t> perm;  // (W) permutation of [0, W)
  };
  GptDataset(std::shared_ptr<const IndexedDataset> dataset, int64_t seq_len, uint64_t seed);
  const Epoch& epoch(int64_t e);
  const Block& block(int64_t b);

  std::shared_ptr<const IndexedDataset> dataset_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t tokens_per_epoch_ = 0;  // T
  int64_t block_samples_ = 1;     // W
  // Two slots each: a sample may straddle two epochs; blocks are read in order.
  std::array<Epoch, 2> epochs_;
  std::array<Block, 2> blocks_;
  int next_epoch_slot_ = 0, next_block_slot_ = 0;
};

}  // namespace loom::data
