// Where Loom's shipped files are at run time: models/, hwprofiles/, data/
// (sample corpus and tokenizer), bench/suites and bench/baselines.
//
// Roots, in order:
//   1. relative to the running executable: <exe dir>/../share/loom (an
//      install tree or a bundle: P/bin/loom finds P/share/loom);
//   2. $LOOM_HOME (a folder holding the same subfolders);
//   3. the source tree of a developer build (compiled in, a fallback only:
//      nothing needs it once installed).
// A root counts when it exists. Nothing here fails: a file found in no root
// is named with every place tried (resource_not_found()).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace loom {

// The folder of the running executable (/proc/self/exe), "" if unknown.
std::string executable_dir();
// The existing roots, in search order (see above), each once.
std::vector<std::string> resource_roots();
// The first existing `root/relative` over resource_roots(); a kNotFound status
// naming every path tried otherwise.
Result<std::string> find_resource(const std::string& relative);
// The sample corpus training uses by default (data/tinyshakespeare.txt).
Result<std::string> default_corpus();
// Where Loom caches what it downloads or measures: $LOOM_CACHE_DIR, else
// ~/.cache/loom, else /tmp/loom-cache.
std::string user_cache_dir();

}  // namespace loom
