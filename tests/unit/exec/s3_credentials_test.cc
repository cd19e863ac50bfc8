// S3 configuration, credentials and SigV4 signing (exec/data/s3_config.h).
//
// Truths: AWS's published SigV4 examples (S3 API reference, "Signature
// Calculations for the Authorization Header"), botocore's signer where it is
// installed, the AWS CLI's credential precedence, and scripted IMDSv2 and
// container-credential endpoints on loopback.
#include <gtest/gtest.h>

#include "tests/support/remote_test_support.h"

namespace loom::data {
namespace {
using namespace remote_test;

// ---- configuration: credentials, endpoints, addressing ------------------------------

S3Options s3o(const std::string& endpoint, const std::string& addressing = "", const std::string& profile = "") {
  S3Options o;
  o.endpoint = endpoint;
  o.addressing = addressing;
  o.profile = profile;
  return o;
}

class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom_s3_config_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
    isolate_aws_env(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
    isolate_aws_env(dir_);
  }
  void write(const std::string& name, const std::string& text, const char* env_var) {
    std::ofstream(dir_ + "/" + name) << text;
    ::setenv(env_var, (dir_ + "/" + name).c_str(), 1);
  }
  std::string url(const std::string& bucket, const std::string& key, S3Options o = {}) {
    auto s = resolve_s3_settings(o);
    if (!s.is_ok()) return "ERROR " + s.status().to_string();
    auto a = s3_address(bucket, key, *s);
    return a.is_ok() ? a->url : "ERROR " + a.status().to_string();
  }
  std::string dir_;
};

TEST_F(S3ConfigTest, UrlsForAwsOssMinioAndMoto) {
  // AWS: virtual-hosted by default, in the region; path-style for a bucket no
  // DNS label can name or (TLS) one with dots. boto3 1.43 gives the same URLs.
  ::setenv("AWS_REGION", "us-west-2", 1);
  EXPECT_EQ(url("mybucket", "dir/a b+c.bin"), "https://mybucket.s3.us-west-2.amazonaws.com/dir/a%20b%2Bc.bin");
  EXPECT_EQ(url("my.bucket", "k"), "https://s3.us-west-2.amazonaws.com/my.bucket/k");
  EXPECT_EQ(url("My_Bucket", "k"), "https://s3.us-west-2.amazonaws.com/My_Bucket/k");
  EXPECT_EQ(url("mybucket", "k", s3o("", "path")), "https://s3.us-west-2.amazonaws.com/mybucket/k");
  EXPECT_EQ(url("mybucket", "\xe2\x9c\x93/x~y"), "https://mybucket.s3.us-west-2.amazonaws.com/%E2%9C%93/x~y");
  // Alibaba OSS: virtual-hosted only (it refuses path-style), so addressing must
  // say so, as with boto3 (a custom endpoint is path-style by default).
  S3Options oss = s3o("https://oss-cn-hangzhou.aliyuncs.com");
  EXPECT_EQ(url("mybucket", "k", oss), "https://oss-cn-hangzhou.aliyuncs.com/mybucket/k");
  oss.addressing = "virtual";
  EXPECT_EQ(url("mybucket", "d/k", oss), "https://mybucket.oss-cn-hangzhou.aliyuncs.com/d/k");
  ::setenv("LOOM_S3_ADDRESSING", "virtual", 1);
  EXPECT_EQ(url("mybucket", "k", s3o("https://oss-cn-hangzhou.aliyuncs.com")),
            "https://mybucket.oss-cn-hangzhou.aliyuncs.com/k");
  ::unsetenv("LOOM_S3_ADDRESSING");
  // MinIO (path-style, its default), with a default port dropped and a path prefix kept.
  EXPECT_EQ(url("data", "k", s3o("http://minio.example.com:9000")), "http://minio.example.com:9000/data/k");
  EXPECT_EQ(url("data", "k", s3o("https://minio.example.com:443/s3/")), "https://minio.example.com/s3/data/k");
  // moto on loopback; AWS_ENDPOINT_URL_S3 beats AWS_ENDPOINT_URL, --endpoint beats both.
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000", 1);
  EXPECT_EQ(url("b", "k"), "http://127.0.0.1:5000/b/k");
  ::setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5001", 1);
  EXPECT_EQ(url("b", "k"), "http://127.0.0.1:5001/b/k");
  EXPECT_EQ(url("b", "k", s3o("http://127.0.0.1:5002")), "http://127.0.0.1:5002/b/k");
  EXPECT_NE(url("b", "k", s3o("minio:9000")).find("not http(s)://"), std::string::npos);
  EXPECT_NE(url("b", "k", s3o("", "dns")).find("not auto, virtual or path"), std::string::npos);
  EXPECT_EQ(s3_query({{"prefix", "a b/c"}, {"max-keys", "2"}, {"list-type", "2"}}),
            "list-type=2&max-keys=2&prefix=a%20b%2Fc");
}

TEST_F(S3ConfigTest, CredentialPrecedenceFollowsTheAwsCli) {
  // No credentials anywhere: anonymous.
  auto none = resolve_s3_settings({});
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_TRUE(none->creds.access_key_id.empty());
  EXPECT_EQ(none->region, "us-east-1");

  write("credentials",
        "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = sdefault\n"
        "[train] # a comment\naws_access_key_id=AKTRAIN\naws_secret_access_key=strain\naws_session_token = TOKTRAIN\n",
        "AWS_SHARED_CREDENTIALS_FILE");
  write("config",
        "[default]\nregion = eu-west-1\n"
        "[profile train]\nregion = cn-hangzhou\nendpoint_url = https://oss-cn-hangzhou.aliyuncs.com\n"
        "s3 =\n  addressing_style = virtual\n"
        "[profile minio]\naws_access_key_id = AKMINIO\naws_secret_access_key = sminio\nservices = local\n"
        "[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n"
        "[profile sso]\nsso_session = corp\n",
        "AWS_CONFIG_FILE");
  auto def = resolve_s3_settings({});
  ASSERT_TRUE(def.is_ok()) << def.status().to_string();
  EXPECT_EQ(def->creds.access_key_id, "AKDEFAULT");
  EXPECT_EQ(def->region, "eu-west-1");
  EXPECT_NE(def->creds.source.find("'default'"), std::string::npos) << def->creds.source;

  ::setenv("AWS_PROFILE", "train", 1);
  auto train = resolve_s3_settings({});
  ASSERT_TRUE(train.is_ok()) << train.status().to_string();
  EXPECT_EQ(train->creds.access_key_id, "AKTRAIN");
  EXPECT_EQ(train->creds.session_token, "TOKTRAIN");
  EXPECT_EQ(train->region, "cn-hangzhou");
  EXPECT_EQ(url("bkt", "k"), "https://bkt.oss-cn-hangzhou.aliyuncs.com/k");

  // Keys in the environment beat AWS_PROFILE's (as botocore's chain), but the
  // profile's region and endpoint still apply.
  ::setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
  auto env = resolve_s3_settings({});
  ASSERT_TRUE(env.is_ok());
  EXPECT_EQ(env->creds.access_key_id, "AKENV");
  EXPECT_TRUE(env->creds.session_token.empty());
  EXPECT_EQ(env->region, "cn-hangzhou");
  // An explicit profile (boto3's Session(profile_name=)) beats the environment.
  auto explicit_profile = resolve_s3_settings(s3o("", "", "minio"));
  ASSERT_TRUE(explicit_profile.is_ok()) << explicit_profile.status().to_string();
  EXPECT_EQ(explicit_profile->creds.access_key_id, "AKMINIO");  // from the config file
  EXPECT_EQ(url("b", "k", s3o("", "", "minio")), "http://127.0.0.1:9000/b/k");  // [services local]
  ::setenv("AWS_REGION", "ap-south-1", 1);
  EXPECT_EQ(resolve_s3_settings({})->region, "ap-south-1");

  // Half a key pair, a profile that is nowhere, one loom cannot use: errors.
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_EQ(resolve_s3_settings({}).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::setenv("AWS_PROFILE", "nope", 1);
  auto missing = resolve_s3_settings({});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos) << missing.status().message();
  EXPECT_EQ(resolve_s3_settings(s3o("", "", "sso")).status().code(), StatusCode::kUnsupported);
}

// ---- container credentials and EC2 instance metadata (IMDSv2) ----------------------

std::string request_line(const std::string& req) { return req.substr(0, req.find("\r\n")); }
std::string lower_copy(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string iso8601_in(int seconds) {
  std::time_t t = std::time(nullptr) + seconds;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
std::string creds_json(const std::string& key, const std::string& token, int expires_in_s,
                       const std::string& code = "Success") {
  return "{\n  \"Code\" : \"" + code + "\",\n  \"LastUpdated\" : \"2026-01-01T00:00:00Z\",\n  \"Type\" : "
         "\"AWS-HMAC\",\n  \"AccessKeyId\" : \"" + key + "\",\n  \"SecretAccessKey\" : \"s\\/ecret\",\n"
         "  \"Token\" : \"" + token + "\",\n  \"Expiration\" : \"" + iso8601_in(expires_in_s) + "\"\n}";
}

// An IMDSv2 responder: a token for a PUT with the TTL header, the role and its
// keys for GETs that carry that token, 401 for GETs without it.
class FakeImds {
 public:
  FakeImds()
      : server_([this](const std::string& req) { return respond(req); }) {}
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  int requests() const { return server_.requests(); }
  void set_creds_json(const std::string& j) {
    std::lock_guard<std::mutex> lock(mu_);
    json_ = j;
  }

 private:
  std::string respond(const std::string& req) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string line = request_line(req), low = lower_copy(req);
    log_.push_back(line);
    if (line.rfind("PUT /latest/api/token ", 0) == 0) {
      if (low.find("\r\nx-aws-ec2-metadata-token-ttl-seconds: 21600\r\n") == std::string::npos)
        return http_response("400 Bad Request", "", "");
      return http_response("200 OK", "", "IMDSTOKEN-1");
    }
    if (low.find("\r\nx-aws-ec2-metadata-token: imdstoken-1\r\n") == std::string::npos)
      return http_response("401 Unauthorized", "", "");
    if (line.rfind("GET /latest/meta-data/iam/security-credentials/ ", 0) == 0)
      return http_response("200 OK", "", "loom-role\n");
    if (line.rfind("GET /latest/meta-data/iam/security-credentials/loom-role ", 0) == 0)
      return http_response("200 OK", "", json_);
    return http_response("404 Not Found", "", "");
  }
  std::mutex mu_;
  std::vector<std::string> log_;
  std::string json_ = creds_json("ASIAIMDSKEY", "IMDS-SESSION-TOKEN", 6 * 3600);
  FakeHttpServer server_;  // last: stopped first
};

class MetadataCredsTest : public S3ConfigTest {
 protected:
  void SetUp() override {
    S3ConfigTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
    ::unsetenv("AWS_EC2_METADATA_DISABLED");
    // Nothing answers here unless a test says so (never the real 169.254.169.254).
    ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ("http://127.0.0.1:" + std::to_string(free_port())).c_str(), 1);
  }
};

TEST_F(MetadataCredsTest, Imdsv2TokenRoleAndKeysAreFetchedOnceAndSignRequests) {
  FakeImds imds;
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", (imds.endpoint() + "/").c_str(), 1);
  auto s = resolve_s3_settings({});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->creds.access_key_id, "ASIAIMDSKEY");
  EXPECT_EQ(s->creds.secret_access_key, "s/ecret");
  EXPECT_EQ(s->creds.session_token, "IMDS-SESSION-TOKEN");
  EXPECT_EQ(s->creds.source, "EC2 instance metadata, role loom-role");
  const std::vector<std::string> want = {"PUT /latest/api/token HTTP/1.1",
                                         "GET /latest/meta-data/iam/security-credentials/ HTTP/1.1",
                                         "GET /latest/meta-data/iam/security-credentials/loom-role HTTP/1.1"};
  EXPECT_EQ(imds.log(), want);
  // Cached for the process: no second round trip.
  ASSERT_TRUE(resolve_s3_settings({}).is_ok());
  EXPECT_EQ(imds.requests(), 3);

