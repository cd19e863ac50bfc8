// Text cleaning for preprocessing (raw documents -> cleaned -> tokenized), as
// datatrove and dolma do it: Unicode normalization, control-character
// stripping, length and word-count filters, field filters on tags written by
// an upstream tool, exact and MinHash-LSH near-duplicate removal. Every step
// is off unless asked for, and every removal is counted (CleanStats).
// docs/data.md "Cleaning" has the defaults and how they compare.
//
// Two stages, to fit a pipeline of parallel workers and one in-order writer
// (exec/data/preprocess.h):
//   per document (any thread, pure): Cleaner::check_fields and Cleaner::clean
//     transform the text in place, reject it or return its dedup keys;
//   in input order (one thread): DedupIndex::admit keeps the first copy of
//     every (near-)duplicate, so the output is the same for any worker count.
//
//   auto cleaner = Cleaner::create(options);          // validates once
//   CleanStats stats = cleaner->new_stats();
//   // worker, per document:
//   DocKeys keys;
//   DocVerdict v = cleaner->check_fields(record);     // record: the JSON object
//   if (v.kept()) v = cleaner->clean(&text, &keys);
//   // writer, in input order:
//   if (v.kept()) v.reason = index.admit(keys);
//   stats.add(v);
//   if (v.kept()) write(text);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "exec/data/field_filter.h"
#include "exec/data/minhash.h"

namespace loom::data {

enum class Normalization : uint8_t { kNone, kNfc, kNfkc };
const char* normalization_name(Normalization n);  // "none", "nfc", "nfkc"
// "none" | "nfc" | "nfkc" (any case); invalid_argument otherwise.
Result<Normalization> parse_normalization(const std::string& text);

struct CleanOptions {
  // Unicode normalization of the text written (needs ICU). NFC composes
  // (e + U+0301 -> é) and changes nothing visible; NFKC also folds
  // compatibility forms (ﬁ -> fi, full-width １ -> 1, ² -> 2).
  Normalization normalization = Normalization::kNone;
  // Removes the Cc control characters U+0000..U+001F, U+007F..U+009F except
  // \t \n \r, plus the format characters ftfy's remove_control_chars removes:
  // U+FEFF (byte order mark / zero-width no-break space), U+206A..U+206F
  // (deprecated format controls), U+FFF9..U+FFFC (interlinear annotation,
  // object replacement). Kept: U+200B zero-width space, U+200C/U+200D joiners,
  // bidi marks and embeddings, U+00AD soft hyphen, tag characters (emoji
  // flags), U+2028/U+2029.
  bool strip_control = false;
  // Bounds in code points of the cleaned text (after stripping and
  // normalization); 0 = no bound.
  int64_t min_chars = 0;
  int64_t max_chars = 0;
  // Lower bound on whitespace-separated words of the cleaned text (Python's
  // str.split() words: runs of non-whitespace); 0 = no bound.
  int64_t min_words = 0;
  // Drop a document whose cleaned text is byte-identical to an earlier kept
  // one (XXH3_64bits of the cleaned text; expected false matches between
  // different texts n^2/2^65: 0.03 for a billion documents).
  bool exact_dedup = false;
  // Drop a document whose MinHash signature shares an LSH band with an
  // earlier kept one (exec/data/minhash.h; needs ICU).
  bool near_dedup = false;
  MinHashOptions minhash;
  // Field filter specs (exec/data/field_filter.h), all of which must pass:
  // "lang=en", "lang=en,fr", "quality>=0.5", "flag!=spam".
  std::vector<std::string> field_filters;

  // invalid_argument naming the option and the fix (negative bounds,
  // min_chars > max_chars, a bad filter spec, bad MinHash parameters);
  // unsupported when normalization or near-dedup is asked of a build without ICU.
  Status validate() const;
  // True when some step is on (a pipeline can skip cleaning otherwise).
  bool any() const;
  // The options as the manifest records them, MinHash threshold included.
  nlohmann::json to_json() const;
};

// Why a document is not kept; kKept when it is. Documents are checked in
// this order and counted under the first reason that applies.
enum class CleanReason : uint8_t {
  kKept,
  kFilterFieldMissing,  // a field filter's field is absent or of the wrong type
  kFilteredByField,     // a field filter's test failed
  kInvalidUtf8,         // the text is not valid UTF-8 (JSONL input is checked before; other sources may not be)
  kTooShort,            // fewer than min_chars code points
  kTooLong,             // more than max_chars code points
  kTooFewWords,         // fewer than min_words words
  kExactDuplicate,      // same cleaned text as an earlier kept document
  kNearDuplicate,       // shares a MinHash band with an earlier kept document
};
const char* clean_reason_name(CleanReason r);

struct DocVerdict {
  CleanReason reason = CleanReason::kKept;
  int filter = -1;                  // the field filter (index into field_filters) for the two field reasons
  bool normalized_changed = false;  // normalization changed the text
  bool control_stripped = false;    // strip_control removed at least one character
  bool kept() const { return reason == CleanReason::kKept; }
};

// What the in-order stage needs of a document.
struct DocKeys {
  bool has_exact = false;       // exact_dedup is on
  uint64_t exact = 0;           // XXH3_64bits (seed 0) of the cleaned text
  std::vector<uint64_t> bands;  // near_dedup's band keys; empty when off or the simplified text has no word
};

// Counters, one per reason; documents == kept + every removal.
struct CleanStats {
  CleanOptions options;  // recorded in to_json()
  int64_t documents = 0;
  int64_t kept = 0;
  int64_t normalized_changed = 0;     // documents whose text normalization changed (kept or not)
  int64_t control_stripped_docs = 0;  // documents that had control characters stripped (kept or not)
  int64_t filter_field_missing = 0;
  std::vector<int64_t> filtered_by_field;  // per field filter, in options.field_filters order
  int64_t invalid_utf8 = 0;
  int64_t too_short = 0;
  int64_t too_long = 0;
  int64_t too_few_words = 0;
  int64_t exact_duplicates = 0;
  int64_t near_duplicates = 0;

