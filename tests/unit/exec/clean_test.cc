// Text cleaning (exec/data/clean.h): normalization, control stripping, the
// length/word/field filters, exact and MinHash-LSH dedup, and a generated
// corpus whose planted duplicates and junk must come out counted exactly.
#include "exec/data/clean.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "tests/support/planted_corpus.h"

namespace loom::data {
namespace {

using nlohmann::json;
using namespace loom::data::testing;  // NOLINT: the planted corpus

Cleaner make_cleaner(CleanOptions o) {
  auto c = Cleaner::create(std::move(o));
  if (!c.is_ok()) {
    ADD_FAILURE() << c.status().to_string();
    std::abort();
  }
  return std::move(c).value();
}

// clean() of one text; returns the verdict, leaves the cleaned text in *text.
DocVerdict clean_one(const Cleaner& c, std::string* text) {
  DocKeys keys;
  return c.clean(text, &keys);
}

// --- normalization -----------------------------------------------------------

TEST(CleanNormalize, NfcAndNfkcOnKnownStrings) {
  if (!have_icu()) GTEST_SKIP() << "built without ICU";
  struct Case {
    const char* in;
    const char* nfc;
    const char* nfkc;
  };
  const Case cases[] = {
      {"cafe\u0301", "caf\u00e9", "caf\u00e9"},                       // e + combining acute -> é
      {"caf\u00e9", "caf\u00e9", "caf\u00e9"},                        // already composed
      {"\ufb01ne", "\ufb01ne", "fine"},                               // ﬁ ligature: compatibility only
      {"\uff11\uff12\uff13", "\uff11\uff12\uff13", "123"},            // full-width digits
      {"x\u00b2", "x\u00b2", "x2"},                                   // superscript two
      {"\u212b", "\u00c5", "\u00c5"},                                 // ANGSTROM SIGN -> Å (canonical)
      {"\u1100\u1161", "\uac00", "\uac00"},                           // Hangul jamo compose
      {"plain ascii", "plain ascii", "plain ascii"},
  };
  for (const Case& c : cases) {
    std::string a = c.in, b = c.in;
    auto ca = normalize_text(Normalization::kNfc, &a);
    auto cb = normalize_text(Normalization::kNfkc, &b);
    ASSERT_TRUE(ca.is_ok() && cb.is_ok());
    EXPECT_EQ(a, c.nfc) << c.in;
    EXPECT_EQ(b, c.nfkc) << c.in;
    EXPECT_EQ(*ca, a != c.in) << c.in;
    EXPECT_EQ(*cb, b != c.in) << c.in;
  }
  CleanOptions o;
  o.normalization = Normalization::kNfkc;
  Cleaner cl = make_cleaner(o);
  std::string t = "\ufb01le \uff11";
  DocVerdict v = clean_one(cl, &t);
  EXPECT_TRUE(v.kept());
  EXPECT_TRUE(v.normalized_changed);
  EXPECT_EQ(t, "file 1");
  t = "file 1";
  EXPECT_FALSE(clean_one(cl, &t).normalized_changed);
}

TEST(CleanNormalize, WithoutIcuRefusedWithTheFix) {
  for (Normalization n : {Normalization::kNfc, Normalization::kNfkc}) {
    CleanOptions o;
    o.normalization = n;
    Status s = o.validate();
    if (have_icu()) {
      EXPECT_TRUE(s.is_ok()) << s.to_string();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kUnsupported);
      EXPECT_NE(s.message().find("libicu-dev"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(normalization_name(n)), std::string::npos) << s.message();
    }
  }
  CleanOptions o;
  o.near_dedup = true;
  Status s = o.validate();
  if (have_icu()) EXPECT_TRUE(s.is_ok());
  else EXPECT_NE(s.message().find("libicu-dev"), std::string::npos) << s.message();
  EXPECT_EQ(*parse_normalization("NFKC"), Normalization::kNfkc);
  EXPECT_EQ(parse_normalization("nfd").status().code(), StatusCode::kInvalidArgument);
}

// --- control characters ------------------------------------------------------

TEST(CleanStrip, RemovesControlsKeepsTabNewlineReturnAndJoiners) {
  std::string t = std::string("a\x01") + "b\tc\nd\re\x7f" + "f\u0085g\u009fh\ufeffi\u200bj\u200dk\u00adl\u2028m\f" +
                  "n\v" + "o\u206ap\ufffcq\u200fr" + std::string("\0s", 2);
  EXPECT_TRUE(strip_control_chars(&t));
  EXPECT_EQ(t, "ab\tc\nd\refghi\u200bj\u200dk\u00adl\u2028mnopq\u200frs");
  std::string clean = "nothing to strip: \u00e9\u200b\t\n";
  std::string copy = clean;
  EXPECT_FALSE(strip_control_chars(&copy));
  EXPECT_EQ(copy, clean);
  std::string only = "\x01\x02\x1b\x7f";
  EXPECT_TRUE(strip_control_chars(&only));
  EXPECT_EQ(only, "");

  CleanOptions o;
  o.strip_control = true;
  o.min_chars = 1;
  Cleaner c = make_cleaner(o);
  std::string doc = "\x01\x02\x03";
  DocVerdict v = clean_one(c, &doc);
  EXPECT_EQ(v.reason, CleanReason::kTooShort);  // control-only: empty once stripped
  EXPECT_TRUE(v.control_stripped);
}

// --- length and word filters -------------------------------------------------

TEST(CleanFilters, LengthBoundariesInCodePoints) {
  CleanOptions o;
  o.min_chars = 5;
  o.max_chars = 7;
  Cleaner c = make_cleaner(o);
  auto reason = [&](std::string t) { return clean_one(c, &t).reason; };
  EXPECT_EQ(reason("abcde"), CleanReason::kKept);          // exactly min
  EXPECT_EQ(reason("abcd"), CleanReason::kTooShort);       // min - 1
  EXPECT_EQ(reason("\u00e9\u00e9\u00e9\u00e9\u00e9"), CleanReason::kKept);  // 5 code points, 10 bytes
  EXPECT_EQ(reason("\u00e9\u00e9\u00e9\u00e9"), CleanReason::kTooShort);
  EXPECT_EQ(reason("abcdefg"), CleanReason::kKept);        // exactly max
  EXPECT_EQ(reason("abcdefgh"), CleanReason::kTooLong);    // max + 1
  EXPECT_EQ(reason("\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"), CleanReason::kKept);  // 14 bytes, 7 code points

  CleanOptions w;
  w.min_words = 3;
  Cleaner cw = make_cleaner(w);
  auto wreason = [&](std::string t) { return clean_one(cw, &t).reason; };
  EXPECT_EQ(wreason("one two three"), CleanReason::kKept);  // exactly min
  EXPECT_EQ(wreason("one two"), CleanReason::kTooFewWords);  // min - 1
  EXPECT_EQ(wreason("  one\u3000two\tthree\n"), CleanReason::kKept);  // Unicode whitespace separates
  EXPECT_EQ(wreason("one-two three"), CleanReason::kTooFewWords);
  EXPECT_EQ(wreason(""), CleanReason::kTooFewWords);
  EXPECT_EQ(count_words("a\u00a0b\u200bc"), 2);  // NBSP separates, zero-width space does not

  // Counted after normalization: e + U+0301 twice is 4 code points raw, 2 in NFC.
  if (have_icu()) {
    CleanOptions n;
    n.min_chars = 3;
    std::string raw = "e\u0301e\u0301";
    std::string t = raw;
    EXPECT_EQ(clean_one(make_cleaner(n), &t).reason, CleanReason::kKept);
    n.normalization = Normalization::kNfc;
    t = raw;
    EXPECT_EQ(clean_one(make_cleaner(n), &t).reason, CleanReason::kTooShort);
  }
  // The first failing check counts: too short before too few words.
  CleanOptions both;
  both.min_chars = 10;
  both.min_words = 3;
  std::string t = "ab";
  EXPECT_EQ(clean_one(make_cleaner(both), &t).reason, CleanReason::kTooShort);
  // Invalid UTF-8 is refused, not mangled.
  std::string bad = "ok \xff\xfe";
  EXPECT_EQ(clean_one(make_cleaner(both), &bad).reason, CleanReason::kInvalidUtf8);
}

// --- field filters -----------------------------------------------------------

TEST(FieldFilterTest, ParsesAndRefusesBadSpecs) {
  auto f = FieldFilter::parse("quality>=0.5");
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->field(), "quality");
  EXPECT_EQ(f->op(), FilterOp::kGe);
  EXPECT_EQ(FieldFilter::parse("lang==en")->op(), FilterOp::kEq);
  EXPECT_EQ(FieldFilter::parse("score<3")->op(), FilterOp::kLt);
  EXPECT_EQ(FieldFilter::parse("flag!=spam")->op(), FilterOp::kNe);
  for (const char* bad : {"lang", "=en", "lang=", "lang=en,,fr", "q>=abc", "q>", "q>=nan", "q<=inf", "a..b=1",
                          "la ng=en", ".a=1", "lang=en, "}) {
    auto r = FieldFilter::parse(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\""), std::string::npos) << r.status().message();
  }
}