  // A request to S3 is signed with those keys and carries the session token.
  FakeHttpServer s3([](const std::string&) { return http_response("200 OK", "ETag: \"x\"\r\n", ""); });
  ::setenv("AWS_ENDPOINT_URL", ("http://127.0.0.1:" + std::to_string(s3.port())).c_str(), 1);
  RemoteCacheOptions o;
  o.retries = 0;
  o.timeout_s = 10;
  Status put = put_to_remote("s3://bucket/key", "data", o);
  ::unsetenv("AWS_ENDPOINT_URL");
  ASSERT_TRUE(put.is_ok()) << put.to_string();
  const std::string req = s3.last_request();
  EXPECT_NE(req.find("Credential=ASIAIMDSKEY/"), std::string::npos) << req;
  EXPECT_NE(lower_copy(req).find("x-amz-security-token: imds-session-token"), std::string::npos) << req;
  EXPECT_EQ(imds.requests(), 3);
}

TEST_F(MetadataCredsTest, ImdsKeysCloseToExpirationAreFetchedAgain) {
  FakeImds imds;
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint().c_str(), 1);
  imds.set_creds_json(creds_json("ASIAOLD", "T1", 120));  // within 5 minutes of Expiration
  ASSERT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIAOLD");
  imds.set_creds_json(creds_json("ASIANEW", "T2", 6 * 3600));
  auto s = resolve_s3_settings({});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->creds.access_key_id, "ASIANEW");
  EXPECT_EQ(imds.requests(), 6);
  ASSERT_TRUE(resolve_s3_settings({}).is_ok());
  EXPECT_EQ(imds.requests(), 6);  // fresh now: cached

  // A bad answer is a clear error naming the URL and how to turn IMDS off.
  clear_s3_credential_cache();
  imds.set_creds_json("{\"Code\": \"Success\", \"AccessKeyId\": ");
  auto bad = resolve_s3_settings({});
  ASSERT_EQ(bad.status().code(), StatusCode::kParseError);
  EXPECT_NE(bad.status().message().find(imds.endpoint() + "/latest/meta-data/iam/security-credentials/loom-role"),
            std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("AWS_EC2_METADATA_DISABLED"), std::string::npos);
  clear_s3_credential_cache();
  imds.set_creds_json(creds_json("ASIAX", "T", 3600, "AssumeRoleUnauthorizedAccess"));
  auto code = resolve_s3_settings({});
  ASSERT_EQ(code.status().code(), StatusCode::kParseError);
  EXPECT_NE(code.status().message().find("AssumeRoleUnauthorizedAccess"), std::string::npos);

  // A refresh that fails keeps keys that have not expired yet (tried again a minute later).
  clear_s3_credential_cache();
  imds.set_creds_json(creds_json("ASIASTILLVALID", "T", 120));
  ASSERT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIASTILLVALID");
  const int before = imds.requests();
  imds.set_creds_json("not json");
  auto kept = resolve_s3_settings({});
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  EXPECT_EQ(kept->creds.access_key_id, "ASIASTILLVALID");
  EXPECT_EQ(imds.requests(), before + 3);
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIASTILLVALID");
  EXPECT_EQ(imds.requests(), before + 3);
}

