// The remote shard cache (exec/data/remote_cache.h): local paths, whole-object
// fetches against a real S3-compatible server (moto, `python3 -m moto.server`) on
// loopback, and the failures moto does not produce (403, a cut-off body, a wrong
// ETag) from a scripted loopback server. Tests needing moto skip when it is
// missing. Signing and credentials: s3_credentials_test.cc; ranged reads of
// shards still arriving: remote_file_test.cc.
#include <gtest/gtest.h>

#include "tests/support/remote_test_support.h"

namespace loom::data {
namespace {
using namespace remote_test;

TEST_F(RemoteCacheTest, LocalPathsPassThrough) {
  std::string path = dir_ + "/shard.bin";
  std::ofstream(path) << "local";
  auto r = fetch_to_cache(path, opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, path);
  EXPECT_EQ(*fetch_to_cache("file://" + path, opts_), path);
  auto missing = fetch_to_cache(dir_ + "/nope.bin", opts_);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);
  EXPECT_EQ(fetch_to_cache("s3://b/k", opts_, "xyz").status().code(), StatusCode::kInvalidArgument);
}

// ---- against a real S3-compatible server (moto) -------------------------------------

TEST_F(MotoTest, FetchesObjectThenServesFromCacheAfterServerStops) {
  const std::string data = random_bytes(300 * 1024 + 7, 1);
  ASSERT_TRUE(put_to_remote("s3://loom-data/shards/part 0.bin", data, opts_).is_ok());
  const std::string url = "s3://loom-data/shards/part 0.bin";

  auto path = fetch_to_cache(url, opts_, xxh64_hex(data));
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  EXPECT_EQ(*path, cache_path_for(url, opts_.cache_dir));
  EXPECT_TRUE(read_file(*path) == data);  // (no binary dump on failure)
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);

  moto_->stop();
  auto again = fetch_to_cache(url, opts_);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(*again, *path);
  EXPECT_TRUE(read_file(*again) == data);
}

