#include "exec/data/s3_config.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#ifdef LOOM_HAVE_CURL
#include <curl/curl.h>
#endif

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

// ---- container and EC2 instance-metadata credentials ------------------------------

// A JSON object's top-level string members (other values are checked and
// skipped). False: not a JSON object.
struct JsonScan {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool str(std::string* o) {
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    while (i < s.size()) {
      char c = s[i++];
      if (c == '"') return true;
      if (c != '\\') {
        o->push_back(c);
        continue;
      }
      if (i >= s.size()) return false;
      char e = s[i++];
      switch (e) {
        case '"': case '\\': case '/': o->push_back(e); break;
        case 'b': o->push_back('\b'); break;
        case 'f': o->push_back('\f'); break;
        case 'n': o->push_back('\n'); break;
        case 'r': o->push_back('\r'); break;
        case 't': o->push_back('\t'); break;
        case 'u': {
          if (i + 4 > s.size()) return false;
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            char h = s[i++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
            cp = cp * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp < 0x80) {
            o->push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            o->push_back(static_cast<char>(0xc0 | (cp >> 6)));
            o->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
          } else {
            o->push_back(static_cast<char>(0xe0 | (cp >> 12)));
            o->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
            o->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
          }
          break;
        }
        default: return false;
      }
    }
    return false;
  }
  // One value; a string goes to `o` when given.
  bool value(std::string* o, int depth) {
    ws();
    if (i >= s.size()) return false;
    const char c = s[i];
    if (c == '"') {
      std::string t;
      if (!str(&t)) return false;
      if (o != nullptr) *o = t;
      return true;
    }
    if (c == '{' || c == '[') {
      if (depth > 32) return false;
      const char close = c == '{' ? '}' : ']';
      ++i;
      ws();
      if (i < s.size() && s[i] == close) {
        ++i;
        return true;
      }
      while (true) {
        if (c == '{') {
          ws();
          std::string k;
          if (!str(&k)) return false;
          ws();
          if (i >= s.size() || s[i] != ':') return false;
          ++i;
        }
        if (!value(nullptr, depth + 1)) return false;
        ws();
        if (i >= s.size()) return false;
        if (s[i] == ',') {
          ++i;
          continue;
        }
        if (s[i] == close) {
          ++i;
          return true;
        }
        return false;
      }
    }
    const size_t b = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '+' || s[i] == '.'))
      ++i;
    return i > b;
  }
};

bool json_object_strings(const std::string& text, std::map<std::string, std::string>* out) {
  JsonScan j{text};
  j.ws();
  if (j.i >= text.size() || text[j.i] != '{') return false;
  ++j.i;
  j.ws();
  if (j.i < text.size() && text[j.i] == '}') {
    ++j.i;
  } else {
    while (true) {
      j.ws();
      std::string k, v;
      if (!j.str(&k)) return false;
      j.ws();
      if (j.i >= text.size() || text[j.i] != ':') return false;
      ++j.i;
      if (!j.value(&v, 1)) return false;
      (*out)[k] = v;
      j.ws();
      if (j.i >= text.size()) return false;
      if (text[j.i] == ',') {
        ++j.i;
        continue;
      }
      if (text[j.i] == '}') {
        ++j.i;
        break;
      }
      return false;
    }
  }
  j.ws();
  return j.i == text.size();
}

// "2026-12-04T05:31:08Z" (fractions and a zone after the seconds are taken as UTC).
bool parse_iso8601_utc(const std::string& t, std::time_t* out) {
  std::tm tm{};
  if (std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec) != 6)
    return false;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  *out = ::timegm(&tm);
  return *out != static_cast<std::time_t>(-1);
}

// What a metadata source gave: fetched once, "none" included.
struct CachedCreds {
  bool fetched = false;
  bool have = false;
  S3Credentials creds;
  bool expires = false;
  std::time_t expiration = 0;
  std::time_t retry_after = 0;  // a refresh failed: keep the keys until then
};
constexpr std::time_t kRefreshWindowS = 5 * 60;  // botocore's advisory refresh

std::mutex g_meta_mu;
std::map<std::string, CachedCreds> g_meta_cache;  // by source and URL
std::string g_container_host = "169.254.170.2";

bool still_fresh(const CachedCreds& c) {
  if (!c.fetched) return false;
  if (!c.have || !c.expires) return true;
  const std::time_t now = std::time(nullptr);
  return now < c.expiration - kRefreshWindowS || now < c.retry_after;
}
bool still_valid(const CachedCreds& c) {
  return c.fetched && c.have && (!c.expires || std::time(nullptr) < c.expiration);
}