TEST_F(MetadataCredsTest, EnvironmentAndProfilesBeatImdsWhichIsNotEvenAsked) {
  FakeImds imds;
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint().c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
  auto env = resolve_s3_settings({});
  ASSERT_TRUE(env.is_ok());
  EXPECT_EQ(env->creds.access_key_id, "AKENV");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  write("credentials", "[default]\naws_access_key_id = AKPROFILE\naws_secret_access_key = sp\n",
        "AWS_SHARED_CREDENTIALS_FILE");
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "AKPROFILE");
  EXPECT_EQ(imds.requests(), 0);

  // AWS_EC2_METADATA_DISABLED=true: anonymous, IMDS untouched.
  write("credentials", "", "AWS_SHARED_CREDENTIALS_FILE");
  ::setenv("AWS_EC2_METADATA_DISABLED", "True", 1);
  auto off = resolve_s3_settings({});
  ASSERT_TRUE(off.is_ok());
  EXPECT_TRUE(off->creds.access_key_id.empty());
  EXPECT_EQ(imds.requests(), 0);
  ::unsetenv("AWS_EC2_METADATA_DISABLED");
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIAIMDSKEY");
  EXPECT_EQ(imds.requests(), 3);
}

TEST_F(MetadataCredsTest, SilentImdsFallsThroughToAnonymousQuicklyOncePerProcess) {
  // Accepts connections (the kernel's backlog) and never answers.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port))).c_str(),
           1);
  auto t0 = std::chrono::steady_clock::now();
  auto s = resolve_s3_settings({});
  auto first = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_TRUE(s->creds.access_key_id.empty());
  EXPECT_EQ(s->creds.source, "none (anonymous requests)");
  EXPECT_GE(first, milliseconds(900));
  EXPECT_LT(first, milliseconds(2500));
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(resolve_s3_settings({}).is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(200));  // "none" is cached
  ::close(fd);
  // Nothing listening at all (connection refused): anonymous at once.
  clear_s3_credential_cache();
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(resolve_s3_settings({})->creds.access_key_id.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1500));
}