// Listing: past one page of ListObjectsV2 (1000 keys), a folder's direct
// children only, glob patterns per path segment, XML-escaped keys, sorted.
TEST_F(MotoTest, ListsFoldersAndPatternsAcrossPages) {
  for (int i = 0; i < 1003; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "s3://loom-data/many/p%04d.jsonl", i);
    ASSERT_TRUE(put_to_remote(name, "{}", opts_).is_ok()) << name;
  }
  ASSERT_TRUE(put_to_remote("s3://loom-data/many/deeper/x.jsonl", "{}", opts_).is_ok());
  ASSERT_TRUE(put_to_remote("s3://loom-data/many/a&b <c>.parquet", "x", opts_).is_ok());
  auto folder = list_s3_objects("s3://loom-data/many/", opts_);
  ASSERT_TRUE(folder.is_ok()) << folder.status().to_string();
  ASSERT_EQ(folder->size(), 1004u);  // not deeper/x.jsonl
  EXPECT_EQ(folder->front(), "s3://loom-data/many/a&b <c>.parquet");
  EXPECT_EQ((*folder)[1], "s3://loom-data/many/p0000.jsonl");
  EXPECT_EQ(folder->back(), "s3://loom-data/many/p1002.jsonl");
  EXPECT_TRUE(std::is_sorted(folder->begin(), folder->end()));
  auto pattern = list_s3_objects("s3://loom-data/many/p10*.jsonl", opts_);
  ASSERT_TRUE(pattern.is_ok()) << pattern.status().to_string();
  EXPECT_EQ(pattern->size(), 3u);  // p1000..p1002: '*' does not cross '/', so deeper/ is out
  auto all = list_s3_objects("s3://loom-data/many/*", opts_);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->size(), 1004u);
  auto none = list_s3_objects("s3://loom-data/many/*.zst", opts_);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("matches no object"), std::string::npos);
  EXPECT_EQ(list_s3_objects("s3://loom-data/many/p0001.jsonl", opts_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(list_s3_objects("s3://no-such-bucket/x/", opts_).status().code(), StatusCode::kNotFound);
}

TEST_F(MotoTest, MissingObjectIsNotFound) {
  auto r = fetch_to_cache("s3://loom-data/no/such.bin", opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().to_string();
  EXPECT_NE(r.status().message().find("no/such.bin"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(cache_path_for("s3://loom-data/no/such.bin", opts_.cache_dir)));
}

TEST_F(MotoTest, ChecksumMismatchPublishesNothing) {
  ASSERT_TRUE(put_to_remote("s3://loom-data/a.bin", "abcdef", opts_).is_ok());
  auto r = fetch_to_cache("s3://loom-data/a.bin", opts_, "0123456789abcdef");
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(cache_path_for("s3://loom-data/a.bin", opts_.cache_dir)));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);
}

// A dataset re-published at the same URLs with a new manifest: the manifest's
// new checksum fetches the new object instead of serving the cached old one,
// and a copy cached before checksums were recorded is hashed, not trusted.
TEST_F(MotoTest, ACachedCopyOfAnotherVersionIsFetchedAgain) {
  const std::string url = "s3://loom-data/republished/part.bin";
  const std::string v1 = random_bytes(200 * 1024, 31), v2 = random_bytes(200 * 1024, 32);
  ASSERT_TRUE(put_to_remote(url, v1, opts_).is_ok());
  auto a = fetch_to_cache(url, opts_, xxh64_hex(v1));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_TRUE(read_file(*a) == v1);
  ASSERT_TRUE(put_to_remote(url, v2, opts_).is_ok());
  EXPECT_TRUE(read_file(*fetch_to_cache(url, opts_, xxh64_hex(v1))) == v1);  // still the one asked for
  auto b = fetch_to_cache(url, opts_, xxh64_hex(v2));
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(*b, *a);
  EXPECT_TRUE(read_file(*b) == v2) << "served the cached old version";
  // No checksum record (an older cache): the copy is hashed against the ask.
  fs::remove(*b + ".xxh64");
  EXPECT_TRUE(cached_copy_is(*b, xxh64_hex(v2)));
  EXPECT_FALSE(cached_copy_is(*b, xxh64_hex(v1)));
  EXPECT_TRUE(cached_copy_is(*b, ""));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);
}

// A manifest (no checksum pins it) is refreshed on each fetch, and the cached
// copy serves when the server is gone.
TEST_F(MotoTest, ARefreshFetchesAgainAndFallsBackToTheCopy) {
  const std::string url = "s3://loom-data/republished/data.manifest.json";
  ASSERT_TRUE(put_to_remote(url, "{\"v\": 1}", opts_).is_ok());
  RemoteCacheOptions ro = opts_;
  ro.refresh = true;
  auto a = fetch_to_cache(url, ro);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(read_file(*a), "{\"v\": 1}");
  ASSERT_TRUE(put_to_remote(url, "{\"v\": 2}", opts_).is_ok());
  EXPECT_EQ(read_file(*fetch_to_cache(url, opts_)), "{\"v\": 1}");  // without refresh: the copy
  auto b = fetch_to_cache(url, ro);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(read_file(*b), "{\"v\": 2}");
  moto_->stop();
  ro.retries = 0;
  std::string said;
  ro.notice = [&](const std::string& m) { said = m; };
  auto c = fetch_to_cache(url, ro);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(read_file(*c), "{\"v\": 2}");
  EXPECT_NE(said.find("using the copy cached"), std::string::npos) << said;
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);
}

