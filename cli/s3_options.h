// The S3 options of the commands that read remote data (`loom execute`; for
// `loom preprocess` too: call add_s3_options on its app and pass the struct
// on in RemoteCacheOptions::s3). Empty values leave the choice to the
// environment and the AWS config files (exec/data/s3_config.h).
#pragma once

#include <CLI/CLI.hpp>

#include "exec/data/s3_config.h"

namespace loom::cli {

inline void add_s3_options(CLI::App& app, data::S3Options* o) {
  app.add_option("--endpoint", o->endpoint,
                 "S3-compatible endpoint for s3:// URLs, e.g. http://minio:9000 or "
                 "https://oss-cn-hangzhou.aliyuncs.com (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the AWS "
                 "profile's endpoint_url, else AWS)");
  app.add_option("--aws-profile", o->profile,
                 "AWS profile of ~/.aws/credentials and ~/.aws/config for s3:// URLs; named here, its keys beat "
                 "AWS_ACCESS_KEY_ID (default: AWS_PROFILE, else `default`)");
  app.add_option("--s3-addressing", o->addressing,
                 "s3:// URL addressing: virtual (bucket.host/key; Alibaba OSS needs it), path (host/bucket/key; "
                 "MinIO's default) or auto (virtual on AWS, path on a custom endpoint); default LOOM_S3_ADDRESSING, "
                 "the profile's s3 addressing_style, else auto")
      ->check(CLI::IsMember({"auto", "virtual", "path"}));
}

}  // namespace loom::cli