TEST_F(MetadataCredsTest, ContainerRelativeAndFullUriWithAuthorizationToken) {
  FakeImds imds;  // container credentials come first: IMDS is never asked
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint().c_str(), 1);
  std::mutex mu;
  std::vector<std::string> seen;
  FakeHttpServer agent([&](const std::string& req) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(request_line(req));
    const std::string low = lower_copy(req);
    const size_t a = low.find("\r\nauthorization: ");
    const std::string auth = a == std::string::npos ? "" : req.substr(a + 17, req.find("\r\n", a + 2) - a - 17);
    if (request_line(req).rfind("GET /v2/credentials/abc ", 0) == 0 && auth.empty())
      return http_response("200 OK", "", creds_json("ASIARELATIVE", "TREL", 3600));
    if (request_line(req).rfind("GET /full ", 0) == 0 && (auth == "file-token" || auth == "env-token"))
      return http_response("200 OK", "", creds_json("ASIAFULL-" + auth, "TFULL", 3600));
    if (request_line(req).rfind("GET /bad ", 0) == 0) return http_response("200 OK", "", "<html>not json</html>");
    return http_response("403 Forbidden", "", "{\"message\": \"bad token\"}");
  });
  const std::string base = "http://127.0.0.1:" + std::to_string(agent.port());

  set_container_credentials_host_for_testing("127.0.0.1:" + std::to_string(agent.port()));
  ::setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc", 1);
  auto rel = resolve_s3_settings({});
  ASSERT_TRUE(rel.is_ok()) << rel.status().to_string();
  EXPECT_EQ(rel->creds.access_key_id, "ASIARELATIVE");
  EXPECT_EQ(rel->creds.session_token, "TREL");
  EXPECT_EQ(rel->creds.source, "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)");
  ::unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");

  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", (base + "/full").c_str(), 1);
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "env-token", 1);
  auto full = resolve_s3_settings({});
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  EXPECT_EQ(full->creds.access_key_id, "ASIAFULL-env-token");
  EXPECT_EQ(full->creds.source, "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI)");
  // The token file (EKS Pod Identity) beats the variable.
  clear_s3_credential_cache();
  std::ofstream(dir_ + "/token") << "file-token\n";
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (dir_ + "/token").c_str(), 1);
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIAFULL-file-token");
  // A wrong token: the agent's 403, naming the URL and the variable.
  clear_s3_credential_cache();
  std::ofstream(dir_ + "/token") << "wrong";
  auto denied = resolve_s3_settings({});
  ASSERT_EQ(denied.status().code(), StatusCode::kIoError);
  EXPECT_NE(denied.status().message().find(base + "/full"), std::string::npos) << denied.status().message();
  EXPECT_NE(denied.status().message().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos);
  EXPECT_NE(denied.status().message().find("403"), std::string::npos);
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (dir_ + "/missing-token").c_str(), 1);
  auto no_file = resolve_s3_settings({});
  ASSERT_EQ(no_file.status().code(), StatusCode::kIoError);
  EXPECT_NE(no_file.status().message().find("missing-token"), std::string::npos);
  ::unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  ::unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");

  // Malformed JSON, an agent that is not there, a plain-http host that is no agent.
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", (base + "/bad").c_str(), 1);
  auto bad = resolve_s3_settings({});
  ASSERT_EQ(bad.status().code(), StatusCode::kParseError);
  EXPECT_NE(bad.status().message().find(base + "/bad"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos);
  const std::string gone = "http://127.0.0.1:" + std::to_string(free_port()) + "/creds";
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", gone.c_str(), 1);
  auto down = resolve_s3_settings({});
  ASSERT_EQ(down.status().code(), StatusCode::kIoError);
  EXPECT_NE(down.status().message().find(gone), std::string::npos) << down.status().message();
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds", 1);
  EXPECT_EQ(resolve_s3_settings({}).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  EXPECT_EQ(imds.requests(), 0);
  EXPECT_EQ(seen.size(), 5u);
}

// ---- libcurl's SigV4 signer, case by case -------------------------------------------

// AWS's published SigV4 examples (S3 API reference, "Signature Calculations
// for the Authorization Header"), sent through loom's request path (curl
// signs; the date is fixed with an x-amz-date header, the example host routed
// to a loopback server with CONNECT_TO).
class CurlSignerTest : public RemoteCacheTest {
 protected:
  void SetUp() override {
    RemoteCacheTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  }
  // The Signature= of the request that `send` makes to the capture server.
  std::string signature_of(const std::string& req) {
    size_t p = req.find("Signature=");
    return p == std::string::npos ? "" : req.substr(p + 10, 64);
  }
};

TEST_F(CurlSignerTest, ReproducesAwsPublishedExamples) {
  FakeHttpServer server([](const std::string&) { return http_response("200 OK", "", "ok"); });
  ::setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", 1);
  opts_.s3.endpoint = "http://s3.amazonaws.com";
  opts_.s3.addressing = "virtual";
  opts_.connect_to = {"examplebucket.s3.amazonaws.com:80:127.0.0.1:" + std::to_string(server.port())};
  const std::string date = "x-amz-date: 20130524T000000Z";

  // GET Object with a Range header.
  auto r = s3_call("GET", "s3://examplebucket/test.txt", "", {"Range: bytes=0-9", date}, "", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(signature_of(server.last_request()), "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
      << server.last_request();
  EXPECT_NE(server.last_request().find("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"), std::string::npos);

  // PUT Object: the payload's hash, a Date and an x-amz-storage-class header.
  r = s3_call("PUT", "s3://examplebucket/test$file.text", "",
              {"Date: Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class: REDUCED_REDUNDANCY", date},
              "Welcome to Amazon S3.", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(signature_of(server.last_request()), "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
      << server.last_request();

  // GET Bucket (ListObjects) with a query: right when the query comes sorted
  // (s3_query); curl 7.88 signs the query exactly as the URL has it, so an
  // unsorted one gets another signature, which S3 would refuse.
  const std::string sorted = s3_query({{"prefix", "J"}, {"max-keys", "2"}});
  EXPECT_EQ(sorted, "max-keys=2&prefix=J");
  r = s3_call("GET", "s3://examplebucket/", sorted, {date}, "", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(signature_of(server.last_request()), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
      << server.last_request();
  r = s3_call("GET", "s3://examplebucket/", "prefix=J&max-keys=2", {date}, "", opts_);
  ASSERT_TRUE(r.is_ok());
  EXPECT_NE(signature_of(server.last_request()), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// botocore (boto3's signer) as an independent referee: it recomputes the
// signature of each request curl sent, from the request as it arrived.
const char* kBotocoreReferee = R"PY(
import hashlib, sys
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
raw = open(sys.argv[1], 'rb').read()
head, _, body = raw.partition(b'\r\n\r\n')
lines = head.decode('latin-1').split('\r\n')
method, target, _ = lines[0].split(' ')
hdrs = {}
for l in lines[1:]:
    k, _, v = l.partition(':')
    hdrs[k.strip().lower()] = v.strip()
auth = hdrs['authorization'][len('AWS4-HMAC-SHA256 '):]
parts = dict(p.strip().split('=', 1) for p in auth.split(','))
ak, date, region, service, _ = parts['Credential'].split('/')
signed = parts['SignedHeaders'].split(';')
req = AWSRequest(method=method, url='http://' + hdrs['host'] + target, data=body,
                 headers={h: hdrs.get(h, '') for h in signed})
req.context['timestamp'] = hdrs['x-amz-date']
a = S3SigV4Auth(Credentials(ak, sys.argv[2], hdrs.get('x-amz-security-token')), 's3', region)
sig = a.signature(a.string_to_sign(req, a.canonical_request(req)), req)
print('signature', 'ok' if sig == parts['Signature'] else 'MISMATCH',
      'payload', 'ok' if hdrs.get('x-amz-content-sha256') == hashlib.sha256(body).hexdigest() else 'MISMATCH',
      'token', hdrs.get('x-amz-security-token', '-') if 'x-amz-security-token' in signed else 'unsigned')
)PY";

TEST_F(CurlSignerTest, BotocoreAgreesWithEachCase) {
  if (std::system("python3 -c 'import botocore' >/dev/null 2>&1") != 0) GTEST_SKIP() << "botocore not installed";
  FakeHttpServer server([](const std::string&) { return http_response("200 OK", "", "ok"); });
  use_endpoint(server.port());
  const std::string script = dir_ + "/referee.py", captured = dir_ + "/request";
  std::ofstream(script) << kBotocoreReferee;
  auto referee = [&]() {
    std::ofstream(captured, std::ios::binary) << server.last_request();
    return run_capture("python3 " + script + " " + captured + " loom-test-secret 2>&1");
  };
  struct Case {
    std::string name, method, url, query;
    std::vector<std::string> headers;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"plain GET", "GET", "s3://bucket/shards/x_00000.bin", "", {}, ""},
      {"key with spaces, '+', '=' and unicode", "GET", "s3://bucket/dir/a b+c=d \xc3\xa9\xe2\x9c\x93.bin", "", {}, ""},
      {"key with './' and '../'", "GET", "s3://bucket/a/./b/../c", "", {}, ""},
      {"query string", "GET", "s3://bucket/", s3_query({{"prefix", "a b"}, {"list-type", "2"}}), {}, ""},
      {"ranged GET", "GET", "s3://bucket/k.bin", "", {"Range: bytes=8388608-16777215"}, ""},
      {"PUT with a binary body", "PUT", "s3://bucket/up.bin", "", {"Content-Type: application/octet-stream"},
       random_bytes(70000, 9)},
      {"session token", "GET", "s3://bucket/k.bin", "", {}, ""},
  };
  for (const Case& c : cases) {
    if (c.name == "session token") ::setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzE//token+with/slashes==", 1);
    auto r = s3_call(c.method, c.url, c.query, c.headers, c.body, opts_);
    ASSERT_TRUE(r.is_ok()) << c.name << ": " << r.status().to_string();
    const std::string verdict = referee();
    EXPECT_NE(verdict.find("signature ok payload ok"), std::string::npos) << c.name << ": " << verdict;
    if (c.name == "session token") {
      EXPECT_NE(verdict.find("token FwoGZXIvYXdzE//token+with/slashes=="), std::string::npos) << verdict;
    }
  }
  // What the referee catches: a signature made with another secret.
  ::setenv("AWS_SECRET_ACCESS_KEY", "another-secret", 1);
  ASSERT_TRUE(s3_call("GET", "s3://bucket/k.bin", "", {}, "", opts_).is_ok());
  EXPECT_NE(referee().find("signature MISMATCH"), std::string::npos);
}

}  // namespace
}  // namespace loom::data
