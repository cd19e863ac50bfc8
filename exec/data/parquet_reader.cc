#include "exec/data/parquet_reader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/resources.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

// The plugin's table, or why it could not be loaded; loaded once per process
// and never unloaded (files it opened run its code).
Result<const ParquetPlugin*> load_plugin() {
  static std::once_flag once;
  static Result<const ParquetPlugin*> loaded = internal_error("unset");
  std::call_once(once, [] {
    const std::string path = parquet_plugin_path();
    const std::string how = "pip install pyarrow (Arrow's C++ libraries come with it) and rebuild with scripts/setup.sh, "
                            "or build with -DLOOM_ARROW_DIR=PREFIX; or convert the input to JSONL";
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      loaded = unsupported("Parquet input needs the plugin " + path +
                           ", which is not installed (this loom was built without Apache Arrow's C++ library, or is a "
                           "GPU bundle): " + how);
      return;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = ::dlerror();
      loaded = unsupported("the Parquet plugin " + path + " does not load: " + (err ? err : "unknown error") +
                           " (were the Arrow libraries it was built against moved or uninstalled? " + how + ")");
      return;
    }
    using Entry = const ParquetPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, "loom_parquet_plugin"));
    const ParquetPlugin* plugin = entry ? entry() : nullptr;
    if (plugin == nullptr || plugin->abi != kParquetPluginAbi || plugin->open == nullptr) {
      loaded = internal_error(path + " is not this Loom's Parquet plugin (ABI mismatch); reinstall Loom");
      return;
    }
    loaded = plugin;
  });
  return loaded;
}

}  // namespace

std::string parquet_plugin_path() {
  if (const char* p = std::getenv("LOOM_PARQUET_PLUGIN"); p != nullptr && *p != '\0') return p;
  std::string dir = executable_dir();
  if (dir.empty()) return "libloom_parquet.so";
  return (fs::path(dir) / ".." / "lib" / "loom" / "libloom_parquet.so").lexically_normal().string();
}

Status parquet_available() {
  auto p = load_plugin();
  return p.is_ok() ? Status::ok() : p.status();
}

bool is_parquet_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[4] = {};
  size_t got = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return got == 4 && std::memcmp(magic, "PAR1", 4) == 0;
}

bool is_parquet_name(const std::string& path) {
  auto ends = [&](std::string_view s) {
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".parquet") || ends(".pq");
}

Result<std::unique_ptr<ParquetTextFile>> ParquetTextFile::open(const std::string& path, const std::string& text_column,
                                                               const std::vector<std::string>& field_columns) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return not_found(path + ": no such Parquet file");
  if (!is_parquet_file(path))
    return parse_error(path + ": not a Parquet file (it does not start with the magic bytes PAR1)");
  LOOM_ASSIGN_OR_RETURN(const ParquetPlugin* plugin, load_plugin());
  return plugin->open(path, text_column, field_columns);
}

}  // namespace loom::data
