// Small helpers shared by the JSON readers in core (model configs, hardware
// profiles, plans, run records). Only .cc files include this header, so the
// heavy nlohmann header stays out of the public ones.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace loom {

using Json = nlohmann::json;
// ordered_json keeps keys in insertion order: for files people read (plans).
using OrderedJson = nlohmann::ordered_json;

// Reads a whole file. kNotFound when it does not exist, kIoError otherwise.
Result<std::string> read_text_file(const std::string& path);
// Writes atomically (temp file + rename) so a crash never leaves half a file,
// under the rule of core/output_file.h: through symlinks, never over a FIFO,
// device or directory, "-" to standard output.
Status write_text_file(const std::string& path, const std::string& text);

// Parses JSON; a syntax error becomes kParseError "WHAT: line L, column C: ...".
Result<Json> parse_json(const std::string& text, const std::string& what);

// Typed field access with messages that name the key and the expected type.
// `where` prefixes the message ("hwprofile dgx-h100: accelerator").
Result<double> json_number(const Json& obj, const char* key, const std::string& where);
Result<double> json_positive(const Json& obj, const char* key, const std::string& where);
Result<int64_t> json_int(const Json& obj, const char* key, const std::string& where);
Result<int64_t> json_positive_int(const Json& obj, const char* key, const std::string& where);
Result<std::string> json_string(const Json& obj, const char* key, const std::string& where);
// Optional forms: `fallback` when the key is absent or null; type errors still fail.
Result<double> json_number_or(const Json& obj, const char* key, double fallback, const std::string& where);
Result<int64_t> json_int_or(const Json& obj, const char* key, int64_t fallback, const std::string& where);
Result<bool> json_bool_or(const Json& obj, const char* key, bool fallback, const std::string& where);
Result<std::string> json_string_or(const Json& obj, const char* key, const std::string& fallback,
                                   const std::string& where);

// Finds a description file: `path_or_name` as given if it exists, else
// $LOOM_HOME/<subdir>/<name>.json, else <subdir>/<name>.json under the source
// tree (models/, hwprofiles/). kNotFound lists what was tried.
Result<std::string> find_description_file(const std::string& path_or_name, const std::string& subdir);

// XXH3-64 of the text as 16 hex digits: the content hashes in plans.
std::string content_hash(const std::string& text);

}  // namespace loom
