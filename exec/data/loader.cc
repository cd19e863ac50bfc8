// Loader: blended global sample stream, DP slicing, prefetch thread.
#include "exec/data/loader.h"

#include "core/json_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace loom::data {

int blend_pick(const std::vector<double>& weights, const std::vector<int64_t>& taken, int64_t g) {
  const double scale = static_cast<double>(std::max<int64_t>(g, 1));
  int best = 0;
  double best_deficit = weights[0] * scale - static_cast<double>(taken[0]);
  for (size_t k = 1; k < weights.size(); ++k) {
    const double deficit = weights[k] * scale - static_cast<double>(taken[k]);
    if (deficit > best_deficit) {  // strict: ties go to the lowest k
      best = static_cast<int>(k);
      best_deficit = deficit;
    }
  }
  return best;
}

Result<std::unique_ptr<Loader>> Loader::create(std::vector<std::shared_ptr<IndexedDataset>> datasets,
                                               std::vector<double> weights, int64_t seq_len, int64_t global_batch,
                                               int dp_rank, int dp_size, uint64_t seed, int prefetch_batches) {
  const size_t k = datasets.size();
  if (k == 0) return invalid_argument("loader: no datasets; pass at least one IndexedDataset");
  if (weights.empty()) weights.assign(k, 1.0);
  if (weights.size() != k) {
    return invalid_argument("loader: " + std::to_string(weights.size()) + " weights for " + std::to_string(k) +
                            " datasets; give one weight per dataset");
  }
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    if (!(weights[i] > 0) || !std::isfinite(weights[i])) {
      return invalid_argument("loader: weight[" + std::to_string(i) + "]=" + std::to_string(weights[i]) +
                              "; weights must be finite and > 0 (drop a dataset instead of weighting it 0)");
    }
    sum += weights[i];
  }
  for (double& w : weights) w /= sum;
  if (global_batch < 1) return invalid_argument("loader: global_batch=" + std::to_string(global_batch) + "; use >= 1");
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
    return invalid_argument("loader: dp_rank=" + std::to_string(dp_rank) + " dp_size=" + std::to_string(dp_size) +
                            "; need 0 <= dp_rank < dp_size");
  }
  if (global_batch % dp_size != 0) {
    return invalid_argument("loader: global_batch=" + std::to_string(global_batch) + " is not divisible by dp=" +
                            std::to_string(dp_size) + "; use a multiple of dp");
  }
  if (prefetch_batches < 1) return invalid_argument("loader: prefetch_batches must be >= 1");

  std::unique_ptr<Loader> l(new Loader());
  for (size_t i = 0; i < k; ++i) {
    if (datasets[i] == nullptr) return invalid_argument("loader: dataset " + std::to_string(i) + " is null");
    // Per-dataset seed: two copies of one dataset in a blend still give different streams.
    LOOM_ASSIGN_OR_RETURN(auto g, GptDataset::create(datasets[i], seq_len, mix_seed(seed, i)));
    l->gpt_.push_back(std::move(g));
  }
  l->datasets_ = std::move(datasets);
  l->weights_ = std::move(weights);
  l->seq_len_ = seq_len;
  l->global_batch_ = global_batch;
  l->dp_rank_ = dp_rank;
  l->dp_size_ = dp_size;
  l->sample_buf_.resize(static_cast<size_t>(seq_len + 1));
  l->buffers_.resize(static_cast<size_t>(prefetch_batches));
  const size_t elems = static_cast<size_t>(l->rows_per_rank() * seq_len);
  for (Batch& b : l->buffers_) {
    b.tokens.resize(elems);
    b.targets.resize(elems);
  }
  l->cursor_.per_dataset.assign(k, 0);
  l->produce_ = l->cursor_;
  l->start_thread();
  return l;
}

Loader::~Loader() { stop_thread(); }

void Loader::start_thread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    free_.clear();
    ready_.clear();
    for (size_t i = 0; i < buffers_.size(); ++i) free_.push_back(static_cast<int>(i));
  }
  thread_ = std::thread([this] { run_prefetch(); });
}

void Loader::stop_thread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::run_prefetch() {
  for (;;) {
    int b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !free_.empty(); });
      if (stop_) return;
      b = free_.front();
      free_.pop_front();
    }
    // The buffer is ours alone until it is pushed onto ready_.
    Batch& batch = buffers_[static_cast<size_t>(b)];
    batch.status = fill(&batch);
    const bool failed = !batch.status.is_ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(b);
    }
    cv_.notify_all();
    if (failed) return;  // the stream cannot continue past a bad batch
  }
}

