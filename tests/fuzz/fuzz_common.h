// Shared by the libFuzzer harnesses (docs/fuzzing.md).
//
// Each harness defines LLVMFuzzerTestOneInput: it hands the bytes to one
// parser of a user file and, when the parser accepts them, exercises the
// result a little (re-serialize and re-parse, validate against a model, read
// what an index points at), so that logic after parsing is reached too. A
// parser may refuse anything with a Status; it must never crash, hang, leak or
// trip a sanitizer, and what it accepts must be self-consistent (FUZZ_CHECK).
//
// Seeds: a harness run with LOOM_FUZZ_WRITE_SEEDS=DIR writes its generated
// seeds (files the project's own writers produce: plans, .idx files,
// checkpoint metadata, manifests, run records) into DIR and exits.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <initializer_list>
#include <vector>

#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR "."
#endif

// A property the accepted input must have; a violation is a finding (abort,
// so libFuzzer keeps the input as a crash artifact).
#define FUZZ_CHECK(cond, msg)                                                                       \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond,       \
                   std::string(msg).c_str());                                                       \
      std::abort();                                                                                 \
    }                                                                                               \
  } while (0)

namespace loom::fuzz {

// Shipped models (models/) by name, loaded once; a missing one aborts (the
// harness cannot run without them).
template <class Spec, class Load>
const std::vector<Spec>& shipped_models(std::initializer_list<const char*> names, Load load, const char* harness) {
  static const std::vector<Spec> ms = [&] {
    std::vector<Spec> v;
    for (const char* n : names) {
      auto m = load(n);
      if (!m.is_ok()) {
        std::fprintf(stderr, "%s: %s\n", harness, m.status().to_string().c_str());
        std::abort();
      }
      v.push_back(*m);
    }
    return v;
  }();
  return ms;
}

// A private scratch directory for this process (removed at exit).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) +
                       "/loom-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::string d = tmpl;
    static std::string to_remove = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return d;
  }();
  return dir;
}

inline void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.good()) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}
inline void write_file(const std::string& path, const std::string& text) { write_file(path, text.data(), text.size()); }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Where generated seeds go, when asked for (LOOM_FUZZ_WRITE_SEEDS=DIR).
inline const char* seed_dir() { return std::getenv("LOOM_FUZZ_WRITE_SEEDS"); }

inline void write_seed(const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(seed_dir());
  write_file(std::string(seed_dir()) + "/" + name, bytes);
}

}  // namespace loom::fuzz
