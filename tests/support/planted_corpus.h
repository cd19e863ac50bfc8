// A generated corpus with planted duplicates, near duplicates and junk, whose
// cleaning verdicts are known by construction (exec/data/clean.h): shared by
// the cleaning library's test and preprocess's end-to-end cleaning tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "exec/data/clean.h"

namespace loom::data::testing {

using nlohmann::json;

// Documents of random words from a large vocabulary.
struct Words {
  std::vector<std::string> vocab;
  explicit Words(std::mt19937_64& rng, int n = 50000) {
    for (int i = 0; i < n; ++i) {
      int len = 3 + static_cast<int>(rng() % 8);
      std::string w;
      for (int j = 0; j < len; ++j) w.push_back(static_cast<char>('a' + rng() % 26));
      vocab.push_back(std::move(w));
    }
  }
  const std::string& pick(std::mt19937_64& rng) const { return vocab[rng() % vocab.size()]; }
  std::vector<std::string> tokens(std::mt19937_64& rng, int n) const {
    std::vector<std::string> t;
    for (int i = 0; i < n; ++i) t.push_back(pick(rng));
    return t;
  }
};

inline std::string join(const std::vector<std::string>& tokens) {
  std::string s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) s += ' ';
    s += tokens[i];
  }
  return s;
}

enum class Kind { kUnique, kExact, kNear, kShort, kControlOnly, kFewWords, kLong, kOtherLang, kNoLang };

struct Doc {
  Kind kind;
  int original = -1;  // index into the unique documents for kExact / kNear
  json record;        // the JSONL object (its "lang" field)
  std::string text;
  double t = 0;       // position key: sorted, a copy always after its original
};

struct Planted {
  int unique = 400, exact = 50, near = 50, too_short = 5, control_only = 5, few_words = 10, too_long = 5,
      other_lang = 10, no_lang = 5;
  std::vector<Doc> docs;  // in input order
  std::vector<std::string> unique_texts;
};

inline CleanOptions corpus_options() {
  CleanOptions o;
  o.normalization = Normalization::kNfc;
  o.strip_control = true;
  o.min_chars = 100;
  o.max_chars = 20000;
  o.min_words = 50;
  o.exact_dedup = true;
  o.near_dedup = true;
  o.field_filters = {"lang=en"};
  return o;
}