FilterMatch on(const std::string& spec, const json& record) {
  auto f = FieldFilter::parse(spec);
  EXPECT_TRUE(f.is_ok()) << spec;
  return f->evaluate_record(record);
}

TEST(FieldFilterTest, EveryOperatorMissingAndWrongType) {
  const auto P = FilterMatch::kPass, F = FilterMatch::kFail, M = FilterMatch::kMissing;
  EXPECT_EQ(on("lang=en", {{"lang", "en"}}), P);
  EXPECT_EQ(on("lang=en", {{"lang", "de"}}), F);
  EXPECT_EQ(on("lang=en", {{"lang", "EN"}}), F);  // exact, case-sensitive
  EXPECT_EQ(on("lang=en", json::object()), M);
  EXPECT_EQ(on("lang=en", {{"lang", 5}}), M);  // no numeric value in the list
  EXPECT_EQ(on("lang=en", {{"lang", nullptr}}), M);
  EXPECT_EQ(on("lang=en", {{"lang", json::array({"en"})}}), M);
  EXPECT_EQ(on("lang=en,fr", {{"lang", "fr"}}), P);
  EXPECT_EQ(on("lang=en, fr", {{"lang", "fr"}}), P);  // values trimmed
  EXPECT_EQ(on("lang=en,fr", {{"lang", "de"}}), F);

  EXPECT_EQ(on("quality>=0.5", {{"quality", 0.5}}), P);  // boundary
  EXPECT_EQ(on("quality>=0.5", {{"quality", 0.49}}), F);
  EXPECT_EQ(on("quality>=0.5", {{"quality", 1}}), P);  // integers compare as doubles
  EXPECT_EQ(on("quality>=0.5", {{"quality", "0.7"}}), M);  // a string is the wrong type
  EXPECT_EQ(on("quality>=0.5", {{"quality", true}}), M);
  EXPECT_EQ(on("quality>=0.5", json::object()), M);
  EXPECT_EQ(on("quality>0.5", {{"quality", 0.5}}), F);
  EXPECT_EQ(on("quality>0.5", {{"quality", 0.51}}), P);
  EXPECT_EQ(on("score<=3", {{"score", 3}}), P);
  EXPECT_EQ(on("score<=3", {{"score", 3.0001}}), F);
  EXPECT_EQ(on("score<3", {{"score", 3}}), F);
  EXPECT_EQ(on("score<3", {{"score", -1}}), P);
  EXPECT_EQ(on("score<3", {{"score", 18446744073709551615ULL}}), F);

  EXPECT_EQ(on("flag!=spam", {{"flag", "ham"}}), P);
  EXPECT_EQ(on("flag!=spam", {{"flag", "spam"}}), F);
  EXPECT_EQ(on("flag!=spam", json::object()), M);  // missing filters out for != too
  EXPECT_EQ(on("flag!=spam,ads", {{"flag", "ads"}}), F);

  EXPECT_EQ(on("score=3", {{"score", 3}}), P);
  EXPECT_EQ(on("score=3", {{"score", 3.0}}), P);
  EXPECT_EQ(on("score=3", {{"score", 4}}), F);
  EXPECT_EQ(on("score=3", {{"score", "3"}}), P);  // a string compares as a string
  EXPECT_EQ(on("keep=true", {{"keep", true}}), P);
  EXPECT_EQ(on("keep=true", {{"keep", false}}), F);
  EXPECT_EQ(on("keep!=false", {{"keep", true}}), P);

  EXPECT_EQ(on("metadata.language=en", {{"metadata", {{"language", "en"}}}}), P);
  EXPECT_EQ(on("metadata.language_score>=0.65", {{"metadata", {{"language_score", 0.6}}}}), F);
  EXPECT_EQ(on("metadata.language=en", {{"metadata", "en"}}), M);
  EXPECT_EQ(on("metadata.language=en", {{"metadata.language", "en"}}), M);  // a dotted key is not reachable

  // Typed values (a Parquet column).
  auto lang = *FieldFilter::parse("lang=en,fr");
  EXPECT_EQ(lang.evaluate(std::optional<std::string>("fr")), P);
  EXPECT_EQ(lang.evaluate(std::optional<std::string>("de")), F);
  EXPECT_EQ(lang.evaluate(std::optional<std::string>()), M);
  EXPECT_EQ(lang.evaluate(std::optional<double>(1.0)), M);
  auto q = *FieldFilter::parse("quality>=0.5");
  EXPECT_EQ(q.evaluate(std::optional<double>(0.5)), P);
  EXPECT_EQ(q.evaluate(std::optional<double>(0.4999)), F);
  EXPECT_EQ(q.evaluate(std::optional<double>()), M);
  EXPECT_EQ(q.evaluate(std::optional<double>(std::nan(""))), M);
  EXPECT_EQ(q.evaluate(std::optional<std::string>("0.9")), M);
}