// The credentials JSON of a container endpoint or IMDS.
Result<CachedCreds> creds_from_json(const std::string& body, const std::string& url, const std::string& what,
                                    const std::string& source, bool imds) {
  std::map<std::string, std::string> j;
  const std::string excerpt = body.substr(0, 200);
  if (!json_object_strings(body, &j))
    return parse_error("s3: " + what + ": " + url + " did not answer a JSON object: '" + excerpt + "'");
  if (imds && j.count("Code") != 0 && j["Code"] != "Success")
    return parse_error("s3: " + what + ": " + url + " answered Code '" + j["Code"] + "'" +
                       (j["Message"].empty() ? "" : ": " + j["Message"]));
  if (j["AccessKeyId"].empty() || j["SecretAccessKey"].empty())
    return parse_error("s3: " + what + ": " + url + " answered no AccessKeyId and SecretAccessKey: '" + excerpt + "'");
  CachedCreds c;
  c.fetched = c.have = true;
  c.creds.access_key_id = j["AccessKeyId"];
  c.creds.secret_access_key = j["SecretAccessKey"];
  c.creds.session_token = j["Token"];
  c.creds.source = source;
  if (!j["Expiration"].empty()) {
    if (!parse_iso8601_utc(j["Expiration"], &c.expiration))
      return parse_error("s3: " + what + ": " + url + " answered an Expiration that is no ISO 8601 time: '" +
                         j["Expiration"] + "'");
    c.expires = true;
  }
  return c;
}

#ifdef LOOM_HAVE_CURL
struct HttpResult {
  bool answered = false;  // an HTTP response came (any status)
  long status = 0;
  std::string body;
  std::string error;  // curl's, when not answered
};

size_t collect_body(char* d, size_t size, size_t n, void* user) {
  auto* b = static_cast<std::string*>(user);
  if (b->size() + size * n > (1u << 20)) return 0;  // credentials are small
  b->append(d, size * n);
  return size * n;
}

HttpResult metadata_http(const std::string& method, const std::string& url, const std::vector<std::string>& headers,
                         long timeout_ms) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResult r;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    r.error = "curl_easy_init failed";
    return r;
  }
  curl_slist* hl = nullptr;
  for (const std::string& h : headers) hl = curl_slist_append(hl, h.c_str());
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");  // link-local and loopback agents: never through a proxy
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  if (method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
  }
  if (hl != nullptr) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hl);
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    r.answered = true;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  } else {
    r.error = err[0] != '\0' ? std::string(err) : std::string(curl_easy_strerror(rc));
  }
  curl_slist_free_all(hl);
  curl_easy_cleanup(curl);
  return r;
}
#endif

bool http_host_allowed(const std::string& url) {
  // botocore's rule: https anywhere; http only to loopback or the ECS / EKS agents.
  if (starts_with(url, "https://")) return true;
  if (!starts_with(url, "http://")) return false;
  std::string rest = url.substr(7);
  std::string host;
  if (!rest.empty() && rest[0] == '[') {
    host = rest.substr(0, rest.find(']') + 1);
  } else {
    host = rest.substr(0, rest.find_first_of(":/?#"));
  }
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return starts_with(host, "127.") || host == "localhost" || host == "[::1]" || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "[fd00:ec2::23]";
}

Result<CachedCreds> fetch_container(const std::string& url, const std::string& var) {
  const std::string what = "container credentials (" + var + ")";
  std::vector<std::string> headers;
  std::string token;
  const std::string token_file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in)
      return io_error("s3: " + what + ": cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " + token_file);
    std::stringstream ss;
    ss << in.rdbuf();
    token = trim(ss.str());
  } else {
    token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  }
  if (token.find_first_of("\r\n") != std::string::npos)
    return invalid_argument("s3: " + what + ": the authorization token holds a line break");
  if (!token.empty()) headers.push_back("Authorization: " + token);
#ifdef LOOM_HAVE_CURL
  HttpResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {  // botocore: 3 attempts, 2 s each
    r = metadata_http("GET", url, headers, 2000);
    if (r.answered && r.status < 500) break;
  }
  if (!r.answered) return io_error("s3: " + what + ": GET " + url + " failed: " + r.error);
  if (r.status != 200)
    return io_error("s3: " + what + ": GET " + url + " answered HTTP " + std::to_string(r.status) + ": " +
                    trim(r.body.substr(0, 300)));
  return creds_from_json(r.body, url, what, what, /*imds=*/false);
