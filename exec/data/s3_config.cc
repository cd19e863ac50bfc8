#include "exec/data/s3_config.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace loom::data {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}
std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string home_path(const std::string& rel) {
  std::string home = env("HOME");
  return (home.empty() ? std::string(".") : home) + "/" + rel;
}

using Ini = std::map<std::string, std::map<std::string, std::string>>;

Ini read_ini(const std::string& path, bool* exists) {
  std::ifstream in(path);
  *exists = static_cast<bool>(in);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_aws_ini(ss.str());
}

const std::map<std::string, std::string>* section(const Ini& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}
std::string get(const std::map<std::string, std::string>* s, const std::string& key) {
  if (s == nullptr) return "";
  auto it = s->find(key);
  return it == s->end() ? "" : it->second;
}

// A bucket usable as a DNS label of a virtual host (S3's rules, as botocore's).
bool dns_compatible(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '.'))
      return false;
  }
  if (!std::isalnum(static_cast<unsigned char>(b.front())) || !std::isalnum(static_cast<unsigned char>(b.back())))
    return false;
  return b.find("..") == std::string::npos;
}

}  // namespace

Ini parse_aws_ini(const std::string& text) {
  Ini out;
  std::string current, parent;  // parent: a "key =" with an empty value opens a nested block
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.find(']') != std::string::npos) {  // "[name]", maybe "# comment" after it
      current = trim(t.substr(1, t.find(']') - 1));
      // "[profile  x]" -> "profile x"
      if (starts_with(current, "profile") && current.size() > 7 && std::isspace(static_cast<unsigned char>(current[7])))
        current = "profile " + trim(current.substr(7));
      if (starts_with(current, "services") && current.size() > 8 &&
          std::isspace(static_cast<unsigned char>(current[8])))
        current = "services " + trim(current.substr(8));
      out[current];
      parent.clear();
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = trim(t.substr(0, eq)), value = trim(t.substr(eq + 1));
    // Inline comments after a value: " # ..." or " ; ..." (the CLI's rule).
    for (const char* c : {" #", " ;", "\t#", "\t;"}) {
      size_t p = value.find(c);
      if (p != std::string::npos) value = trim(value.substr(0, p));
    }
    if (indented && !parent.empty()) {
      out[current][parent + "." + key] = value;
      continue;
    }
    parent = value.empty() ? key : "";
    out[current][key] = value;
  }
  return out;
}

std::string s3_uri_encode(const std::string& s, bool keep_slash) {
  static const char* kDigits = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  return out;
}

std::string s3_query(const std::map<std::string, std::string>& params) {
  std::map<std::string, std::string> encoded;  // sorted by the encoded name, as SigV4 wants
  for (const auto& [k, v] : params) encoded[s3_uri_encode(k, false)] = s3_uri_encode(v, false);
  std::string q;
  for (const auto& [k, v] : encoded) {
    if (!q.empty()) q += '&';
    q += k + "=" + v;
  }
  return q;
}

Status split_s3_url(const std::string& url, std::string* bucket, std::string* key, bool allow_empty_key) {
  if (!starts_with(url, "s3://")) return invalid_argument("s3: '" + url + "' is not an s3:// URL");
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket->empty() || (key->empty() && !allow_empty_key)) {
    return invalid_argument("s3: '" + url + "' is not s3://bucket/key");
  }
  return Status::ok();
}

