// Cleaning (exec/data/clean.h, field_filter.h): the first line of the bytes is
// a --filter spec, the rest a document. A spec that parses must evaluate any
// JSON value without throwing; the document goes through every cleaning step
// (field check, control stripping, NFKC, bounds, exact and MinHash keys) and
// a kept text must be valid UTF-8 that cleaning again leaves as it is.
#include <optional>

#include "exec/data/clean.h"
#include "exec/data/jsonl_reader.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::data;

namespace {

const Cleaner* cleaner() {
  static std::optional<Cleaner> c = [] {
    CleanOptions o;
    o.strip_control = true;
    o.normalization = have_icu() ? Normalization::kNfkc : Normalization::kNone;
    o.min_chars = 2;
    o.min_words = 1;
    o.exact_dedup = true;
    o.near_dedup = have_icu();
    auto made = Cleaner::create(o);
    if (!made.is_ok()) {
      std::fprintf(stderr, "fuzz_clean: %s\n", made.status().to_string().c_str());
      std::abort();
    }
    return std::optional<Cleaner>(std::move(made).value());
  }();
  return &*c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t nl = bytes.find('\n');
  const std::string spec(bytes.substr(0, nl == std::string_view::npos ? size : nl));
  auto f = FieldFilter::parse(spec);
  if (f.is_ok()) {
    for (const char* v : {"null", "1.5", "-3", "\"en\"", "true", "[1]", "{\"a\": 2}", "\"\""}) {
      const nlohmann::json j = nlohmann::json::parse(v);
      (void)f->evaluate(&j);
      const nlohmann::json record = {{f->field(), j}};
      (void)f->evaluate_record(record);
    }
    (void)f->evaluate(static_cast<const nlohmann::json*>(nullptr));
    (void)f->evaluate(std::optional<double>(2.0));
    (void)f->evaluate(std::optional<std::string>(spec));
  } else {
    FUZZ_CHECK(!f.status().message().empty(), "a refused filter without a reason");
  }

  if (nl == std::string_view::npos) return 0;
  std::string text(bytes.substr(nl + 1));
  DocKeys keys;
  DocVerdict v = cleaner()->clean(&text, &keys);
  if (v.kept()) {
    FUZZ_CHECK(is_valid_utf8(text), "a kept text that is not valid UTF-8");
    std::string again = text;
    DocKeys keys2;
    DocVerdict v2 = cleaner()->clean(&again, &keys2);
    FUZZ_CHECK(v2.kept() && again == text, "cleaning a cleaned text changed it");
    FUZZ_CHECK(keys2.exact == keys.exact && keys2.bands == keys.bands, "the keys of a cleaned text changed");
  }
  return 0;
}
