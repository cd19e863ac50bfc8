#include "exec/data/field_filter.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace loom::data {

namespace {

// A whole string as a finite double ("0.5", "-3", "1e3"); nullopt otherwise.
std::optional<double> parse_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  double d = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, d);
  if (ec != std::errc() || ptr != end || !std::isfinite(d)) return std::nullopt;
  return d;
}

std::string trim_spaces(const std::string& s) {
  size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(' ');
  return s.substr(b, e - b + 1);
}

Status bad_spec(const std::string& spec, const std::string& why) {
  return invalid_argument("field filter \"" + spec + "\": " + why +
                          " (write FIELD=V[,V...], FIELD!=V[,V...] or FIELD>=N, FIELD>N, FIELD<=N, FIELD<N, "
                          "e.g. lang=en,fr or quality>=0.5)");
}

}  // namespace

const char* filter_op_name(FilterOp op) {
  switch (op) {
    case FilterOp::kEq: return "=";
    case FilterOp::kNe: return "!=";
    case FilterOp::kLt: return "<";
    case FilterOp::kLe: return "<=";
    case FilterOp::kGt: return ">";
    case FilterOp::kGe: return ">=";
  }
  return "?";
}

Result<FieldFilter> FieldFilter::parse(const std::string& spec) {
  size_t at = spec.find_first_of("=!<>");
  if (at == std::string::npos) return bad_spec(spec, "no operator");
  FieldFilter f;
  f.spec_ = spec;
  f.field_ = spec.substr(0, at);
  if (f.field_.empty()) return bad_spec(spec, "no field name before the operator");
  if (f.field_.find(' ') != std::string::npos) return bad_spec(spec, "space in the field name");
  size_t start = 0;
  for (;;) {
    size_t dot = f.field_.find('.', start);
    std::string part = f.field_.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) return bad_spec(spec, "empty component in the dotted field name \"" + f.field_ + "\"");
    f.path_.push_back(std::move(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  std::string rest = spec.substr(at);
  size_t op_len = 1;
  if (rest.rfind("==", 0) == 0) f.op_ = FilterOp::kEq, op_len = 2;
  else if (rest.rfind("!=", 0) == 0) f.op_ = FilterOp::kNe, op_len = 2;
  else if (rest.rfind(">=", 0) == 0) f.op_ = FilterOp::kGe, op_len = 2;
  else if (rest.rfind("<=", 0) == 0) f.op_ = FilterOp::kLe, op_len = 2;
  else if (rest[0] == '=') f.op_ = FilterOp::kEq;
  else if (rest[0] == '>') f.op_ = FilterOp::kGt;
  else if (rest[0] == '<') f.op_ = FilterOp::kLt;
  else return bad_spec(spec, "unknown operator");
  std::string value = rest.substr(op_len);
  if (value.empty()) return bad_spec(spec, "no value after the operator");
  if (f.op_ == FilterOp::kEq || f.op_ == FilterOp::kNe) {
    size_t s = 0;
    for (;;) {
      size_t comma = value.find(',', s);
      std::string v = trim_spaces(value.substr(s, comma == std::string::npos ? std::string::npos : comma - s));
      if (v.empty()) return bad_spec(spec, "empty value in the list \"" + value + "\"");
      f.numbers_.push_back(parse_number(v));
      f.values_.push_back(std::move(v));
      if (comma == std::string::npos) break;
      s = comma + 1;
    }
  } else {
    auto d = parse_number(trim_spaces(value));
    if (!d) return bad_spec(spec, "\"" + value + "\" is not a number (" + filter_op_name(f.op_) + " compares numbers)");
    f.threshold_ = *d;
  }
  return f;
}

FilterMatch FieldFilter::match_string(const std::string& s) const {
  if (op_ != FilterOp::kEq && op_ != FilterOp::kNe) return FilterMatch::kMissing;
  bool any = false;
  for (const std::string& v : values_) any = any || v == s;
  return any == (op_ == FilterOp::kEq) ? FilterMatch::kPass : FilterMatch::kFail;
}

FilterMatch FieldFilter::match_number(double d) const {
  switch (op_) {
    case FilterOp::kLt: return d < threshold_ ? FilterMatch::kPass : FilterMatch::kFail;
    case FilterOp::kLe: return d <= threshold_ ? FilterMatch::kPass : FilterMatch::kFail;
    case FilterOp::kGt: return d > threshold_ ? FilterMatch::kPass : FilterMatch::kFail;
    case FilterOp::kGe: return d >= threshold_ ? FilterMatch::kPass : FilterMatch::kFail;
    case FilterOp::kEq:
    case FilterOp::kNe: {
      bool comparable = false, any = false;
      for (const auto& n : numbers_) {
        if (!n) continue;
        comparable = true;
        any = any || *n == d;
      }
      if (!comparable) return FilterMatch::kMissing;
      return any == (op_ == FilterOp::kEq) ? FilterMatch::kPass : FilterMatch::kFail;
    }
  }
  return FilterMatch::kMissing;
}

FilterMatch FieldFilter::match_bool(bool b) const {
  if (op_ != FilterOp::kEq && op_ != FilterOp::kNe) return FilterMatch::kMissing;
  bool comparable = false, any = false;
  for (const std::string& v : values_) {
    if (v != "true" && v != "false") continue;
    comparable = true;
    any = any || (v == "true") == b;
  }
  if (!comparable) return FilterMatch::kMissing;
  return any == (op_ == FilterOp::kEq) ? FilterMatch::kPass : FilterMatch::kFail;
}

FilterMatch FieldFilter::evaluate(const nlohmann::json* value) const {
  if (value == nullptr) return FilterMatch::kMissing;
  if (value->is_string()) return match_string(value->get_ref<const std::string&>());
  if (value->is_number()) return match_number(value->get<double>());
  if (value->is_boolean()) return match_bool(value->get<bool>());
  return FilterMatch::kMissing;  // null, object, array, binary
}

FilterMatch FieldFilter::evaluate_record(const nlohmann::json& record) const {
  return evaluate(find_field(record, path_));
}

FilterMatch FieldFilter::evaluate(const std::optional<std::string>& value) const {
  return value ? match_string(*value) : FilterMatch::kMissing;
}

FilterMatch FieldFilter::evaluate(const std::optional<double>& value) const {
  if (!value || std::isnan(*value)) return FilterMatch::kMissing;
  return match_number(*value);
}

const nlohmann::json* find_field(const nlohmann::json& record, const std::vector<std::string>& path) {
  const nlohmann::json* at = &record;
  for (const std::string& key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return path.empty() ? nullptr : at;
}

}  // namespace loom::data
