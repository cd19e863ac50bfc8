// MinHash signatures and LSH band keys for near-duplicate detection, after
// datatrove's MinhashDedupSignature (src/datatrove/pipeline/dedup/minhash.py)
// and its simplify_text (src/datatrove/utils/text.py).
//
// Per document:
//   1. simplify_text(): lowercase, whitespace collapsed, punctuation removed,
//      diacritics removed, digit runs -> "0" (below).
//   2. Words = the simplified text split at spaces. Shingles = every run of
//      `ngram` consecutive words, joined by one space, hashed with XXH3_64bits.
//      A text with fewer than `ngram` words (but at least one) is one shingle
//      of all its words; a text with no word has no shingle, no signature and
//      no band keys (it can never be a near duplicate).
//   3. bands*rows permutations h_i(x) = (a_i*x + b_i) mod (2^61-1), with
//      x = shingle hash mod (2^61-1), a_i in [1, p-1], b_i in [0, p-1] drawn
//      from std::mt19937_64(seed) (all a_i first, then all b_i, as
//      `raw() % range`: the same numbers on every machine and standard
//      library, unlike std::uniform_int_distribution). Signature_i = min over
//      the shingles of h_i.
//   4. Band j's key = XXH3_64bits_withSeed(signature[j*rows .. j*rows+rows)
//      in native byte order, seed j); keys only live in memory (DedupIndex).
//      Two documents are near duplicates when any band key is equal, which
//      happens with probability 1 - (1 - s^rows)^bands for Jaccard similarity
//      s of their shingle sets. The threshold, where that S-curve is about
//      steepest (P ~ 1 - 1/e there), is (1/bands)^(1/rows): 0.719 for the
//      defaults 14 x 8 (P = 0.05 at s = 0.5, 0.56 at 0.7, 0.92 at 0.8,
//      0.9996 at 0.9).
//
// Differences from datatrove (docs/data.md "Cleaning"): words are split at
// whitespace, not by a language word tokenizer (NLTK for English); shingles
// hash with XXH3_64bits (datatrove's HashConfig: 64-bit xxhash in recent
// versions, a 32-bit SHA-1 prefix in older ones); the permutation
// is computed exactly in 128-bit arithmetic (datatrove's numpy product wraps
// mod 2^64 before the mod p); the permutation parameters come from
// mt19937_64, not numpy's RandomState; a text shorter than ngram words is one
// shingle (datatrove: no shingle, never deduplicated).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace loom::data {

struct MinHashOptions {
  int ngram = 5;      // words per shingle (datatrove n_grams)
  int bands = 14;     // LSH bands (datatrove num_buckets)
  int rows = 8;       // hashes per band (datatrove hashes_per_bucket)
  uint64_t seed = 1;  // seeds the permutations (datatrove seed)

  int permutations() const { return bands * rows; }
  // (1/bands)^(1/rows), the similarity around which matching turns likely.
  double threshold() const;
  // Probability that two documents whose shingle sets have Jaccard
  // similarity s share at least one band key: 1 - (1 - s^rows)^bands.
  double match_probability(double s) const;
  // invalid_argument naming the field: ngram in 1..64, bands and rows >= 1,
  // bands*rows <= 4096.
  Status validate() const;
};

// datatrove's simplify_text with its default TextNormConfig: lowercase (full
// Unicode case mapping, root locale), whitespace runs -> " " and trimmed,
// punctuation removed (datatrove's PUNCTUATION set: ASCII punctuation, 34
// CJK/typographic marks, the C0/C1 controls that are not whitespace), NFD then
// combining marks (Mn) dropped, runs of decimal digits (Nd) -> "0". Whitespace
// is Python's str.isspace() set. The result's words are separated by exactly
// one space (datatrove's word tokenizer sees the same words).
// Needs ICU for non-ASCII text; a build without ICU lowercases ASCII only and
// keeps diacritics (the Cleaner refuses near-dedup there; see clean.h).
// `text` must be valid UTF-8.
std::string simplify_text(std::string_view text);

// Signatures and band keys for fixed options. Immutable after construction:
// share one between threads.
class MinHasher {
 public:
  explicit MinHasher(const MinHashOptions& options);  // options must validate()
  const MinHashOptions& options() const { return options_; }

  // The shingle hashes of `text` (simplified here), sorted, distinct. Empty
  // when the simplified text has no word.
  std::vector<uint64_t> shingles(std::string_view text) const;
  // The bands*rows minimums over the shingles; empty when there is none.
  std::vector<uint64_t> signature(std::string_view text) const;
  std::vector<uint64_t> signature_of(const std::vector<uint64_t>& shingles) const;
  // One key per band from a signature (empty signature -> no keys).
  std::vector<uint64_t> band_keys(const std::vector<uint64_t>& signature) const;

 private:
  // Shingle hashes (not sorted, possibly repeated) of an already simplified text.
  void shingle_hashes(std::string_view simplified, std::vector<uint64_t>* out) const;

  MinHashOptions options_;
  std::vector<uint64_t> a_, b_;
};

// Fraction of equal positions of two signatures (the MinHash estimate of
// their Jaccard similarity); 0 when either is empty or they differ in length.
double estimate_jaccard(const std::vector<uint64_t>& sig1, const std::vector<uint64_t>& sig2);
// |A ∩ B| / |A ∪ B| of two sorted distinct sets; 0 when both are empty.
double jaccard(const std::vector<uint64_t>& sorted1, const std::vector<uint64_t>& sorted2);

// True when this build has ICU (normalization and near-dedup available).
bool have_icu();

}  // namespace loom::data