Result<S3Settings> resolve_s3_settings(const S3Options& o) {
  S3Settings s;
  const std::string cred_path =
      env("AWS_SHARED_CREDENTIALS_FILE").empty() ? home_path(".aws/credentials") : env("AWS_SHARED_CREDENTIALS_FILE");
  const std::string conf_path = env("AWS_CONFIG_FILE").empty() ? home_path(".aws/config") : env("AWS_CONFIG_FILE");
  bool cred_exists = false, conf_exists = false;
  const Ini cred_ini = read_ini(cred_path, &cred_exists);
  const Ini conf_ini = read_ini(conf_path, &conf_exists);

  std::string profile = o.profile;
  bool named = !profile.empty();
  if (profile.empty()) profile = env("AWS_PROFILE");
  if (profile.empty()) profile = env("AWS_DEFAULT_PROFILE");
  named = named || !profile.empty();
  if (profile.empty()) profile = "default";
  const auto* cred_sec = section(cred_ini, profile);
  const auto* conf_sec = section(conf_ini, profile == "default" ? "default" : "profile " + profile);
  if (conf_sec == nullptr && profile == "default") conf_sec = section(conf_ini, "profile default");
  if (named && cred_sec == nullptr && conf_sec == nullptr) {
    return not_found("s3: the AWS profile '" + profile + "' (" +
                     (o.profile.empty() ? "AWS_PROFILE" : "the profile option") + ") is in neither " + cred_path +
                     " nor " + conf_path + " ([profile " + profile + "])");
  }

  // Credentials.
  const std::string env_key = env("AWS_ACCESS_KEY_ID"), env_secret = env("AWS_SECRET_ACCESS_KEY");
  auto from_profile = [&]() -> Status {
    for (auto [sec, path] : {std::pair{cred_sec, cred_path}, std::pair{conf_sec, conf_path}}) {
      const std::string key = get(sec, "aws_access_key_id"), secret = get(sec, "aws_secret_access_key");
      if (key.empty() && secret.empty()) continue;
      if (key.empty() || secret.empty())
        return invalid_argument("s3: profile '" + profile + "' in " + path +
                                " has only one of aws_access_key_id and aws_secret_access_key");
      s.creds.access_key_id = key;
      s.creds.secret_access_key = secret;
      s.creds.session_token = get(sec, "aws_session_token");
      if (s.creds.session_token.empty()) s.creds.session_token = get(sec, "aws_security_token");
      s.creds.source = "profile '" + profile + "' in " + path;
      return Status::ok();
    }
    for (const char* k : {"role_arn", "credential_process", "sso_session", "sso_start_url", "web_identity_token_file"}) {
      if (!get(conf_sec, k).empty() || !get(cred_sec, k).empty())
        return unsupported("s3: profile '" + profile + "' gets its credentials through " + k +
                           ", which loom does not run; export them instead, e.g. eval \"$(aws configure "
                           "export-credentials --profile " + profile + " --format env)\"");
    }
    return Status::ok();
  };
  if (!o.profile.empty()) {
    LOOM_RETURN_IF_ERROR(from_profile());
  } else if (!env_key.empty() || !env_secret.empty()) {
    if (env_key.empty() || env_secret.empty())
      return invalid_argument(std::string("s3: ") + (env_key.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
                              " is set but " + (env_key.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
                              " is not; set both, or neither to use a profile");
    s.creds.access_key_id = env_key;
    s.creds.secret_access_key = env_secret;
    s.creds.session_token = env("AWS_SESSION_TOKEN");
    if (s.creds.session_token.empty()) s.creds.session_token = env("AWS_SECURITY_TOKEN");
    s.creds.source = "environment (AWS_ACCESS_KEY_ID)";
  } else {
    LOOM_RETURN_IF_ERROR(from_profile());
  }
  if (s.creds.access_key_id.empty()) s.creds.source = "none (anonymous requests)";

  // Region.
  for (const std::string& r : {o.region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"), get(conf_sec, "region")}) {
    if (!r.empty()) {
      s.region = r;
      break;
    }
  }

  // Endpoint.
  std::string services_ep;
  if (const std::string svc = get(conf_sec, "services"); !svc.empty()) {
    services_ep = get(section(conf_ini, "services " + svc), "s3.endpoint_url");
  }
  for (const std::string& e : {o.endpoint, env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"), services_ep,
                               get(conf_sec, "endpoint_url")}) {
    if (!e.empty()) {
      s.endpoint = e;
      break;
    }
  }
  if (!s.endpoint.empty() && !starts_with(s.endpoint, "http://") && !starts_with(s.endpoint, "https://"))
    return invalid_argument("s3: endpoint '" + s.endpoint + "' is not http(s)://host[:port]");

  // Addressing.
  for (const std::string& a : {o.addressing, env("LOOM_S3_ADDRESSING"), get(conf_sec, "s3.addressing_style")}) {
    if (!a.empty()) {
      s.addressing = a;
      break;
    }
  }
  if (s.addressing != "auto" && s.addressing != "virtual" && s.addressing != "path")
    return invalid_argument("s3: addressing style '" + s.addressing + "' is not auto, virtual or path");
  return s;
}

Result<S3Address> s3_address(const std::string& bucket, const std::string& key, const S3Settings& s,
                             const std::string& raw_query) {
  const bool custom = !s.endpoint.empty();
  std::string endpoint = custom ? s.endpoint : "https://s3." + s.region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const bool https = starts_with(endpoint, "https://");
  const size_t auth_begin = endpoint.find("://") + 3;
  const size_t path_begin = endpoint.find('/', auth_begin);
  std::string authority = endpoint.substr(auth_begin, path_begin == std::string::npos ? std::string::npos
                                                                                      : path_begin - auth_begin);
  const std::string prefix = path_begin == std::string::npos ? "" : endpoint.substr(path_begin);
  if (authority.empty() || authority.find_first_of("?#@ ") != std::string::npos)
    return invalid_argument("s3: endpoint '" + s.endpoint + "' is not http(s)://host[:port][/path]");
  // Default ports are left out, as curl leaves them out of the Host header.
  const std::string default_port = https ? ":443" : ":80";
  if (authority.size() > default_port.size() && authority.ends_with(default_port))
    authority.resize(authority.size() - default_port.size());

  bool virtual_host = s.addressing == "virtual" || (s.addressing == "auto" && !custom);
  if (!dns_compatible(bucket) || (https && bucket.find('.') != std::string::npos)) virtual_host = false;
  S3Address a;
  a.path_style = !virtual_host;
  const std::string scheme = https ? "https://" : "http://";
  if (virtual_host) {
    a.url = scheme + bucket + "." + authority + prefix + "/" + s3_uri_encode(key, true);
  } else {
    a.url = scheme + authority + prefix + "/" + s3_uri_encode(bucket, false);
    if (!key.empty()) a.url += "/" + s3_uri_encode(key, true);
  }
  if (!raw_query.empty()) a.url += "?" + raw_query;
  return a;
}

}  // namespace loom::data
