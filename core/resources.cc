#include "core/resources.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR ""
#endif

namespace loom {

namespace fs = std::filesystem;

std::string executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return "";
  return exe.parent_path().string();
}

std::vector<std::string> resource_roots() {
  std::vector<std::string> candidates;
  if (std::string dir = executable_dir(); !dir.empty())
    candidates.push_back((fs::path(dir) / ".." / "share" / "loom").lexically_normal().string());
  if (const char* home = std::getenv("LOOM_HOME"); home != nullptr && *home != '\0') candidates.emplace_back(home);
  if (*LOOM_SOURCE_DIR != '\0') candidates.emplace_back(LOOM_SOURCE_DIR);
  std::vector<std::string> roots;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!fs::is_directory(c, ec)) continue;
    bool seen = false;
    for (const auto& r : roots) seen = seen || fs::equivalent(r, c, ec);
    if (!seen) roots.push_back(c);
  }
  return roots;
}

Result<std::string> find_resource(const std::string& relative) {
  std::string tried;
  for (const auto& root : resource_roots()) {
    fs::path p = fs::path(root) / relative;
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  if (tried.empty()) tried = "no root exists";
  return not_found("'" + relative + "' is not among Loom's shipped files (tried " + tried +
                   "); install Loom (cmake --install), or set LOOM_HOME to a folder holding models/, hwprofiles/ "
                   "and data/");
}

Result<std::string> default_corpus() { return find_resource("data/tinyshakespeare.txt"); }

std::string user_cache_dir() {
  if (const char* c = std::getenv("LOOM_CACHE_DIR"); c && *c) return c;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/loom";
  return "/tmp/loom-cache";
}

}  // namespace loom