TEST_F(MotoTest, ConcurrentFetchesAllGetTheCompleteFile) {
  const std::string data = random_bytes(4 * 1024 * 1024, 2);
  ASSERT_TRUE(put_to_remote("s3://loom-data/big.bin", data, opts_).is_ok());
  constexpr int kThreads = 4;
  std::vector<Result<std::string>> results(kThreads, Result<std::string>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = fetch_to_cache("s3://loom-data/big.bin", opts_); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, *results[0]);
    EXPECT_TRUE(read_file(*r) == data);  // each caller sees the whole object, never a partial file
  }
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);
}

// With auth enforced, moto recomputes every SigV4 signature itself: an
// independent check of libcurl's signing as loom drives it, on PUT (payload
// hash), GET (encoded and unicode keys), ranged GET, and credentials from a
// profile. (moto checks no session tokens: its STS keys are unknown to its
// IAM; CurlSignerTest checks that the token is sent and signed.)
TEST_F(RemoteCacheTest, MotoAcceptsOurSignaturesAndRejectsAWrongSecret) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  if (!have_moto()) GTEST_SKIP() << "moto not installed: python3 -m pip install 'moto[server]'";
  MotoServer moto(/*no_auth_actions=*/3);  // the three IAM calls below
  ASSERT_TRUE(moto.up()) << "moto server did not start on port " << moto.port();
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(moto.port());
  // An IAM user allowed s3:*, and its access key.
  const std::string keys = run_capture(
      "python3 -c \"import boto3, json, sys\n"
      "iam = boto3.client('iam', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id='x', "
      "aws_secret_access_key='x')\n"
      "iam.create_user(UserName='loom')\n"
      "iam.put_user_policy(UserName='loom', PolicyName='s3', PolicyDocument=json.dumps({'Version': '2012-10-17', "
      "'Statement': [{'Effect': 'Allow', 'Action': 's3:*', 'Resource': '*'}]}))\n"
      "k = iam.create_access_key(UserName='loom')['AccessKey']\n"
      "print(k['AccessKeyId'], k['SecretAccessKey'])\" " +
      endpoint + " 2>/dev/null");
  std::istringstream in(keys);
  std::string key_id, secret;
  in >> key_id >> secret;
  ASSERT_FALSE(secret.empty()) << "could not create an IAM access key in moto";
  use_endpoint(moto.port());
  ::setenv("AWS_ACCESS_KEY_ID", key_id.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);

  const std::string data = random_bytes(70000, 4);
  Status st = put_to_remote("s3://signed/", "", opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  st = put_to_remote("s3://signed/dir/a b.bin", data, opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  auto r = fetch_to_cache("s3://signed/dir/a b.bin", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(read_file(*r) == data);
  // Ranged GETs (the Range header is signed too). (No '+' and no unicode in
  // keys here: moto 5 refuses boto3's own signatures for them; the botocore
  // referee of CurlSignerTest covers those keys.)
  const std::string ukey = "s3://signed/d i r/x~y_z-0.bin";
  st = put_to_remote(ukey, data, opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::string part;
  int64_t size = 0;
  st = fetch_range(ukey, 1000, 5000, opts_, &part, &size);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(size, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(part == data.substr(1000, 5000));

  // The same key from a profile of a credentials file (no keys in the environment).
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  std::ofstream(dir_ + "/credentials") << "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n"
                                       << "[loom]\naws_access_key_id = " << key_id
                                       << "\naws_secret_access_key = " << secret << "\n";
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ + "/credentials").c_str(), 1);
  ::setenv("AWS_PROFILE", "loom", 1);
  st = fetch_range(ukey, 0, 10, opts_, &part);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_TRUE(part == data.substr(0, 10));
  ::unsetenv("AWS_PROFILE");  // the default profile's keys are wrong
  auto wrong = fetch_range(ukey, 0, 10, opts_, &part);
  EXPECT_EQ(wrong.code(), StatusCode::kRemoteError) << wrong.to_string();
  EXPECT_NE(wrong.message().find("profile 'default'"), std::string::npos) << wrong.message();
  ::setenv("AWS_ACCESS_KEY_ID", key_id.c_str(), 1);

  ::setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  auto bad = fetch_to_cache("s3://signed/other.bin", opts_);
  EXPECT_EQ(bad.status().code(), StatusCode::kRemoteError) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("unauthorized"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("SignatureDoesNotMatch"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
}

// ---- failures from a scripted loopback server ------------------------------------

TEST_F(RemoteCacheTest, ForbiddenIsUnauthorizedAndRequestIsSigned) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  FakeHttpServer server([](const std::string&) {
    return http_response("403 Forbidden", "Content-Type: application/xml\r\n",
                         "<Error><Code>SignatureDoesNotMatch</Code></Error>");
  });
  use_endpoint(server.port());
  auto r = fetch_to_cache("s3://bucket/data/x.bin", opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kRemoteError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("unauthorized"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
  EXPECT_NE(r.status().message().find("SignatureDoesNotMatch"), std::string::npos);
  EXPECT_EQ(server.requests(), 1);  // not retried
  const std::string req = server.last_request();
  EXPECT_EQ(req.rfind("GET /bucket/data/x.bin HTTP/1.1\r\n", 0), 0u) << req;  // path-style addressing
  EXPECT_NE(req.find("Authorization: AWS4-HMAC-SHA256 Credential=AKIDLOOMTEST/"), std::string::npos) << req;
  EXPECT_NE(req.find("/us-east-1/s3/aws4_request"), std::string::npos) << req;
  EXPECT_FALSE(fs::exists(cache_path_for("s3://bucket/data/x.bin", opts_.cache_dir)));
}

TEST_F(RemoteCacheTest, UnreachableHostNamesTheUrl) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  const std::string url = "http://127.0.0.1:" + std::to_string(free_port()) + "/shard.bin";
  auto r = fetch_to_cache(url, opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("cannot reach " + url), std::string::npos) << r.status().message();
}

TEST_F(RemoteCacheTest, InterruptedDownloadPublishesNothingAndStaleTempIsIgnored) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  const std::string body = random_bytes(1000, 3);
  // Promises 1000 bytes, sends 100, closes.
  FakeHttpServer server([&](const std::string&) {
    return "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n" + body.substr(0, 100);
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/shards/s.bin";
  const std::string final_path = cache_path_for(url, opts_.cache_dir);
  // A temp file from an earlier download that died half-way.
  fs::create_directories(opts_.cache_dir);
  std::ofstream(final_path + ".tmp.99999.0") << body.substr(0, 500);

  auto r = fetch_to_cache(url, opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("interrupted"), std::string::npos) << r.status().message();
  EXPECT_EQ(server.requests(), 1 + opts_.retries);  // a cut-off transfer is retried
  EXPECT_FALSE(fs::exists(final_path));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);

  server.set_respond([&](const std::string&) { return http_response("200 OK", "", body); });
  std::ofstream(final_path + ".tmp.99999.1") << body.substr(0, 500);
  auto ok = fetch_to_cache(url, opts_);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(read_file(*ok) == body);
}

TEST_F(RemoteCacheTest, S3EtagIsCheckedAgainstMd5) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  std::string etag = "\"00000000000000000000000000000000\"";
  FakeHttpServer server([&](const std::string&) { return http_response("200 OK", "ETag: " + etag + "\r\n", "hello world"); });
  use_endpoint(server.port());
  opts_.retries = 0;
  auto bad = fetch_to_cache("s3://bucket/h.txt", opts_);
  EXPECT_EQ(bad.status().code(), StatusCode::kIoError) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("ETag"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(fs::exists(cache_path_for("s3://bucket/h.txt", opts_.cache_dir)));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);

  etag = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"";  // MD5("hello world")
  auto good = fetch_to_cache("s3://bucket/h.txt", opts_);
  ASSERT_TRUE(good.is_ok()) << good.status().to_string();
  EXPECT_EQ(read_file(*good), "hello world");
}


}  // namespace
}  // namespace loom::data
