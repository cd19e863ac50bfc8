// Field filters: keep a document only when a field written by an upstream
// tool passes a test (fastText language id, a quality classifier's score, a
// spam flag, ...). Part of text cleaning (exec/data/clean.h).
//
// Spec grammar: FIELD OP VALUE, no spaces around OP.
//   lang=en          the field equals one of the comma-separated values
//   lang=en,fr       (any of); "==" is accepted for "="
//   flag!=spam       the field equals none of the values
//   quality>=0.5     numeric comparison: > >= < <=; VALUE must be a number
//   metadata.lang=en a dotted FIELD walks nested objects (datatrove writes
//                    {"metadata": {"language": "en", "language_score": 0.93}});
//                    a key that itself contains '.' cannot be named
// Values of "=" / "!=" are trimmed of surrounding spaces; an empty value is refused.
//
// Evaluation (what a document's value must be):
//   - field absent, or of a type the operator cannot compare (null, object,
//     array; a string for > >= < <=; a bool for a numeric op): kMissing. The
//     document is filtered out and counted apart ("filter field missing") —
//     for "!=" too: a tool that tags documents tags every one, so a missing
//     tag is an input problem to see in the counts, not a pass.
//   - "=" / "!=": a JSON string is compared byte for byte with each value; a
//     JSON number is compared as a double with each value that parses as a
//     number; a JSON bool with the values "true" / "false". A value type with
//     no comparable value in the list (e.g. lang=en against 3) is kMissing.
//   - > >= < <=: a JSON number (integer or float), compared as a double.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace loom::data {

enum class FilterOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
const char* filter_op_name(FilterOp op);  // "=", "!=", "<", "<=", ">", ">="

enum class FilterMatch : uint8_t {
  kPass,     // keep (as far as this filter goes)
  kFail,     // the value does not pass: filtered by this filter
  kMissing,  // absent or not comparable: filtered, counted as "filter field missing"
};

class FieldFilter {
 public:
  // Errors: invalid_argument naming the spec and the grammar.
  static Result<FieldFilter> parse(const std::string& spec);

  const std::string& spec() const { return spec_; }    // as given
  const std::string& field() const { return field_; }  // "metadata.lang"
  FilterOp op() const { return op_; }

  // `value` is the field's value, nullptr when the document lacks the field.
  FilterMatch evaluate(const nlohmann::json* value) const;
  // The field of a whole record (a JSON object), dotted paths followed.
  FilterMatch evaluate_record(const nlohmann::json& record) const;
  // Typed values, e.g. a Parquet column: nullopt = absent (or null); a NaN
  // number is kMissing too.
  FilterMatch evaluate(const std::optional<std::string>& value) const;
  FilterMatch evaluate(const std::optional<double>& value) const;

 private:
  FilterMatch match_string(const std::string& s) const;
  FilterMatch match_number(double d) const;
  FilterMatch match_bool(bool b) const;

  std::string spec_, field_;
  std::vector<std::string> path_;  // field_ split at '.'
  FilterOp op_ = FilterOp::kEq;
  std::vector<std::string> values_;           // "=" / "!=": the values as written
  std::vector<std::optional<double>> numbers_;  // each value as a number, when it is one
  double threshold_ = 0;                      // > >= < <=
};

// The value at a dotted path in `record`, nullptr when absent.
const nlohmann::json* find_field(const nlohmann::json& record, const std::vector<std::string>& path);

}  // namespace loom::data