TEST(FieldFilterTest, CleanerChecksInOrderAndCounts) {
  CleanOptions o;
  o.field_filters = {"lang=en", "quality>=0.5"};
  Cleaner c = make_cleaner(o);
  CleanStats stats = c.new_stats();
  const json records[] = {
      {{"lang", "de"}, {"quality", 0.9}},  // filter 0 fails
      {{"lang", "en"}},                    // filter 1's field missing
      {{"lang", "en"}, {"quality", 0.2}},  // filter 1 fails
      {{"lang", "en"}, {"quality", 0.7}},  // kept
      {{"quality", 0.1}},                  // filter 0's field missing (first filter decides)
  };
  const CleanReason want[] = {CleanReason::kFilteredByField, CleanReason::kFilterFieldMissing,
                              CleanReason::kFilteredByField, CleanReason::kKept, CleanReason::kFilterFieldMissing};
  const int want_filter[] = {0, 1, 1, -1, 0};
  for (int i = 0; i < 5; ++i) {
    DocVerdict v = c.check_fields(records[i]);
    EXPECT_EQ(v.reason, want[i]) << i;
    EXPECT_EQ(v.filter, want_filter[i]) << i;
    stats.add(v);
  }
  EXPECT_EQ(stats.filtered_by_field, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(stats.filter_field_missing, 2);
  EXPECT_EQ(stats.kept, 1);
  json j = stats.to_json();
  EXPECT_EQ(j["removed"]["filtered_by_field"][1]["filter"], "quality>=0.5");
  EXPECT_EQ(j["removed"]["filtered_by_field"][1]["documents"], 1);

  // The same through the typed overloads (a Parquet row without JSON).
  DocVerdict v = c.check_fields([](const FieldFilter& f) {
    if (f.field() == "lang") return f.evaluate(std::optional<std::string>("en"));
    return f.evaluate(std::optional<double>(0.3));
  });
  EXPECT_EQ(v.reason, CleanReason::kFilteredByField);
  EXPECT_EQ(v.filter, 1);
}

// --- options -----------------------------------------------------------------

TEST(CleanOptionsTest, ValidationNamesTheOptionAndTheFix) {
  auto expect_bad = [](CleanOptions o, const std::string& needle) {
    Status s = o.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_FALSE(Cleaner::create(o).is_ok());
  };
  CleanOptions o;
  o.min_chars = 500;
  o.max_chars = 100;
  expect_bad(o, "min_chars=500 is above max_chars=100");
  o = {};
  o.min_chars = -1;
  expect_bad(o, "min_chars=-1");
  o = {};
  o.max_chars = -5;
  expect_bad(o, "max_chars=-5");
  o = {};
  o.min_words = -2;
  expect_bad(o, "min_words=-2");
  o = {};
  o.field_filters = {"lang=en", "quality>=high"};
  expect_bad(o, "quality>=high");
  if (have_icu()) {
    o = {};
    o.near_dedup = true;
    o.minhash.bands = 0;
    expect_bad(o, "bands*rows > 0");
    o.minhash.bands = 14;
    o.minhash.rows = -1;
    expect_bad(o, "rows=-1");
    o.minhash.rows = 8;
    o.minhash.ngram = 0;
    expect_bad(o, "ngram=0");
    o.minhash.ngram = 5;
    o.minhash.bands = 1000;
    expect_bad(o, "bands*rows=8000");
  }
  // min_chars above max_chars = 0 (no bound) is fine; equal bounds are fine.
  o = {};
  o.min_chars = 500;
  EXPECT_TRUE(o.validate().is_ok());
  o.max_chars = 500;
  EXPECT_TRUE(o.validate().is_ok());
  EXPECT_FALSE(CleanOptions{}.any());
  EXPECT_TRUE(o.any());

  CleanOptions d;
  d.near_dedup = true;
  EXPECT_EQ(d.minhash.ngram, 5);
  EXPECT_EQ(d.minhash.bands, 14);
  EXPECT_EQ(d.minhash.rows, 8);
  EXPECT_NEAR(d.minhash.threshold(), 0.7190, 1e-4);  // (1/14)^(1/8), datatrove's comment says ~0.72
  EXPECT_NEAR(d.minhash.match_probability(0.8), 0.924, 1e-3);  // datatrove: 1-(1-0.8^8)^14 = 0.924
  json j = d.to_json();
  EXPECT_EQ(j["near_dedup"]["bands"], 14);
  EXPECT_NEAR(j["near_dedup"]["threshold"].get<double>(), 0.7190, 1e-4);
  EXPECT_EQ(j["normalization"], "none");
}

// --- exact dedup -------------------------------------------------------------

TEST(CleanDedup, ExactKeepsTheFirstCopy) {
  CleanOptions o;
  o.exact_dedup = true;
  Cleaner c = make_cleaner(o);
  DedupIndex index;
  const char* docs[] = {"alpha", "beta", "alpha", "gamma", "beta", "alpha", "alpha "};
  const CleanReason want[] = {CleanReason::kKept,           CleanReason::kKept, CleanReason::kExactDuplicate,
                              CleanReason::kKept,           CleanReason::kExactDuplicate,
                              CleanReason::kExactDuplicate, CleanReason::kKept};
  CleanStats stats = c.new_stats();
  for (int i = 0; i < 7; ++i) {
    std::string t = docs[i];
    DocKeys keys;
    DocVerdict v = c.clean(&t, &keys);
    ASSERT_TRUE(v.kept());
    EXPECT_TRUE(keys.has_exact);
    EXPECT_TRUE(keys.bands.empty());
    v.reason = index.admit(keys);
    EXPECT_EQ(v.reason, want[i]) << i;
    stats.add(v);
  }
  EXPECT_EQ(stats.exact_duplicates, 3);
  EXPECT_EQ(stats.kept, 4);
  EXPECT_EQ(index.exact_entries(), 4u);

  // The primitives: insert on first sight.
  DedupIndex raw;
  EXPECT_FALSE(raw.seen_exact(42));
  EXPECT_TRUE(raw.seen_exact(42));
  EXPECT_FALSE(raw.near_duplicate({1, 2, 3}));
  EXPECT_TRUE(raw.near_duplicate({9, 3}));
  EXPECT_FALSE(raw.near_duplicate({}));

  // Equal after cleaning = exact duplicates: composed vs decomposed, a stray control.
  if (have_icu()) {
    CleanOptions n = o;
    n.normalization = Normalization::kNfc;
    n.strip_control = true;
    Cleaner cn = make_cleaner(n);
    DedupIndex idx;
    std::string a = "caf\u00e9 au lait", b = "cafe\u0301 au\x07 lait";
    DocKeys ka, kb;
    ASSERT_TRUE(cn.clean(&a, &ka).kept());
    DocVerdict vb = cn.clean(&b, &kb);
    ASSERT_TRUE(vb.kept());
    EXPECT_TRUE(vb.normalized_changed && vb.control_stripped);
    EXPECT_EQ(a, b);
    EXPECT_EQ(idx.admit(ka), CleanReason::kKept);
    EXPECT_EQ(idx.admit(kb), CleanReason::kExactDuplicate);
  }
}

TEST(CleanDedup, U64SetBehavesAsASet) {
  U64Set s;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 100000; ++i) keys.push_back(rng() >> (i % 3 == 0 ? 40 : 0));  // some small, colliding keys
  keys.push_back(0);
  std::vector<uint64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  size_t distinct = std::unique(sorted.begin(), sorted.end()) - sorted.begin();
  size_t inserted = 0;
  for (uint64_t k : keys) inserted += s.insert(k);
  EXPECT_EQ(inserted, distinct);
  EXPECT_EQ(s.size(), distinct);
  for (uint64_t k : keys) EXPECT_TRUE(s.contains(k));
  EXPECT_FALSE(s.contains(0xDEADBEEFCAFEF00DULL));
  // 8-byte slots, at most 3/4 full, at least 3/8 after growing.
  EXPECT_GE(s.memory_bytes(), (distinct - 1) * 8 * 4 / 3);
  EXPECT_LE(s.memory_bytes(), distinct * 8 * 8 / 3 + 128);
}

