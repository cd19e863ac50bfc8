// GptDataset: shuffled epochs of documents -> packed, shuffled fixed-length samples.
#include "exec/data/gpt_dataset.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace loom::data {
namespace {

constexpr uint64_t kEpochTag = 0x45504f4348ULL;  // "EPOCH"
constexpr uint64_t kBlockTag = 0x424c4f434bULL;  // "BLOCK"

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Fisher-Yates with a fixed, portable generator (std:: distributions are not
// specified bit-for-bit across standard libraries).
template <typename T>
void shuffle(std::vector<T>* v, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = v->size(); i > 1; --i) {
    // Multiply-shift bound into [0, i); the bias (< i / 2^64) is irrelevant here.
    const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(splitmix64(&state)) * i) >> 64);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t state = a ^ (b * 0xd6e8feb86659fd93ULL);
  return splitmix64(&state);
}

GptDataset::GptDataset(std::shared_ptr<const IndexedDataset> dataset, int64_t seq_len, uint64_t seed)
    : dataset_(std::move(dataset)), seq_len_(seq_len), seed_(seed) {}

Result<std::unique_ptr<GptDataset>> GptDataset::create(std::shared_ptr<const IndexedDataset> dataset, int64_t seq_len,
                                                       uint64_t seed) {
  if (dataset == nullptr) return invalid_argument("gpt dataset: null IndexedDataset");
  if (seq_len < 1) return invalid_argument("gpt dataset: seq_len=" + std::to_string(seq_len) + "; use seq_len >= 1");
  if (dataset->total_tokens() == 0) {
    return invalid_argument("gpt dataset " + dataset->prefix() + ": holds no tokens; drop it from the blend");
  }
  if (dataset->document_count() > std::numeric_limits<int32_t>::max()) {
    return unsupported("gpt dataset " + dataset->prefix() + ": more than 2^31-1 documents; split it into shards");
  }
  std::unique_ptr<GptDataset> g(new GptDataset(std::move(dataset), seq_len, seed));
  g->tokens_per_epoch_ = g->dataset_->total_tokens();
  g->block_samples_ = std::max<int64_t>(1, g->tokens_per_epoch_ / seq_len);
  return g;
}

const GptDataset::Epoch& GptDataset::epoch(int64_t e) {
  for (const Epoch& ep : epochs_) {
    if (ep.id == e) return ep;
  }
  Epoch& ep = epochs_[next_epoch_slot_];
  next_epoch_slot_ ^= 1;
  const int64_t docs = dataset_->document_count();
  ep.order.resize(static_cast<size_t>(docs));
  std::iota(ep.order.begin(), ep.order.end(), 0);
  shuffle(&ep.order, mix_seed(mix_seed(seed_, kEpochTag), static_cast<uint64_t>(e)));
  ep.ends.resize(static_cast<size_t>(docs));
  int64_t end = 0;
  for (int64_t p = 0; p < docs; ++p) {
    end += dataset_->document_num_tokens(ep.order[p]);
    ep.ends[p] = end;
  }
  LOOM_CHECK(end == tokens_per_epoch_, "documents must cover every token of the dataset");
  ep.id = e;
  return ep;
}

const GptDataset::Block& GptDataset::block(int64_t b) {
  for (const Block& bl : blocks_) {
    if (bl.id == b) return bl;
  }
  Block& bl = blocks_[next_block_slot_];
  next_block_slot_ ^= 1;
  bl.perm.resize(static_cast<size_t>(block_samples_));
  std::iota(bl.perm.begin(), bl.perm.end(), 0);
  shuffle(&bl.perm, mix_seed(mix_seed(seed_, kBlockTag), static_cast<uint64_t>(b)));
  bl.id = b;
  return bl;
}

int64_t GptDataset::stream_sample(int64_t i) {
  const int64_t b = i / block_samples_;
  return b * block_samples_ + block(b).perm[static_cast<size_t>(i % block_samples_)];
}

Status GptDataset::sample(int64_t i, int32_t* out) {
  if (i < 0) return invalid_argument("gpt dataset: negative sample index " + std::to_string(i));
  int64_t pos = stream_sample(i) * seq_len_;  // stream position of the first token
  int64_t need = seq_len_ + 1;
  while (need > 0) {
    const int64_t e = pos / tokens_per_epoch_, off = pos % tokens_per_epoch_;
    const Epoch& ep = epoch(e);
    // First document in this epoch's order that ends after `off` (skips empty documents).
    size_t p = static_cast<size_t>(std::upper_bound(ep.ends.begin(), ep.ends.end(), off) - ep.ends.begin());
    int64_t in_epoch = off;
    while (need > 0 && p < ep.ends.size()) {
      const int64_t doc_begin = p == 0 ? 0 : ep.ends[p - 1];
      const int64_t in_doc = in_epoch - doc_begin, take = std::min(need, ep.ends[p] - in_epoch);
      if (take > 0) {
        LOOM_RETURN_IF_ERROR(dataset_->read_tokens(dataset_->document_first_token(ep.order[p]) + in_doc, take, out));
        out += take;
        need -= take;
        in_epoch += take;
        pos += take;
      }
      ++p;
    }
  }
  return Status::ok();
}

}  // namespace loom::data
