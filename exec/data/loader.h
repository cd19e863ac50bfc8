// Loader: the training data stream of one DP rank, with background prefetch.
//
// The global sample stream is a pure function of (seed, datasets, seq_len,
// weights): global sample g comes from dataset k = blend(g) (Megatron's
// BlendedDataset rule: the k maximising w[k]*max(g,1) - taken[k], ties to the
// lowest k; no RNG), and is that dataset's GptDataset sample number taken[k]
// (see gpt_dataset.h). Step t covers global samples [c + t*B, c + (t+1)*B),
// where c is the cursor the loader started from; DP rank r gets rows
// [r*B/dp, (r+1)*B/dp) of it. So the rows of all ranks together are the
// global batch, whatever the dp size, and a cursor (which counts GLOBAL
// samples) resumes the same stream under another dp size, as Megatron's
// MegatronPretrainingSampler does with consumed_train_samples.
//
// Threading: a background thread fills `prefetch_batches` reusable buffers
// (bounded queue); next() hands them out in order. The public methods must be
// called from one thread. The destructor stops and joins the prefetch thread
// without waiting for the queue to drain. An error met by the thread (e.g. a
// token that is not an int32 id) is returned by the next() call that reaches
// that batch, and by every next() after it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "exec/data/gpt_dataset.h"
#include "exec/data/indexed_dataset.h"

namespace loom::data {

struct LoaderCursor {
  int64_t consumed_samples = 0;       // global samples consumed
  std::vector<int64_t> per_dataset;   // (K) of those, drawn from each dataset
};

// The cursor as a checkpoint stores it ({"consumed_samples": N, "per_dataset":
// [n0, n1, ...]}); consumed_samples defaults to `default_consumed`. Errors
// (kInvalidArgument, naming `where` and the field): not an object, negative or
// non-integer counts, per-dataset counts that overflow or do not sum to
// consumed_samples.
Result<LoaderCursor> parse_loader_cursor(const std::string& json_text, int64_t default_consumed,
                                         const std::string& where);

// The blend's dataset choice for global sample `g` given the samples already
// taken from each dataset (normalised weights). Exposed for tests.
int blend_pick(const std::vector<double>& weights, const std::vector<int64_t>& taken, int64_t g);

class Loader {
 public:
  // weights: one per dataset, each > 0 (normalised here); empty means equal.
  // global_batch must be divisible by dp_size; 0 <= dp_rank < dp_size.
  static Result<std::unique_ptr<Loader>> create(std::vector<std::shared_ptr<IndexedDataset>> datasets,
                                                std::vector<double> weights, int64_t seq_len, int64_t global_batch,
                                                int dp_rank, int dp_size, uint64_t seed, int prefetch_batches = 2);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Blocks until this rank's next batch is ready and copies it out:
  // tokens, targets are (B/dp, seq_len) row-major. Returns the seconds spent waiting.
  Result<double> next(int32_t* tokens, int32_t* targets);
  // The position after the batches next() has returned so far.
  LoaderCursor cursor() const { return cursor_; }
  // Continues exactly from `c` (also one saved under another dp size). An empty
  // per_dataset is recomputed from consumed_samples (O(consumed * K)).
  Status restore(const LoaderCursor& c);
  // Largest token id in the batches returned so far (inputs and targets), or -1.
  int64_t vocab_guard_max_token() const { return max_token_; }

  int64_t rows_per_rank() const { return global_batch_ / dp_size_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  struct Batch {
    std::vector<int32_t> tokens;   // (B/dp, seq_len)
    std::vector<int32_t> targets;  // (B/dp, seq_len)
    LoaderCursor after;            // cursor once this batch is consumed
    int64_t max_token = -1;
    Status status;
  };
  Loader() = default;
  void start_thread();
  void stop_thread();
  void run_prefetch();
  Status fill(Batch* batch);  // runs on the prefetch thread; advances produce_

  std::vector<std::shared_ptr<IndexedDataset>> datasets_;
  std::vector<std::unique_ptr<GptDataset>> gpt_;  // (K), used only by the prefetch thread
  std::vector<double> weights_;                   // (K), normalised
  int64_t seq_len_ = 0, global_batch_ = 0;
  int dp_rank_ = 0, dp_size_ = 1;
  std::vector<int32_t> sample_buf_;  // (seq_len+1), prefetch thread only

  // Consumer side (the caller's thread).
  LoaderCursor cursor_;
  int64_t max_token_ = -1;
  Status sticky_error_;

  // Producer side: owned by the prefetch thread while it runs.
  LoaderCursor produce_;

  // Shared, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Batch> buffers_;  // (prefetch_batches)
  std::deque<int> free_, ready_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace loom::data
