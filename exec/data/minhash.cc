#include "exec/data/minhash.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "exec/data/text_util.h"

#ifdef LOOM_HAVE_ICU
#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#endif

namespace loom::data {

namespace {

constexpr uint64_t kMersenne61 = (uint64_t{1} << 61) - 1;

// x mod (2^61 - 1) for x < 2^64.
inline uint64_t reduce61(uint64_t x) {
  uint64_t r = (x & kMersenne61) + (x >> 61);
  return r >= kMersenne61 ? r - kMersenne61 : r;
}

// (a*x + b) mod (2^61 - 1) for a, x, b < 2^61: exact in 128 bits.
inline uint64_t mul_add_mod61(uint64_t a, uint64_t x, uint64_t b) {
  unsigned __int128 v = static_cast<unsigned __int128>(a) * x + b;  // < 2^122 + 2^61
  uint64_t s = (static_cast<uint64_t>(v) & kMersenne61) + static_cast<uint64_t>(v >> 61);  // < 2^62 + 1
  uint64_t r = (s & kMersenne61) + (s >> 61);
  return r >= kMersenne61 ? r - kMersenne61 : r;
}

// datatrove's PUNCTUATION beyond ASCII punctuation and control characters, sorted.
constexpr char32_t kWidePunctuation[] = {
    0x00AB, 0x00B4, 0x00BB, 0x2013, 0x2014, 0x2019, 0x201C, 0x201D, 0x201E, 0x2026, 0x2236, 0x2501,
    0x25BA, 0x3001, 0x3002, 0x3008, 0x3009, 0x300A, 0x300B, 0x300C, 0x300D, 0x3010, 0x3011, 0xFF01,
    0xFF05, 0xFF08, 0xFF09, 0xFF0C, 0xFF0E, 0xFF11, 0xFF1A, 0xFF1B, 0xFF1F, 0xFF5E};

// Whitespace is tested first (is_space), so the controls that are also
// whitespace (\t \n \v \f \r, U+001C..U+001F, U+0085) never reach this.
inline bool is_punctuation(char32_t c) {
  if (c < 0x80) return c < 0x20 || c == 0x7F || (c > 0x20 && c < 0x30) || (c >= 0x3A && c <= 0x40) ||
                       (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  if (c < 0xA0) return true;  // C1 controls
  return std::binary_search(std::begin(kWidePunctuation), std::end(kWidePunctuation), c);
}

// Lowercase (full case mapping, root locale, as Python's str.lower()).
std::string to_lower(std::string_view text) {
  std::string out;
  if (!text::is_ascii(text)) {
#ifdef LOOM_HAVE_ICU
    UErrorCode ec = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink,
                              nullptr, ec);
    if (U_SUCCESS(ec)) return out;
    out.clear();
#endif
  }
  out.assign(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}


// ASCII text in one pass: the same steps, none of which needs ICU there.
std::string simplify_ascii(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false, in_digits = false;
  for (char ch : text) {
    char32_t c = static_cast<unsigned char>(ch);
    if (text::is_space(c)) {
      pending_space = !out.empty();
      in_digits = false;  // a digit run ends at whitespace, not at removed punctuation
      continue;
    }
    if (is_punctuation(c)) continue;
    bool digit = c >= '0' && c <= '9';
    if (digit && in_digits) continue;
    if (pending_space) out.push_back(' ');
    pending_space = false;
    in_digits = digit;
    out.push_back(digit ? '0' : (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : ch);
  }
  return out;
}

}  // namespace

bool have_icu() {
#ifdef LOOM_HAVE_ICU
  return true;
#else
  return false;
#endif
}

double MinHashOptions::threshold() const { return std::pow(1.0 / bands, 1.0 / rows); }

double MinHashOptions::match_probability(double s) const {
  return 1.0 - std::pow(1.0 - std::pow(s, rows), bands);
}

Status MinHashOptions::validate() const {
  if (ngram < 1 || ngram > 64)
    return invalid_argument("near-dedup: ngram=" + std::to_string(ngram) +
                            " must be in 1..64 words per shingle (datatrove's default is 5)");
  if (bands < 1 || rows < 1)
    return invalid_argument("near-dedup: bands=" + std::to_string(bands) + " rows=" + std::to_string(rows) +
                            ": bands and rows must be >= 1 (bands*rows > 0 hashes; defaults 14 and 8)");
  if (static_cast<int64_t>(bands) * rows > 4096)
    return invalid_argument("near-dedup: bands*rows=" + std::to_string(static_cast<int64_t>(bands) * rows) +
                            " hashes per document is above 4096; use fewer bands or rows (defaults 14 x 8 = 112)");
  return Status::ok();
}

std::string simplify_text(std::string_view text) {
  if (text::is_ascii(text)) return simplify_ascii(text);
  std::string lowered = to_lower(text);
  // Whitespace collapsed and punctuation removed, in that order (as
  // datatrove): words come out separated by one space.
  std::string words;
  words.reserve(lowered.size());
  bool pending_space = false;
  for (size_t i = 0; i < lowered.size();) {
    size_t start = i;
    char32_t c = text::next_code_point(lowered, &i);
    if (text::is_space(c)) {
      pending_space = !words.empty();
      continue;
    }
    if (is_punctuation(c)) continue;
    if (pending_space) words.push_back(' ');
    pending_space = false;
    words.append(lowered, start, i - start);
  }
  // NFD, combining marks dropped, digit runs -> "0"; words re-joined since a
  // word of marks alone disappears.
  std::string decomposed;
  std::string_view src = words;
#ifdef LOOM_HAVE_ICU
  if (!text::is_ascii(words)) {
    UErrorCode ec = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(ec);
    if (U_SUCCESS(ec)) {
      icu::StringByteSink<std::string> sink(&decomposed, static_cast<int32_t>(words.size()));
      nfd->normalizeUTF8(0, icu::StringPiece(words.data(), static_cast<int32_t>(words.size())), sink, nullptr, ec);
      if (U_SUCCESS(ec)) src = decomposed;
    }
  }
#endif
  std::string out;
  out.reserve(src.size());
  pending_space = false;
  bool in_digits = false;
  for (size_t i = 0; i < src.size();) {
    size_t start = i;
    char32_t c = text::next_code_point(src, &i);
    if (c == ' ') {
      pending_space = !out.empty();
      in_digits = false;
      continue;
    }
    bool digit = c >= '0' && c <= '9';
#ifdef LOOM_HAVE_ICU
    if (c >= 0x80) {
      int8_t type = u_charType(static_cast<UChar32>(c));
      if (type == U_NON_SPACING_MARK) continue;
      digit = type == U_DECIMAL_DIGIT_NUMBER;
    }
#endif
    if (digit && in_digits) continue;
    if (pending_space) out.push_back(' ');
    pending_space = false;
    in_digits = digit;
    if (digit) out.push_back('0');
    else out.append(src, start, i - start);
  }
  return out;
}

MinHasher::MinHasher(const MinHashOptions& options) : options_(options) {
  int k = options.permutations();
  std::mt19937_64 gen(options.seed);
  a_.resize(k);
  b_.resize(k);
  for (int i = 0; i < k; ++i) a_[i] = 1 + gen() % (kMersenne61 - 1);
  for (int i = 0; i < k; ++i) b_[i] = gen() % kMersenne61;
}

void MinHasher::shingle_hashes(std::string_view s, std::vector<uint64_t>* out) const {
  out->clear();
  if (s.empty()) return;
  // Word starts; words are separated by exactly one space.
  std::vector<uint32_t> starts;
  starts.push_back(0);
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == ' ') starts.push_back(static_cast<uint32_t>(i + 1));
  size_t words = starts.size(), n = static_cast<size_t>(options_.ngram);
  if (words < n) {
    out->push_back(XXH3_64bits(s.data(), s.size()));
    return;
  }
  out->reserve(words - n + 1);
  for (size_t w = 0; w + n <= words; ++w) {
    size_t begin = starts[w];
    size_t end = w + n < words ? starts[w + n] - 1 : s.size();
    out->push_back(XXH3_64bits(s.data() + begin, end - begin));
  }
}

std::vector<uint64_t> MinHasher::shingles(std::string_view text) const {
  std::vector<uint64_t> out;
  shingle_hashes(simplify_text(text), &out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint64_t> MinHasher::signature(std::string_view text) const {
  std::vector<uint64_t> sh;
  shingle_hashes(simplify_text(text), &sh);
  return signature_of(sh);
}

std::vector<uint64_t> MinHasher::signature_of(const std::vector<uint64_t>& shingles) const {
  if (shingles.empty()) return {};
  std::vector<uint64_t> xs(shingles.size());
  for (size_t i = 0; i < shingles.size(); ++i) xs[i] = reduce61(shingles[i]);
  std::vector<uint64_t> sig(a_.size());
  size_t k = 0;
  // Four permutations per pass over the shingles: four independent chains
  // keep the multiplier busy (about 2x the one-at-a-time loop).
  for (; k + 4 <= a_.size(); k += 4) {
    const uint64_t a0 = a_[k], a1 = a_[k + 1], a2 = a_[k + 2], a3 = a_[k + 3];
    const uint64_t b0 = b_[k], b1 = b_[k + 1], b2 = b_[k + 2], b3 = b_[k + 3];
    uint64_t m0 = kMersenne61, m1 = kMersenne61, m2 = kMersenne61, m3 = kMersenne61;
    for (uint64_t x : xs) {
      m0 = std::min(m0, mul_add_mod61(a0, x, b0));
      m1 = std::min(m1, mul_add_mod61(a1, x, b1));
      m2 = std::min(m2, mul_add_mod61(a2, x, b2));
      m3 = std::min(m3, mul_add_mod61(a3, x, b3));
    }
    sig[k] = m0, sig[k + 1] = m1, sig[k + 2] = m2, sig[k + 3] = m3;
  }
  for (; k < a_.size(); ++k) {
    uint64_t m = kMersenne61;
    for (uint64_t x : xs) m = std::min(m, mul_add_mod61(a_[k], x, b_[k]));
    sig[k] = m;
  }
  return sig;
}

std::vector<uint64_t> MinHasher::band_keys(const std::vector<uint64_t>& sig) const {
  std::vector<uint64_t> keys;
  if (sig.size() != a_.size()) return keys;
  keys.resize(options_.bands);
  size_t r = static_cast<size_t>(options_.rows);
  for (size_t j = 0; j < keys.size(); ++j)
    keys[j] = XXH3_64bits_withSeed(sig.data() + j * r, r * sizeof(uint64_t), j);
  return keys;
}

double estimate_jaccard(const std::vector<uint64_t>& sig1, const std::vector<uint64_t>& sig2) {
  if (sig1.empty() || sig1.size() != sig2.size()) return 0;
  size_t eq = 0;
  for (size_t i = 0; i < sig1.size(); ++i) eq += sig1[i] == sig2[i];
  return static_cast<double>(eq) / static_cast<double>(sig1.size());
}

double jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.empty() && b.empty()) return 0;
  size_t i = 0, j = 0, inter = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) ++i;
    else if (b[j] < a[i]) ++j;
    else ++inter, ++i, ++j;
  }
  return static_cast<double>(inter) / static_cast<double>(a.size() + b.size() - inter);
}

}  // namespace loom::data