Status Loader::fill(Batch* batch) {
  const int64_t rows = rows_per_rank(), row0 = dp_rank_ * rows;
  int64_t max_token = -1;
  for (int64_t r = 0; r < global_batch_; ++r) {
    // Every rank walks the whole global batch so the blend counters stay global.
    const int64_t g = produce_.consumed_samples + r;
    const int k = blend_pick(weights_, produce_.per_dataset, g);
    const int64_t idx = produce_.per_dataset[static_cast<size_t>(k)]++;
    if (r < row0 || r >= row0 + rows) continue;
    Status s = gpt_[static_cast<size_t>(k)]->sample(idx, sample_buf_.data());
    if (!s.is_ok()) {
      return s.with_context("loader: global sample " + std::to_string(g) + " (dataset " + std::to_string(k) +
                            " sample " + std::to_string(idx) + ")");
    }
    const size_t at = static_cast<size_t>((r - row0) * seq_len_), n = static_cast<size_t>(seq_len_);
    std::memcpy(batch->tokens.data() + at, sample_buf_.data(), n * sizeof(int32_t));
    std::memcpy(batch->targets.data() + at, sample_buf_.data() + 1, n * sizeof(int32_t));
    for (int32_t t : sample_buf_) {
      // A signed shard (int8..int64) can hold negative ids, which no
      // vocabulary has: the kernels would read them as a zero embedding.
      if (t < 0)
        return invalid_argument("loader: token id " + std::to_string(t) + " in global sample " + std::to_string(g) +
                                " (dataset " + std::to_string(k) + " sample " + std::to_string(idx) +
                                ") is negative; the shard is not a tokenizer's output: re-run loom preprocess");
      max_token = std::max<int64_t>(max_token, t);
    }
  }
  produce_.consumed_samples += global_batch_;
  batch->after = produce_;
  batch->max_token = max_token;
  return Status::ok();
}

Result<double> Loader::next(int32_t* tokens, int32_t* targets) {
  if (!sticky_error_.is_ok()) return sticky_error_;
  const auto t0 = std::chrono::steady_clock::now();
  int b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !ready_.empty(); });
    b = ready_.front();
    ready_.pop_front();
  }
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Batch& batch = buffers_[static_cast<size_t>(b)];
  if (!batch.status.is_ok()) {
    sticky_error_ = batch.status;
    return sticky_error_;
  }
  std::memcpy(tokens, batch.tokens.data(), batch.tokens.size() * sizeof(int32_t));
  std::memcpy(targets, batch.targets.data(), batch.targets.size() * sizeof(int32_t));
  cursor_ = batch.after;
  max_token_ = std::max(max_token_, batch.max_token);
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(b);
  }
  cv_.notify_all();
  return waited_s;
}

Result<LoaderCursor> parse_loader_cursor(const std::string& text, int64_t default_consumed, const std::string& where) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, where));
  if (!j.is_object()) return invalid_argument(where + ": the data cursor must be an object");
  LoaderCursor c;
  LOOM_ASSIGN_OR_RETURN(c.consumed_samples, json_int_or(j, "consumed_samples", default_consumed, where));
  if (c.consumed_samples < 0)
    return invalid_argument(where + ".consumed_samples = " + std::to_string(c.consumed_samples) + " is negative");
  if (j.contains("per_dataset") && !j["per_dataset"].is_null()) {
    const Json& p = j["per_dataset"];
    if (!p.is_array()) return invalid_argument(where + ".per_dataset must be an array of sample counts");
    int64_t sum = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string wi = where + ".per_dataset[" + std::to_string(i) + "]";
      if (!p[i].is_number_integer() || (p[i].is_number_unsigned() && p[i].get<uint64_t>() > uint64_t(INT64_MAX)))
        return invalid_argument(wi + " must be an integer, got " + p[i].dump());
      const int64_t n = p[i].get<int64_t>();
      if (n < 0 || n > INT64_MAX - sum) return invalid_argument(wi + " = " + std::to_string(n) + " is out of range");
      sum += n;
      c.per_dataset.push_back(n);
    }
    if (sum != c.consumed_samples)
      return invalid_argument(where + ": per_dataset sums to " + std::to_string(sum) + " != consumed_samples " +
                              std::to_string(c.consumed_samples));
  }
  return c;
}

Status Loader::restore(const LoaderCursor& c) {
  const size_t k = gpt_.size();
  if (c.consumed_samples < 0) return invalid_argument("loader restore: negative consumed_samples");
  LoaderCursor target = c;
  if (target.per_dataset.empty()) {  // replay the (cheap, RNG-free) blend
    target.per_dataset.assign(k, 0);
    for (int64_t g = 0; g < c.consumed_samples; ++g) ++target.per_dataset[blend_pick(weights_, target.per_dataset, g)];
  }
  if (target.per_dataset.size() != k) {
    return invalid_argument("loader restore: cursor has " + std::to_string(target.per_dataset.size()) +
                            " per-dataset counts for " + std::to_string(k) + " datasets; the blend changed");
  }
  int64_t sum = 0;
  for (int64_t n : target.per_dataset) {
    if (n < 0 || n > INT64_MAX - sum) return invalid_argument("loader restore: per-dataset count out of range");
    sum += n;
  }
  if (sum != c.consumed_samples) {
    return invalid_argument("loader restore: per-dataset counts sum to " + std::to_string(sum) +
                            " != consumed_samples " + std::to_string(c.consumed_samples));
  }
  stop_thread();
  cursor_ = target;
  produce_ = target;
  sticky_error_ = Status::ok();
  start_thread();
  return Status::ok();
}

}  // namespace loom::data