#else
  return unsupported("s3: " + what + " is set but this build has no libcurl");
#endif
}

// IMDSv2 (v1 when the token PUT is refused with 403/404/405, as botocore).
// An endpoint that does not answer, or has no role: no credentials.
Result<CachedCreds> fetch_imds(const std::string& endpoint) {
  CachedCreds none;
  none.fetched = true;
#ifdef LOOM_HAVE_CURL
  constexpr long kTimeoutMs = 1000;  // botocore: 1 s, 1 attempt
  const std::string what = "EC2 instance metadata (AWS_EC2_METADATA_SERVICE_ENDPOINT=" + endpoint +
                           "; AWS_EC2_METADATA_DISABLED=true skips it)";
  HttpResult tok = metadata_http("PUT", endpoint + "/latest/api/token",
                                 {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}, kTimeoutMs);
  std::vector<std::string> headers;
  if (!tok.answered) return none;
  if (tok.status == 200) {
    headers.push_back("X-aws-ec2-metadata-token: " + trim(tok.body));
  } else if (tok.status != 403 && tok.status != 404 && tok.status != 405) {
    return none;
  }
  const std::string base = endpoint + "/latest/meta-data/iam/security-credentials/";
  HttpResult roles = metadata_http("GET", base, headers, kTimeoutMs);
  if (!roles.answered || roles.status != 200) return none;
  std::string role = trim(roles.body.substr(0, roles.body.find('\n')));
  if (role.empty()) return none;
  HttpResult cr = metadata_http("GET", base + role, headers, kTimeoutMs);
  if (!cr.answered || cr.status != 200) return none;
  return creds_from_json(cr.body, base + role, what, "EC2 instance metadata, role " + role, /*imds=*/true);
#else
  (void)endpoint;
  return none;
#endif
}

// Container credentials, else IMDS, into `out` (left empty when neither has any).
Status metadata_credentials(S3Credentials* out) {
  const std::string rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::string full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  std::string key, url, var;
  if (!rel.empty() || !full.empty()) {  // botocore: the relative URI wins
    var = !rel.empty() ? "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI" : "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    {
      std::lock_guard<std::mutex> lock(g_meta_mu);
      url = !rel.empty() ? "http://" + g_container_host + (starts_with(rel, "/") ? "" : "/") + rel : full;
    }
    if (rel.empty() && !http_host_allowed(full))
      return invalid_argument("s3: AWS_CONTAINER_CREDENTIALS_FULL_URI '" + full +
                              "' is neither https:// nor http:// to a loopback or ECS / EKS agent address");
    key = "container " + url;
  } else {
    std::string disabled = env("AWS_EC2_METADATA_DISABLED");
    for (char& c : disabled) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (disabled == "true") return Status::ok();
    url = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (url.empty()) url = "http://169.254.169.254";
    while (!url.empty() && url.back() == '/') url.pop_back();
    key = "imds " + url;
  }
  std::lock_guard<std::mutex> lock(g_meta_mu);  // one fetch at a time; the others wait for its answer
  CachedCreds& c = g_meta_cache[key];
  if (!still_fresh(c)) {
    Result<CachedCreds> got = var.empty() ? fetch_imds(url) : fetch_container(url, var);
    if (still_valid(c) && (!got.is_ok() || !got->have)) {
      c.retry_after = std::time(nullptr) + 60;  // a failed refresh keeps keys that are still valid
    } else if (got.is_ok()) {
      c = *got;
    } else {
      return got.status();
    }
  }
  if (c.have) *out = c.creds;
  return Status::ok();
}

}  // namespace

void clear_s3_credential_cache() {
  std::lock_guard<std::mutex> lock(g_meta_mu);
  g_meta_cache.clear();
}

void set_container_credentials_host_for_testing(const std::string& host_port) {
  std::lock_guard<std::mutex> lock(g_meta_mu);
  g_container_host = host_port.empty() ? "169.254.170.2" : host_port;
  g_meta_cache.clear();
}

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
  // Then, as botocore's chain, container credentials and instance metadata.
  if (s.creds.access_key_id.empty()) LOOM_RETURN_IF_ERROR(metadata_credentials(&s.creds));
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
