#include "exec/data/clean.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cctype>

#include "exec/data/jsonl_reader.h"
#include "exec/data/text_util.h"

#ifdef LOOM_HAVE_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#endif

namespace loom::data {

namespace {

Status needs_icu(const std::string& what) {
  return unsupported("clean: " + what +
                     " needs ICU, which this build of Loom lacks; install libicu-dev "
                     "(apt-get install libicu-dev, or scripts/setup.sh) and rebuild");
}

}  // namespace

const char* normalization_name(Normalization n) {
  switch (n) {
    case Normalization::kNone: return "none";
    case Normalization::kNfc: return "nfc";
    case Normalization::kNfkc: return "nfkc";
  }
  return "?";
}

Result<Normalization> parse_normalization(const std::string& text) {
  std::string t = text;
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "none") return Normalization::kNone;
  if (t == "nfc") return Normalization::kNfc;
  if (t == "nfkc") return Normalization::kNfkc;
  return invalid_argument("clean: normalization \"" + text + "\" is not one of none, nfc, nfkc");
}

const char* clean_reason_name(CleanReason r) {
  switch (r) {
    case CleanReason::kKept: return "kept";
    case CleanReason::kFilterFieldMissing: return "filter_field_missing";
    case CleanReason::kFilteredByField: return "filtered_by_field";
    case CleanReason::kInvalidUtf8: return "invalid_utf8";
    case CleanReason::kTooShort: return "too_short";
    case CleanReason::kTooLong: return "too_long";
    case CleanReason::kTooFewWords: return "too_few_words";
    case CleanReason::kExactDuplicate: return "exact_duplicates";
    case CleanReason::kNearDuplicate: return "near_duplicates";
  }
  return "?";
}

// --- options -----------------------------------------------------------------

Status CleanOptions::validate() const {
  if (min_chars < 0) return invalid_argument("clean: min_chars=" + std::to_string(min_chars) + " must be >= 0 (0 = no bound)");
  if (max_chars < 0) return invalid_argument("clean: max_chars=" + std::to_string(max_chars) + " must be >= 0 (0 = no bound)");
  if (min_words < 0) return invalid_argument("clean: min_words=" + std::to_string(min_words) + " must be >= 0 (0 = no bound)");
  if (max_chars > 0 && min_chars > max_chars)
    return invalid_argument("clean: min_chars=" + std::to_string(min_chars) + " is above max_chars=" +
                            std::to_string(max_chars) + ", which would drop every document; lower min_chars or raise "
                            "max_chars (0 = no bound)");
  for (const std::string& spec : field_filters) {
    auto f = FieldFilter::parse(spec);
    if (!f.is_ok()) return f.status().with_context("clean");
  }
  if (near_dedup) LOOM_RETURN_IF_ERROR(minhash.validate());
  if (!have_icu()) {
    if (normalization != Normalization::kNone)
      return needs_icu(std::string("normalization=") + normalization_name(normalization));
    if (near_dedup) return needs_icu("near-dedup (its text simplification: Unicode lowercase, NFD)");
  }
  return Status::ok();
}

bool CleanOptions::any() const {
  return normalization != Normalization::kNone || strip_control || min_chars > 0 || max_chars > 0 || min_words > 0 ||
         exact_dedup || near_dedup || !field_filters.empty();
}

nlohmann::json CleanOptions::to_json() const {
  nlohmann::json near = {{"enabled", near_dedup}};
  if (near_dedup) {
    near["ngram"] = minhash.ngram;
    near["bands"] = minhash.bands;
    near["rows"] = minhash.rows;
    near["seed"] = minhash.seed;
    near["threshold"] = minhash.threshold();
    near["shingle_hash"] = "xxh3_64";
    near["permutation"] = "(a*x+b) mod 2^61-1, a,b from mt19937_64(seed)";
  }
  return {{"normalization", normalization_name(normalization)},
          {"strip_control", strip_control},
          {"min_chars", min_chars},
          {"max_chars", max_chars},
          {"min_words", min_words},
          {"exact_dedup", {{"enabled", exact_dedup}, {"hash", "xxh3_64 of the cleaned text"}}},
          {"near_dedup", near},
          {"field_filters", field_filters}};
}