// --- MinHash -----------------------------------------------------------------

TEST(MinHashTest, SimplifyTextMatchesDatatrove) {
  if (!have_icu()) GTEST_SKIP() << "built without ICU";
  // Expected outputs from datatrove's simplify_text (default TextNormConfig)
  // run under Python 3.11, words re-joined by single spaces.
  const std::pair<std::string, std::string> cases[] = {
      {"Hello, World!", "hello world"},
      {"  Tabs\tand\nnewlines  ", "tabs and newlines"},
      {"don't stop\u2014believing\u2026", "dont stopbelieving"},
      {"\u00c7a va? Na\u00efve caf\u00e9", "ca va naive cafe"},
      {"Room 101, floor 23", "room 0 floor 0"},
      {"x\uff11\uff12y", "x0y"},  // full-width 1 is in datatrove's PUNCTUATION, full-width 2 is a digit
      {"a , b", "a b"},
      {"\u03a3\u0391\u03a3", "\u03c3\u03b1\u03c2"},  // final sigma
      {"\u0130stanbul", "istanbul"},
      {"\u2260", "="},  // NFD after punctuation removal: = + U+0338, the mark dropped
      {"a\u00a0b\u3000c", "a b c"},
      {"\u65e5\u672c\u8a9e\u3001\u30c6\u30b9\u30c8\u3002", "\u65e5\u672c\u8a9e\u30c6\u30b9\u30c8"},
      {"!!! ???", ""},
      {"1\u0301 2 \u0663\u0664", "0 0 0"},
      {"x\x01y\x1cz\u0085w", "xy z w"},
      {"\u037e", ";"},
      {"e\u0301 \u0301 f", "e f"},
      {"Stra\u00dfe \u1e9e", "stra\u00dfe \u00df"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(simplify_text(in), want) << in;
}

TEST(MinHashTest, DeterministicAndShortDocuments) {
  MinHashOptions mo;
  MinHasher a(mo), b(mo);
  const std::string text = "The quick brown fox jumps over the lazy dog while the cat sleeps";
  auto sa = a.signature(text);
  ASSERT_EQ(sa.size(), 112u);
  EXPECT_EQ(sa, b.signature(text));
  // Pinned: mt19937_64 and XXH3 are fully specified, so these hold on every
  // machine and compiler; a change here changes which documents are dropped.
  auto keys = a.band_keys(sa);
  ASSERT_EQ(keys.size(), 14u);
  EXPECT_EQ(sa[0], 136931256825851469ULL);
  EXPECT_EQ(sa[111], 733233901929703869ULL);
  EXPECT_EQ(keys[0], 9200350246590626604ULL);
  // The signature is its definition: min over shingles x of (a*x + b) mod
  // (2^61-1), here with a plain 128-bit %, a and b drawn as documented.
  {
    const uint64_t p61 = (uint64_t{1} << 61) - 1;
    std::mt19937_64 gen(mo.seed);
    std::vector<uint64_t> pa(112), pb(112);
    for (auto& v : pa) v = 1 + gen() % (p61 - 1);
    for (auto& v : pb) v = gen() % p61;
    auto sh = a.shingles(text);
    ASSERT_EQ(sh.size(), 9u);  // 13 words, 5-grams
    for (int k = 0; k < 112; ++k) {
      uint64_t m = UINT64_MAX;
      for (uint64_t x : sh) {
        unsigned __int128 v = static_cast<unsigned __int128>(pa[k]) * (x % p61) + pb[k];
        m = std::min(m, static_cast<uint64_t>(v % p61));
      }
      ASSERT_EQ(sa[k], m) << k;
    }
  }
  MinHashOptions other = mo;
  other.seed = 2;
  EXPECT_NE(MinHasher(other).signature(text), sa);

  EXPECT_EQ(a.shingles("one two three").size(), 1u);  // fewer words than n: one shingle
  EXPECT_EQ(a.shingles("One, two... THREE!"), a.shingles("one two three"));
  EXPECT_EQ(a.shingles("one two three four five").size(), 1u);
  EXPECT_EQ(a.shingles("one two three four five six").size(), 2u);
  EXPECT_TRUE(a.shingles("").empty());
  EXPECT_TRUE(a.signature("!!! ...").empty());
  EXPECT_TRUE(a.band_keys(a.signature("!!! ...")).empty());
}

TEST(MinHashTest, EstimateWithinPointOneOfTrueJaccard) {
  // 256 permutations (32 x 8): the estimate's standard error is at most
  // 0.5/sqrt(256) = 0.031, so 0.1 is > 3 sigma for every pair.
  MinHashOptions mo;
  mo.bands = 32;
  MinHasher mh(mo);
  std::mt19937_64 rng(11);
  Words words(rng);
  auto base = words.tokens(rng, 400);
  for (int changed : {4, 20, 60, 128, 250}) {
    auto edited = base;
    for (int i = 0; i < changed; ++i) edited[100 + i] = words.pick(rng);
    std::string a = join(base), b = join(edited);
    double truth = jaccard(mh.shingles(a), mh.shingles(b));
    double est = estimate_jaccard(mh.signature(a), mh.signature(b));
    std::printf("changed %3d of 400 words: true Jaccard %.3f, MinHash estimate %.3f\n", changed, truth, est);
    EXPECT_NEAR(est, truth, 0.1) << changed;
  }
  // Unrelated documents: Jaccard 0, and no band in common.
  std::string x = join(words.tokens(rng, 200)), y = join(words.tokens(rng, 200));
  EXPECT_EQ(jaccard(mh.shingles(x), mh.shingles(y)), 0.0);
  auto kx = mh.band_keys(mh.signature(x)), ky = mh.band_keys(mh.signature(y));
  for (size_t i = 0; i < kx.size(); ++i) EXPECT_NE(kx[i], ky[i]);
}

// The per-document stage of one document.
struct Processed {
  DocVerdict verdict;
  DocKeys keys;
  std::string text;
};

Processed per_document(const Cleaner& c, const Doc& d) {
  Processed p;
  p.text = d.text;
  p.verdict = c.check_fields(d.record);
  if (p.verdict.kept()) p.verdict = c.clean(&p.text, &p.keys);
  return p;
}

// The in-order stage over every document's per-document result.
CleanStats in_order(const Cleaner& c, std::vector<Processed>* docs) {
  DedupIndex index;
  CleanStats stats = c.new_stats();
  for (Processed& p : *docs) {
    if (p.verdict.kept()) p.verdict.reason = index.admit(p.keys);
    stats.add(p.verdict);
  }
  std::printf("dedup index: %zu exact + %zu band keys, %zu bytes\n", index.exact_entries(), index.band_entries(),
              index.memory_bytes());
  return stats;
}

TEST(CleanCorpus, PlantedCountsComeOutExactly) {
  if (!have_icu()) GTEST_SKIP() << "built without ICU (normalization and near-dedup)";
  Planted p = make_corpus();
  Cleaner c = make_cleaner(corpus_options());
  std::vector<Processed> out;
  for (const Doc& d : p.docs) out.push_back(per_document(c, d));
  CleanStats s = in_order(c, &out);

  // Each document's verdict is the one planted.
  for (size_t i = 0; i < p.docs.size(); ++i)
    EXPECT_EQ(out[i].verdict.reason, expected_reason(p.docs[i].kind))
        << "document " << i << " kind " << static_cast<int>(p.docs[i].kind) << ": "
        << clean_reason_name(out[i].verdict.reason);
  expect_planted_counts(s, p);
  std::printf("%s\n", s.to_json().dump().c_str());

  // The near duplicates' true Jaccard similarity to their originals.
  const MinHasher& mh = *c.minhasher();
  double lo = 1, hi = 0, sum = 0;
  for (const Doc& d : p.docs) {
    if (d.kind != Kind::kNear) continue;
    double j = jaccard(mh.shingles(p.unique_texts[d.original]), mh.shingles(d.text));
    lo = std::min(lo, j), hi = std::max(hi, j), sum += j;
  }
  std::printf("near duplicates: Jaccard to the original min %.3f mean %.3f max %.3f; P(band match) at the min %.6f "
              "(threshold %.3f)\n",
              lo, sum / p.near, hi, mh.options().match_probability(lo), mh.options().threshold());
  EXPECT_GT(mh.options().match_probability(lo), 0.9999);
}

TEST(CleanCorpus, SameResultForAnyThreadOrder) {
  if (!have_icu()) GTEST_SKIP() << "built without ICU (normalization and near-dedup)";
  Planted p = make_corpus();
  Cleaner c = make_cleaner(corpus_options());
  std::vector<Processed> sequential;
  for (const Doc& d : p.docs) sequential.push_back(per_document(c, d));
  // Four threads, each taking every fourth document from the end.
  std::vector<Processed> threaded(p.docs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = p.docs.size(); i-- > 0;)
        if (static_cast<int>(i % 4) == t) threaded[i] = per_document(c, p.docs[i]);
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < p.docs.size(); ++i) {
    EXPECT_EQ(threaded[i].text, sequential[i].text) << i;
    EXPECT_EQ(threaded[i].verdict.reason, sequential[i].verdict.reason) << i;
    EXPECT_EQ(threaded[i].keys.exact, sequential[i].keys.exact) << i;
    EXPECT_EQ(threaded[i].keys.bands, sequential[i].keys.bands) << i;
  }
  CleanStats a = in_order(c, &sequential), b = in_order(c, &threaded);
  EXPECT_EQ(a.to_json(), b.to_json());
  for (size_t i = 0; i < p.docs.size(); ++i) EXPECT_EQ(threaded[i].verdict.reason, sequential[i].verdict.reason);

  // Stats merged from per-thread parts equal the whole.
  CleanStats half1 = c.new_stats(), half2 = c.new_stats();
  for (size_t i = 0; i < sequential.size(); ++i) (i % 2 ? half1 : half2).add(sequential[i].verdict);
  half1 += half2;
  EXPECT_EQ(half1.to_json(), a.to_json());
}

TEST(CleanCorpus, ExactDedupWithoutIcu) {
  // What a build without ICU can do on the same corpus: no normalization, no
  // near-dedup, so the decomposed variants and the near duplicates are kept.
  Planted p = make_corpus();
  CleanOptions o = corpus_options();
  o.normalization = Normalization::kNone;
  o.near_dedup = false;
  Cleaner c = make_cleaner(o);
  std::vector<Processed> out;
  for (const Doc& d : p.docs) out.push_back(per_document(c, d));
  CleanStats s = in_order(c, &out);
  EXPECT_EQ(s.exact_duplicates, p.exact - p.exact / 2);  // the byte-identical half
  EXPECT_EQ(s.near_duplicates, 0);
  EXPECT_EQ(s.kept, p.unique + p.exact / 2 + p.near);
  EXPECT_EQ(s.too_short, p.too_short + p.control_only);
  EXPECT_EQ(s.control_stripped_docs, p.exact / 2 + p.control_only);
}

}  // namespace
}  // namespace loom::data
