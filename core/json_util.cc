#include "core/json_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <xxhash.h>

#include "core/output_file.h"
#include "core/resources.h"

namespace loom {
namespace fs = std::filesystem;

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path + ": no such file");
  if (fs::is_directory(path, ec)) return invalid_argument(path + ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(path + ": read failed");
  return ss.str();
}

Status write_text_file(const std::string& path, const std::string& text) {
  WriteOptions o;
  o.durable = true;
  return write_output_file(path, text, o);
}

Result<Json> parse_json(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based position of the offending byte.
    size_t pos = e.byte == 0 ? 0 : e.byte - 1;
    if (pos > text.size()) pos = text.size();
    int line = 1, col = 1;
    for (size_t i = 0; i < pos; ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string detail = e.what();
    auto p = detail.find("syntax error");
    if (p != std::string::npos) detail = detail.substr(p);
    return parse_error(what + ": malformed JSON at line " + std::to_string(line) + ", column " +
                       std::to_string(col) + ": " + detail + "; fix the file's syntax");
  } catch (const Json::exception& e) {
    // Not a syntax error: a number beyond a double's range ("1e400",
    // out_of_range.406) or a string nlohmann refuses. Found by fuzzing: it
    // escaped every reader and ended the process.
    std::string detail = e.what();
    auto p = detail.find("] ");
    if (p != std::string::npos) detail = detail.substr(p + 2);
    return parse_error(what + ": malformed JSON: " + detail +
                       " (numbers must fit a double, about 1.8e308); fix the file");
  }
}

namespace {
std::string key_path(const std::string& where, const char* key) {
  return where.empty() ? std::string(key) : where + "." + key;
}
const char* type_name(const Json& v) { return v.type_name(); }
}  // namespace

Result<double> json_number(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null())
    return invalid_argument(key_path(where, key) + " is missing; add it (a number)");
  const Json& v = obj[key];
  if (!v.is_number()) return invalid_argument(key_path(where, key) + " must be a number, got " + type_name(v));
  return v.get<double>();
}

Result<double> json_positive(const Json& obj, const char* key, const std::string& where) {
  LOOM_ASSIGN_OR_RETURN(double x, json_number(obj, key, where));
  if (!(x > 0)) {
    std::ostringstream ss;
    ss << key_path(where, key) << " must be positive, got " << x;
    return invalid_argument(ss.str());
  }
  return x;
}

Result<int64_t> json_int(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null())
    return invalid_argument(key_path(where, key) + " is missing; add it (an integer)");
  const Json& v = obj[key];
  // An unsigned value above INT64_MAX would wrap to a negative one, and a
  // float outside int64's range (1e300) has no integer value: both are
  // refused instead of being converted.
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    return invalid_argument(key_path(where, key) + " = " + v.dump() + " is out of range (at most " +
                            std::to_string(INT64_MAX) + ")");
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // [-2^63, 2^63): the doubles that convert to int64 without overflow.
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == std::trunc(d))
      return static_cast<int64_t>(d);
    if (std::isfinite(d) && d == std::trunc(d))
      return invalid_argument(key_path(where, key) + " = " + v.dump() + " is out of range (at most " +
                              std::to_string(INT64_MAX) + ")");
  }
  return invalid_argument(key_path(where, key) + " must be an integer, got " + v.dump());
}

Result<int64_t> json_positive_int(const Json& obj, const char* key, const std::string& where) {
  LOOM_ASSIGN_OR_RETURN(int64_t x, json_int(obj, key, where));
  if (x <= 0) return invalid_argument(key_path(where, key) + " must be positive, got " + std::to_string(x));
  return x;
}

Result<std::string> json_string(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null())
    return invalid_argument(key_path(where, key) + " is missing; add it (a string)");
  const Json& v = obj[key];
  if (!v.is_string()) return invalid_argument(key_path(where, key) + " must be a string, got " + type_name(v));
  return v.get<std::string>();
}

Result<double> json_number_or(const Json& obj, const char* key, double fallback, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return json_number(obj, key, where);
}

Result<int64_t> json_int_or(const Json& obj, const char* key, int64_t fallback, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return json_int(obj, key, where);
}

Result<bool> json_bool_or(const Json& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  const Json& v = obj[key];
  if (!v.is_boolean()) return invalid_argument(key_path(where, key) + " must be true or false, got " + v.dump());
  return v.get<bool>();
}

Result<std::string> json_string_or(const Json& obj, const char* key, const std::string& fallback,
                                   const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return json_string(obj, key, where);
}

Result<std::string> find_description_file(const std::string& path_or_name, const std::string& subdir) {
  std::error_code ec;
  if (fs::exists(path_or_name, ec) && !fs::is_directory(path_or_name, ec)) return path_or_name;
  std::string stem = path_or_name;
  if (stem.size() < 5 || stem.substr(stem.size() - 5) != ".json") stem += ".json";
  std::vector<std::string> tried{path_or_name};
  for (const auto& root : resource_roots()) {
    fs::path p = fs::path(root) / subdir / stem;
    tried.push_back(p.string());
    if (fs::exists(p, ec)) return p.string();
  }
  std::string msg = "'" + path_or_name + "' not found (tried";
  for (size_t i = 0; i < tried.size(); ++i) msg += (i ? ", " : " ") + tried[i];
  msg += "); give a path to a .json file or a name from " + subdir + "/";
  return not_found(msg);
}

std::string content_hash(const std::string& text) {
  uint64_t h = XXH3_64bits(text.data(), text.size());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace loom