// --- stats -------------------------------------------------------------------

void CleanStats::add(const DocVerdict& v) {
  ++documents;
  normalized_changed += v.normalized_changed;
  control_stripped_docs += v.control_stripped;
  switch (v.reason) {
    case CleanReason::kKept: ++kept; break;
    case CleanReason::kFilterFieldMissing: ++filter_field_missing; break;
    case CleanReason::kFilteredByField:
      LOOM_CHECK(v.filter >= 0, "CleanStats::add: a filtered_by_field verdict without its filter");
      if (v.filter >= static_cast<int>(filtered_by_field.size())) filtered_by_field.resize(v.filter + 1);
      ++filtered_by_field[v.filter];
      break;
    case CleanReason::kInvalidUtf8: ++invalid_utf8; break;
    case CleanReason::kTooShort: ++too_short; break;
    case CleanReason::kTooLong: ++too_long; break;
    case CleanReason::kTooFewWords: ++too_few_words; break;
    case CleanReason::kExactDuplicate: ++exact_duplicates; break;
    case CleanReason::kNearDuplicate: ++near_duplicates; break;
  }
}

CleanStats& CleanStats::operator+=(const CleanStats& o) {
  LOOM_CHECK(filtered_by_field.size() == o.filtered_by_field.size() || o.filtered_by_field.empty() ||
                 filtered_by_field.empty(),
             "CleanStats::operator+=: stats of different field filters");
  if (filtered_by_field.size() < o.filtered_by_field.size()) filtered_by_field.resize(o.filtered_by_field.size());
  for (size_t i = 0; i < o.filtered_by_field.size(); ++i) filtered_by_field[i] += o.filtered_by_field[i];
  documents += o.documents;
  kept += o.kept;
  normalized_changed += o.normalized_changed;
  control_stripped_docs += o.control_stripped_docs;
  filter_field_missing += o.filter_field_missing;
  invalid_utf8 += o.invalid_utf8;
  too_short += o.too_short;
  too_long += o.too_long;
  too_few_words += o.too_few_words;
  exact_duplicates += o.exact_duplicates;
  near_duplicates += o.near_duplicates;
  return *this;
}

nlohmann::json CleanStats::to_json() const {
  nlohmann::json by_field = nlohmann::json::array();
  for (size_t i = 0; i < filtered_by_field.size(); ++i)
    by_field.push_back({{"filter", i < options.field_filters.size() ? options.field_filters[i] : "?"},
                        {"documents", filtered_by_field[i]}});
  return {{"options", options.to_json()},
          {"documents", documents},
          {"kept", kept},
          {"normalized_changed", normalized_changed},
          {"control_stripped_docs", control_stripped_docs},
          {"removed",
           {{"filter_field_missing", filter_field_missing},
            {"filtered_by_field", by_field},
            {"invalid_utf8", invalid_utf8},
            {"too_short", too_short},
            {"too_long", too_long},
            {"too_few_words", too_few_words},
            {"exact_duplicates", exact_duplicates},
            {"near_duplicates", near_duplicates}}}};
}

// --- text pieces -------------------------------------------------------------

bool strip_control_chars(std::string* text) {
  std::string& s = *text;
  const size_t n = s.size();
  auto* p = reinterpret_cast<unsigned char*>(s.data());
  // Length of the removable character at p[i], 0 when it is kept.
  auto removable = [&](size_t i) -> size_t {
    unsigned char c = p[i];
    if (c < 0x20) return (c == '\t' || c == '\n' || c == '\r') ? 0 : 1;
    if (c == 0x7F) return 1;
    if (c < 0x80) return 0;
    if (c == 0xC2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9F) return 2;  // U+0080..U+009F
    if (c == 0xEF && i + 2 < n) {
      if (p[i + 1] == 0xBB && p[i + 2] == 0xBF) return 3;                       // U+FEFF
      if (p[i + 1] == 0xBF && p[i + 2] >= 0xB9 && p[i + 2] <= 0xBC) return 3;   // U+FFF9..U+FFFC
    }
    if (c == 0xE2 && i + 2 < n && p[i + 1] == 0x81 && p[i + 2] >= 0xAA && p[i + 2] <= 0xAF) return 3;  // U+206A..U+206F
    return 0;
  };
  size_t i = 0;
  while (i < n && removable(i) == 0) ++i;
  if (i == n) return false;
  size_t out = i;
  while (i < n) {
    size_t len = removable(i);
    if (len) {
      i += len;
    } else {
      p[out++] = p[i++];
    }
  }
  s.resize(out);
  return true;
}