inline Planted make_corpus() {
  Planted p;
  std::mt19937_64 rng(20240611);
  Words words(rng);
  auto unit = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };  // in (0, 1)
  auto prose = [&](int n) {
    auto t = words.tokens(rng, n);
    t[0][0] = static_cast<char>(t[0][0] - 'a' + 'A');
    for (int i = 14; i < n; i += 15) t[i] += (i % 2) ? "." : ",";
    t[10] = "caf\u00e9";  // every text has one non-ASCII word (composed)
    return t;
  };
  std::vector<std::vector<std::string>> unique_tokens;
  std::vector<double> unique_t;
  for (int i = 0; i < p.unique; ++i) {
    unique_tokens.push_back(prose(200));
    p.unique_texts.push_back(join(unique_tokens.back()));
    unique_t.push_back(unit());
    p.docs.push_back({Kind::kUnique, i, {{"lang", "en"}}, p.unique_texts.back(), unique_t.back()});
  }
  auto after = [&](int original) { return unique_t[original] + (1 - unique_t[original]) * unit(); };
  // Distinct originals for the exact copies (two decomposed variants of one
  // original would be byte-identical to each other), and for the near ones.
  auto distinct_originals = [&](int n) {
    std::vector<int> all(p.unique);
    for (int i = 0; i < p.unique; ++i) all[i] = i;
    for (int i = 0; i < n; ++i) std::swap(all[i], all[i + rng() % (p.unique - i)]);
    all.resize(n);
    return all;
  };
  const std::vector<int> exact_of = distinct_originals(p.exact), near_of = distinct_originals(p.near);
  for (int i = 0; i < p.exact; ++i) {
    int o = exact_of[i];
    std::string text = p.unique_texts[o];
    if (i % 2) {  // differs only by what cleaning removes: decomposed é and a control character
      auto tokens = unique_tokens[o];
      tokens[10] = "cafe\u0301";
      tokens[3] += "\x07";
      text = join(tokens);
    }
    p.docs.push_back({Kind::kExact, o, {{"lang", "en"}}, text, after(o)});
  }
  for (int i = 0; i < p.near; ++i) {
    int o = near_of[i];
    auto tokens = unique_tokens[o];
    // 6 of 200 words (3%) replaced, at the end: 6 of 196 5-word shingles
    // change (Jaccard 190/202 = 0.94). Also changes simplification erases.
    for (int k = 194; k < 200; ++k) tokens[k] = words.pick(rng);
    tokens[50][0] = static_cast<char>(std::toupper(tokens[50][0]));
    tokens[80] += "!";
    p.docs.push_back({Kind::kNear, o, {{"lang", "en"}}, join(tokens), after(o)});
  }
  for (int i = 0; i < p.too_short; ++i)
    p.docs.push_back({Kind::kShort, -1, {{"lang", "en"}}, "Tiny document " + std::to_string(i) + ".", unit()});
  for (int i = 0; i < p.control_only; ++i)
    p.docs.push_back({Kind::kControlOnly, -1, {{"lang", "en"}}, std::string(3 + i, '\x01') + "\x1b\x7f", unit()});
  for (int i = 0; i < p.few_words; ++i) {
    std::vector<std::string> t;
    while (t.size() < 30) {  // 30 words of 6+ letters: over 100 characters, under 50 words
      const std::string& w = words.pick(rng);
      if (w.size() >= 6) t.push_back(w);
    }
    p.docs.push_back({Kind::kFewWords, -1, {{"lang", "en"}}, join(t), unit()});
  }
  for (int i = 0; i < p.too_long; ++i)  // 4000 words: about 30k characters
    p.docs.push_back({Kind::kLong, -1, {{"lang", "en"}}, join(prose(4000)), unit()});
  for (int i = 0; i < p.other_lang; ++i)
    p.docs.push_back({Kind::kOtherLang, -1, {{"lang", "de"}}, join(prose(200)), unit()});
  for (int i = 0; i < p.no_lang; ++i)
    p.docs.push_back({Kind::kNoLang, -1, i % 2 ? json{{"lang", 3}} : json{{"source", "x"}}, join(prose(200)), unit()});
  std::stable_sort(p.docs.begin(), p.docs.end(), [](const Doc& a, const Doc& b) { return a.t < b.t; });
  return p;
}

inline CleanReason expected_reason(Kind k) {
  switch (k) {
    case Kind::kUnique: return CleanReason::kKept;
    case Kind::kExact: return CleanReason::kExactDuplicate;
    case Kind::kNear: return CleanReason::kNearDuplicate;
    case Kind::kShort:
    case Kind::kControlOnly: return CleanReason::kTooShort;
    case Kind::kFewWords: return CleanReason::kTooFewWords;
    case Kind::kLong: return CleanReason::kTooLong;
    case Kind::kOtherLang: return CleanReason::kFilteredByField;
    case Kind::kNoLang: return CleanReason::kFilterFieldMissing;
  }
  return CleanReason::kKept;
}

// The counts cleaning must give on `p` with corpus_options(): exactly the
// planted ones.
inline void expect_planted_counts(const CleanStats& s, const Planted& p) {
  EXPECT_EQ(s.documents, static_cast<int64_t>(p.docs.size()));
  EXPECT_EQ(s.kept, p.unique);
  EXPECT_EQ(s.exact_duplicates, p.exact);
  EXPECT_EQ(s.near_duplicates, p.near);
  EXPECT_EQ(s.too_short, p.too_short + p.control_only);
  EXPECT_EQ(s.too_few_words, p.few_words);
  EXPECT_EQ(s.too_long, p.too_long);
  EXPECT_EQ(s.filtered_by_field, (std::vector<int64_t>{p.other_lang}));
  EXPECT_EQ(s.filter_field_missing, p.no_lang);
  EXPECT_EQ(s.invalid_utf8, 0);
  EXPECT_EQ(s.normalized_changed, p.exact / 2);  // the decomposed variants
  EXPECT_EQ(s.control_stripped_docs, p.exact / 2 + p.control_only);
  EXPECT_EQ(s.documents, s.kept + s.removed());
}

}  // namespace loom::data::testing
