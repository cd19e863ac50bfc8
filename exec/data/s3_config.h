// Where an s3:// URL goes and with which credentials: the AWS CLI's / boto3's
// configuration rules, for AWS and for S3-compatible servers (MinIO, Alibaba
// OSS, moto, Ceph...). Signing itself is libcurl's (CURLOPT_AWS_SIGV4, see
// remote_cache.cc); this file only decides names, keys and URLs.
//
// Precedence, highest first (what botocore 1.43 does, checked against it):
//   credentials  an explicit S3Options::profile's keys (like boto3's
//                Session(profile_name=...): it negates the environment);
//                else AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//                else the profile AWS_PROFILE (or AWS_DEFAULT_PROFILE, else
//                "default") in the shared credentials file
//                (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials),
//                then in the config file (AWS_CONFIG_FILE, default
//                ~/.aws/config, section "[profile NAME]" or "[default]"):
//                aws_access_key_id, aws_secret_access_key, aws_session_token;
//                else container credentials (ECS / EKS Pod Identity):
//                AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (GET
//                http://169.254.170.2 + URI) or AWS_CONTAINER_CREDENTIALS_FULL_URI
//                (https, or http to a loopback / ECS / EKS agent address), with
//                an Authorization header from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
//                or AWS_CONTAINER_AUTHORIZATION_TOKEN;
//                else EC2 instance metadata (IMDSv2: PUT /latest/api/token, then
//                the role's keys; AWS_EC2_METADATA_SERVICE_ENDPOINT, default
//                http://169.254.169.254; AWS_EC2_METADATA_DISABLED=true skips it;
//                1 s timeouts, one attempt, as botocore: off EC2 it costs about
//                a second, once per process);
//                else anonymous (unsigned) requests. A profile that was named
//                (option or AWS_PROFILE) but is in neither file is an error, as
//                is one that only names a role, SSO or credential_process
//                (loom runs none of those: export its keys instead).
//   region       S3Options::region, AWS_REGION, AWS_DEFAULT_REGION, the
//                profile's `region`, us-east-1.
//   endpoint     S3Options::endpoint (--endpoint), AWS_ENDPOINT_URL_S3,
//                AWS_ENDPOINT_URL, the profile's `services = NAME` section's
//                `s3 = / endpoint_url`, the profile's `endpoint_url`; none: AWS.
//   addressing   S3Options::addressing, LOOM_S3_ADDRESSING, the profile's
//                `s3 = / addressing_style`; values auto|virtual|path. auto is
//                boto3's default: virtual-hosted on AWS, path-style on a custom
//                endpoint. Virtual-hosted falls back to path-style for a bucket
//                that is no DNS label (capitals, '_') and, over https, for a
//                bucket with dots (a host "a.b.s3..." fails the certificate).
#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace loom::data {

// What a command line may set; empty fields come from the environment and
// the AWS config files. `loom execute --endpoint` fills `endpoint`.
struct S3Options {
  std::string endpoint;    // "https://oss-cn-hangzhou.aliyuncs.com", "http://minio:9000"
  std::string profile;     // explicit profile: its keys beat the environment's
  std::string region;
  std::string addressing;  // "", "auto", "virtual", "path"
};

struct S3Credentials {
  std::string access_key_id;  // empty: anonymous requests
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
  std::string source;         // "environment", "profile 'x' in /home/u/.aws/credentials", "none (anonymous)"
};

struct S3Settings {
  S3Credentials creds;
  std::string region = "us-east-1";
  std::string endpoint;               // empty: AWS
  std::string addressing = "auto";    // auto | virtual | path
};

// Reads the environment and the AWS config files (each call: they are small).
// Container and instance-metadata credentials are fetched once per process
// (per configuration: endpoint, URI, token) and cached, "none" included;
// temporary ones are fetched again within 5 minutes of their Expiration.
// Errors: kInvalidArgument (an unknown addressing style, a key id without its
// secret, an endpoint that is not http(s)://host[:port][/path]), kNotFound (a
// named profile in neither file), kUnsupported (a profile that needs a role,
// SSO or credential_process), kIoError (container credentials configured but
// their endpoint does not answer or answers an error; an unreadable
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE), kParseError (a malformed
// credentials response, container or IMDS), kInvalidArgument (a FULL_URI
// loom may not use). An instance metadata
// service that does not answer is no error: anonymous requests, as botocore.
Result<S3Settings> resolve_s3_settings(const S3Options& opts);

// Forgets the cached container / instance-metadata credentials (tests).
void clear_s3_credential_cache();
// Tests only: the host:port that AWS_CONTAINER_CREDENTIALS_RELATIVE_URI goes
// to instead of 169.254.170.2 ("" restores it). Clears the cache.
void set_container_credentials_host_for_testing(const std::string& host_port);

// An S3 object's HTTP address.
struct S3Address {
  std::string url;   // scheme://host[:port][/prefix]/path, the key URI-encoded (S3 rules, '/' kept)
  bool path_style = false;
};
// `key` may be empty (the bucket itself: CreateBucket). `raw_query` is
// appended after '?' as given; build it with s3_query().
Result<S3Address> s3_address(const std::string& bucket, const std::string& key, const S3Settings& s,
                             const std::string& raw_query = "");

// Splits "s3://bucket/key" (key may be empty when allow_empty_key).
Status split_s3_url(const std::string& url, std::string* bucket, std::string* key, bool allow_empty_key);

// S3 URI encoding: every byte but A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase
// hex); '/' is kept when `keep_slash` (object key paths) and encoded otherwise.
std::string s3_uri_encode(const std::string& s, bool keep_slash);

// A canonical SigV4 query string: names and values encoded, sorted by name.
// libcurl 7.88 signs the query exactly as it is in the URL (it does not sort
// it; see remote_cache_test's CurlSignerCases), so every loom request with a
// query must build it here.
std::string s3_query(const std::map<std::string, std::string>& params);

// An AWS-style INI file: "[section]" -> "key" -> value; a key with an empty
// value followed by indented "sub = value" lines gives "key.sub" entries (the
// config file's nested `s3 =` blocks). Missing or unreadable file: empty map.
std::map<std::string, std::map<std::string, std::string>> parse_aws_ini(const std::string& text);

}  // namespace loom::data