Result<bool> normalize_text(Normalization form, std::string* text) {
  if (form == Normalization::kNone) return false;
#ifdef LOOM_HAVE_ICU
  if (text::is_ascii(*text)) return false;  // ASCII is NFC and NFKC already
  UErrorCode ec = U_ZERO_ERROR;
  const icu::Normalizer2* n =
      form == Normalization::kNfc ? icu::Normalizer2::getNFCInstance(ec) : icu::Normalizer2::getNFKCInstance(ec);
  if (U_FAILURE(ec)) return internal_error(std::string("clean: ICU normalizer unavailable: ") + u_errorName(ec));
  icu::StringPiece sp(text->data(), static_cast<int32_t>(text->size()));
  if (n->isNormalizedUTF8(sp, ec) && U_SUCCESS(ec)) return false;
  ec = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text->size()));
  n->normalizeUTF8(0, sp, sink, nullptr, ec);
  if (U_FAILURE(ec)) return internal_error(std::string("clean: ICU normalization failed: ") + u_errorName(ec));
  bool changed = out != *text;
  text->swap(out);
  return changed;
#else
  return needs_icu(std::string("normalization=") + normalization_name(form));
#endif
}

int64_t count_code_points(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

int64_t count_words(std::string_view text) {
  int64_t words = 0;
  bool in_word = false;
  if (text::is_ascii(text)) {  // the common case, without decoding
    for (unsigned char b : text) {
      const bool space = b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F);
      words += !space && !in_word;
      in_word = !space;
    }
    return words;
  }
  for (size_t i = 0; i < text.size();) {
    unsigned char b = static_cast<unsigned char>(text[i]);
    char32_t c = b < 0x80 ? (++i, b) : text::next_code_point(text, &i);
    bool space = text::is_space(c);
    words += !space && !in_word;
    in_word = !space;
  }
  return words;
}

// --- per-document stage ------------------------------------------------------

Result<Cleaner> Cleaner::create(CleanOptions options) {
  LOOM_RETURN_IF_ERROR(options.validate());
  Cleaner c;
  for (const std::string& spec : options.field_filters) {
    LOOM_ASSIGN_OR_RETURN(FieldFilter f, FieldFilter::parse(spec));
    c.filters_.push_back(std::move(f));
  }
  if (options.near_dedup) c.minhasher_ = std::make_shared<const MinHasher>(options.minhash);
  c.options_ = std::move(options);
  return c;
}

CleanStats Cleaner::new_stats() const {
  CleanStats s;
  s.options = options_;
  s.filtered_by_field.assign(filters_.size(), 0);
  return s;
}

DocVerdict Cleaner::check_fields(const std::function<FilterMatch(const FieldFilter&)>& evaluate) const {
  DocVerdict v;
  for (size_t i = 0; i < filters_.size(); ++i) {
    FilterMatch m = evaluate(filters_[i]);
    if (m == FilterMatch::kPass) continue;
    v.reason = m == FilterMatch::kMissing ? CleanReason::kFilterFieldMissing : CleanReason::kFilteredByField;
    v.filter = static_cast<int>(i);
    return v;
  }
  return v;
}

DocVerdict Cleaner::check_fields(const nlohmann::json& record) const {
  return check_fields([&](const FieldFilter& f) { return f.evaluate_record(record); });
}