  void add(const DocVerdict& v);  // one document's final verdict
  // Merges counters of the same options (LOOM_CHECK on the filter count).
  CleanStats& operator+=(const CleanStats& other);
  int64_t removed() const { return documents - kept; }
  // {"options": ..., "documents", "kept", "normalized_changed",
  //  "control_stripped_docs", "removed": {reason: count, "filtered_by_field":
  //  [{"filter": spec, "documents": n}, ...]}}
  nlohmann::json to_json() const;
};

// The per-document stage for validated options. Immutable: one Cleaner is
// shared by every worker thread (ICU's normalizer instances are thread-safe
// singletons; each call allocates its own scratch).
class Cleaner {
 public:
  // Errors: those of CleanOptions::validate().
  static Result<Cleaner> create(CleanOptions options);

  const CleanOptions& options() const { return options_; }
  const std::vector<FieldFilter>& filters() const { return filters_; }
  const MinHasher* minhasher() const { return minhasher_.get(); }
  // Stats for these options (filtered_by_field sized to the filters).
  CleanStats new_stats() const;

  // The field filters, in order, on a JSON record (the document's whole
  // object); the first that does not pass decides. kKept when there are none.
  DocVerdict check_fields(const nlohmann::json& record) const;
  // The same with values from elsewhere (a Parquet row): `evaluate` answers
  // for one filter, e.g. [&](const FieldFilter& f) { return f.evaluate(col(f.field())); }.
  DocVerdict check_fields(const std::function<FilterMatch(const FieldFilter&)>& evaluate) const;

  // Strips, normalizes (in that order: stripping a control character cannot
  // then leave the text unnormalized), applies the length and word filters and
  // computes the dedup keys of a kept text. *text is modified in place; *keys
  // is filled only when the verdict is kKept. Thread-safe.
  DocVerdict clean(std::string* text, DocKeys* keys) const;

 private:
  Cleaner() = default;
  CleanOptions options_;
  std::vector<FieldFilter> filters_;
  std::shared_ptr<const MinHasher> minhasher_;  // near_dedup only
};

// The pieces of clean(), for tests and other callers. Text must be valid UTF-8.
// Returns whether anything was removed.
bool strip_control_chars(std::string* text);
// Returns whether the text changed; unsupported without ICU.
Result<bool> normalize_text(Normalization form, std::string* text);
// Code points of valid UTF-8.
int64_t count_code_points(std::string_view text);
// Runs of non-whitespace (whitespace: Python's str.isspace()).
int64_t count_words(std::string_view text);

// A set of 64-bit keys in one flat open-addressing table (linear probing,
// power-of-two capacity, grown x2 past 3/4 full): 8 bytes a slot, 10.7 to
// 21.3 bytes a key depending on where the load sits (x1.5 while growing).
class U64Set {
 public:
  // True when `key` was absent (and is now present).
  bool insert(uint64_t key);
  bool contains(uint64_t key) const;
  size_t size() const { return size_ + (has_zero_ ? 1 : 0); }
  size_t memory_bytes() const { return slots_.size() * sizeof(uint64_t); }
  void reserve(size_t keys);

 private:
  void rehash(size_t capacity);
  std::vector<uint64_t> slots_;  // 0 = empty; key 0 is has_zero_
  int shift_ = 64;               // 64 - log2(capacity)
  size_t size_ = 0;
  bool has_zero_ = false;
};

// The in-order stage: remembers the keys of kept documents only. Not
// thread-safe (one writer thread). Memory: one U64Set entry (10.7-21.3 bytes)
// per kept document for exact dedup, `bands` entries (14 by default,
// 150-300 bytes) per kept document with near-dedup.
class DedupIndex {
 public:
  // True when an earlier kept document had this exact hash; inserts it otherwise.
  bool seen_exact(uint64_t hash);
  // True when any band key matches an earlier kept document's; inserts all
  // the keys otherwise. Empty keys (no word to shingle): false, nothing inserted.
  bool near_duplicate(const std::vector<uint64_t>& band_keys);
  // Both checks for one document whose per-document verdict was kKept: the
  // exact hash (when has_exact), then the band keys; inserts the document's
  // keys only when it is kept, so an index holds kept documents alone and the
  // first copy in input order is the one kept.
  CleanReason admit(const DocKeys& keys);

  // Room for `documents` kept documents without growing (exact: whether
  // exact dedup is on; bands: near-dedup's bands, 0 when off).
  void reserve(size_t documents, bool exact, int bands);
  size_t exact_entries() const { return exact_.size(); }
  size_t band_entries() const { return bands_.size(); }
  size_t memory_bytes() const { return exact_.memory_bytes() + bands_.memory_bytes(); }

 private:
  U64Set exact_;
  U64Set bands_;  // every band's keys together: the key is seeded by its band index
};

}  // namespace loom::data
