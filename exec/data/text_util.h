// UTF-8 helpers shared by the cleaning sources (exec/data/clean.cc,
// exec/data/minhash.cc). Internal: inputs are valid UTF-8 (checked before).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace loom::data::text {

// True when every byte is < 0x80.
inline bool is_ascii(std::string_view s) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ULL) return false;
  }
  for (; i < n; ++i)
    if (p[i] & 0x80) return false;
  return true;
}

// Decodes the code point at s[*i] and advances *i. Valid UTF-8 assumed; a
// stray byte decodes as itself (U+0080..U+00FF) so a bad input cannot loop.
inline char32_t next_code_point(std::string_view s, size_t* i) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), k = *i;
  unsigned char c = p[k];
  if (c < 0x80) {
    *i = k + 1;
    return c;
  }
  int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (len == 1 || k + len > n) {
    *i = k + 1;
    return c;
  }
  char32_t cp = c & (0x7F >> len);
  for (int j = 1; j < len; ++j) cp = (cp << 6) | (p[k + j] & 0x3F);
  *i = k + len;
  return cp;
}

inline void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Python's str.isspace(): the White_Space property plus U+001C..U+001F
// (bidi class B/S). Word boundaries of min_words and of MinHash shingling.
inline bool is_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace loom::data::text