DocVerdict Cleaner::clean(std::string* text, DocKeys* keys) const {
  DocVerdict v;
  const CleanOptions& o = options_;
  // ASCII stays ASCII through stripping, and NFC/NFKC leave it as it is: one
  // check spares the normalizer and the code-point count.
  const bool ascii = text::is_ascii(*text);
  if (!ascii && !is_valid_utf8(*text)) {
    v.reason = CleanReason::kInvalidUtf8;
    return v;
  }
  if (o.strip_control) v.control_stripped = strip_control_chars(text);
  if (o.normalization != Normalization::kNone && !ascii) {
    auto changed = normalize_text(o.normalization, text);
    v.normalized_changed = changed.is_ok() && *changed;  // create() made sure ICU is there
  }
  if (o.min_chars > 0 || o.max_chars > 0) {
    int64_t n = ascii ? static_cast<int64_t>(text->size()) : count_code_points(*text);
    if (o.min_chars > 0 && n < o.min_chars) {
      v.reason = CleanReason::kTooShort;
      return v;
    }
    if (o.max_chars > 0 && n > o.max_chars) {
      v.reason = CleanReason::kTooLong;
      return v;
    }
  }
  if (o.min_words > 0 && count_words(*text) < o.min_words) {
    v.reason = CleanReason::kTooFewWords;
    return v;
  }
  keys->has_exact = o.exact_dedup;
  keys->exact = o.exact_dedup ? XXH3_64bits(text->data(), text->size()) : 0;
  keys->bands.clear();
  if (minhasher_) keys->bands = minhasher_->band_keys(minhasher_->signature(*text));
  return v;
}

// --- in-order stage ----------------------------------------------------------

namespace {
constexpr uint64_t kFibonacci = 0x9E3779B97F4A7C15ULL;
// Fibonacci hashing: the top log2(capacity) bits of key * 2^64/phi.
inline size_t slot_of(uint64_t key, int shift) { return static_cast<size_t>((key * kFibonacci) >> shift); }
}  // namespace

void U64Set::rehash(size_t capacity) {
  std::vector<uint64_t> old;
  old.swap(slots_);
  slots_.assign(capacity, 0);
  shift_ = 64 - std::countr_zero(capacity);
  const size_t mask = capacity - 1;
  for (uint64_t k : old) {
    if (k == 0) continue;
    size_t i = slot_of(k, shift_);
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = k;
  }
}

void U64Set::reserve(size_t keys) {
  size_t cap = slots_.empty() ? 16 : slots_.size();
  while (keys * 4 > cap * 3) cap *= 2;
  if (cap != slots_.size()) rehash(cap);
}

bool U64Set::contains(uint64_t key) const {
  if (key == 0) return has_zero_;
  if (slots_.empty()) return false;
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key, shift_);; i = (i + 1) & mask) {
    if (slots_[i] == key) return true;
    if (slots_[i] == 0) return false;
  }
}

bool U64Set::insert(uint64_t key) {
  if (key == 0) {
    bool added = !has_zero_;
    has_zero_ = true;
    return added;
  }
  if (slots_.empty() || (size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.empty() ? 16 : slots_.size() * 2);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key, shift_);; i = (i + 1) & mask) {
    if (slots_[i] == key) return false;
    if (slots_[i] == 0) {
      slots_[i] = key;
      ++size_;
      return true;
    }
  }
}

bool DedupIndex::seen_exact(uint64_t hash) { return !exact_.insert(hash); }

bool DedupIndex::near_duplicate(const std::vector<uint64_t>& band_keys) {
  for (uint64_t k : band_keys)
    if (bands_.contains(k)) return true;
  for (uint64_t k : band_keys) bands_.insert(k);
  return false;
}

CleanReason DedupIndex::admit(const DocKeys& keys) {
  if (keys.has_exact && exact_.contains(keys.exact)) return CleanReason::kExactDuplicate;
  for (uint64_t k : keys.bands)
    if (bands_.contains(k)) return CleanReason::kNearDuplicate;
  if (keys.has_exact) exact_.insert(keys.exact);
  for (uint64_t k : keys.bands) bands_.insert(k);
  return CleanReason::kKept;
}

void DedupIndex::reserve(size_t documents, bool exact, int bands) {
  if (exact) exact_.reserve(documents);
  if (bands > 0) bands_.reserve(documents * static_cast<size_t>(bands));
}

}  // namespace loom::data
