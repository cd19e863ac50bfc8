// JSONL input of `loom preprocess` (exec/data/jsonl_reader.h): the bytes as
// one line for extract_text, and as a whole file (plain, or gzip / zstd when
// they start with that magic) through JsonlReader under both error policies.
#include "exec/data/jsonl_reader.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string text, why;
  LineError e = extract_text(bytes, "text", &text, &why);
  if (e == LineError::kNone) {
    FUZZ_CHECK(is_valid_utf8(text), "extracted text is not valid UTF-8");
    FUZZ_CHECK(is_valid_utf8(bytes), "a line with invalid UTF-8 yielded text");
  } else {
    FUZZ_CHECK(!why.empty(), "a refused line without a reason");
  }

  const std::string path = loom::fuzz::scratch_dir() + "/in.jsonl";
  loom::fuzz::write_file(path, data, size);
  int64_t docs_skip = -1;
  for (OnError policy : {OnError::kSkip, OnError::kFail}) {
    auto r = JsonlReader::open(path, JsonlOptions{"text", policy});
    if (!r.is_ok()) {
      FUZZ_CHECK(!r.status().message().empty(), "an error without a message");
      return 0;
    }
    int64_t docs = 0;
    for (;;) {
      auto more = (*r)->next(&text);
      if (!more.is_ok()) {
        FUZZ_CHECK(!more.status().message().empty(), "an error without a message");
        docs = -2;
        break;
      }
      if (!*more) break;
      FUZZ_CHECK(is_valid_utf8(text), "a document that is not valid UTF-8");
      ++docs;
    }
    const JsonlStats& st = (*r)->stats();
    if (policy == OnError::kSkip) {
      if (docs >= 0) FUZZ_CHECK(st.documents == docs && st.lines == st.documents + st.skipped(), "stats disagree");
      docs_skip = docs;
    } else if (docs >= 0 && docs_skip >= 0) {
      FUZZ_CHECK(docs == docs_skip, "fail and skip policies read different documents from a clean file");
    }
  }
  return 0;
}
