#include "exec/data/gpt2_bpe.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace loom::data {

namespace {

namespace fs = std::filesystem;

// ---- Code point classes of the pre-tokenizer regex --------------------------

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// (first code point << 2) | class, sorted; generated from HF tokenizers' own
// regex engine because system Unicode libraries lag or lead it (ICU 72 lacks
// the 5,004 Unicode 16 letters and digits Oniguruma knows) and ids must not
// depend on the machine.
constexpr uint32_t kClassRanges[] = {
#include "gpt2_unicode_classes.inc"
};
static_assert(kClassRanges[0] == 0, "the class table must start at code point 0");

CharClass class_of(uint32_t cp) {
  auto it = std::upper_bound(std::begin(kClassRanges), std::end(kClassRanges), (cp << 2) | 3u);
  return static_cast<CharClass>(*(it - 1) & 3u);
}

const std::array<CharClass, 128>& ascii_classes() {
  static const std::array<CharClass, 128> table = [] {
    std::array<CharClass, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = class_of(c);
    return t;
  }();
  return table;
}

struct Char {
  size_t len;
  CharClass cls;
};

// The character at s[i]. A byte that does not start a valid UTF-8 sequence
// (stray continuation, overlong form, surrogate, truncated) is a one-byte
// character of class "other": deterministic, and it still round-trips.
inline Char char_at(std::string_view s, size_t i, const std::array<CharClass, 128>& ascii) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {1, ascii[b]};
  size_t len;
  uint32_t cp;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2, cp = b & 0x1Fu;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3, cp = b & 0x0Fu;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4, cp = b & 0x07u;
  } else {
    return {1, kOther};
  }
  if (i + len > s.size()) return {1, kOther};
  for (size_t k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return {1, kOther};
    cp = (cp << 6) | (c & 0x3Fu);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return {1, kOther};
  return {len, class_of(cp)};
}

// End of the pre-token starting at s[i]: the regex's alternatives in order.
size_t pretoken_end(std::string_view s, size_t i, const std::array<CharClass, 128>& ascii) {
  const size_t n = s.size();
  if (s[i] == '\'' && i + 1 < n) {  // 's|'t|'re|'ve|'m|'ll|'d, lowercase only (GPT-2's pattern has no (?i))
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = s[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  auto run_end = [&](size_t j, CharClass cls) {
    while (j < n) {
      Char c = char_at(s, j, ascii);
      if (c.cls != cls) break;
      j += c.len;
    }
    return j;
  };
  const Char c = char_at(s, i, ascii);
  if (c.cls != kSpace) return run_end(i + c.len, c.cls);  // \p{L}+ | \p{N}+ | [^\s\p{L}\p{N}]+
  if (s[i] == ' ' && i + 1 < n) {                           // the optional ' ' of those three
    const Char d = char_at(s, i + 1, ascii);
    if (d.cls != kSpace) return run_end(i + 1 + d.len, d.cls);
  }
  // \s+(?!\S) | \s+ : a whitespace run that ends the text is taken whole;
  // otherwise its last character is left to start the next pre-token (so
  // "a   b" gives "a", "  ", " b"), unless it is the only one.
  size_t last = i, j = i + c.len;
  while (j < n) {
    const Char d = char_at(s, j, ascii);
    if (d.cls != kSpace) break;
    last = j;
    j += d.len;
  }
  return (j == n || last == i) ? j : last;
}

template <typename F>
void for_each_pretoken(std::string_view s, F&& emit) {
  const auto& ascii = ascii_classes();
  for (size_t i = 0; i < s.size();) {
    const size_t end = pretoken_end(s, i, ascii);
    emit(s.substr(i, end - i));
    i = end;
  }
}

// ---- Byte-level alphabet -----------------------------------------------------

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the
// other 68 take code points 256.. in byte order, so every token is printable.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? b : next++;
  }
  return map;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // the alphabet stays below U+0800
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The bytes a vocabulary token stands for. A token with a character outside
// the byte alphabet (none in GPT-2's) stands for its own UTF-8, as HF's
// ByteLevel decoder treats it.
std::string token_bytes(const std::string& token, const std::array<int, 512>& unicode_to_byte) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const auto b = static_cast<unsigned char>(token[i]);
    uint32_t cp;
    if (b < 0x80) {
      cp = b, i += 1;
    } else if ((b & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((b & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu), i += 2;
    } else {
      return token;
    }
    if (cp >= unicode_to_byte.size() || unicode_to_byte[cp] < 0) return token;
    out.push_back(static_cast<char>(unicode_to_byte[cp]));
  }
  return out;
}

Result<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return not_found(path + ": no such file; a GPT-2 BPE tokenizer needs vocab.json and merges.txt side by side "
                     "(GPT-2's own are in data/tokenizer/gpt2/)");
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return io_error(path + ": cannot open it (permissions?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) return io_error(path + ": read failed");
  return ss.str();
}

int line_of(const std::string& text, size_t byte) {
  const auto end = text.begin() + static_cast<ptrdiff_t>(std::min(byte, text.size()));
  return 1 + static_cast<int>(std::count(text.begin(), end, '\n'));
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

struct Gpt2BpeTokenizer::Impl {
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> merge
  std::array<int32_t, 256> byte_id{};          // the one-byte tokens BPE starts from
  std::vector<std::string> bytes;              // id -> the bytes it stands for
  int32_t eod = -1;
  std::string name;

  // Encoded pre-tokens, shared by all threads: sharded so that threads rarely
  // wait on one another; a shard that fills up is emptied (text drifts).
  static constexpr size_t kShards = 64, kShardEntries = 4096, kMaxCachedBytes = 128;
  struct Shard {
    std::shared_mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> cache;

  const Merge* find_merge(int32_t left, int32_t right) const {
    auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right));
    return it == merges.end() ? nullptr : &it->second;
  }
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
};

// HF tokenizers' Word::merge_all, step for step: a queue of candidate merges
// ordered by (rank, position); an entry whose pair has changed since it was
// queued is dropped. Merging the lowest rank first everywhere is what OpenAI's
// encoder.py does too.
void Gpt2BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }  // min-heap
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  if (n == 0) return;
  std::vector<Sym> syms(piece.size());
  for (int32_t k = 0; k < n; ++k)
    syms[k] = {byte_id[static_cast<unsigned char>(piece[k])], k - 1, k + 1 < n ? k + 1 : -1, true};
  std::priority_queue<Cand> queue;
  for (int32_t k = 0; k + 1 < n; ++k)
    if (const Merge* m = find_merge(syms[k].id, syms[k + 1].id)) queue.push({m->rank, k, m->id});
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Sym& s = syms[top.pos];
    if (!s.alive || s.next < 0) continue;
    Sym& right = syms[s.next];
    const Merge* m = find_merge(s.id, right.id);
    if (!m || m->id != top.id) continue;  // stale
    s.id = top.id;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0) syms[s.next].prev = top.pos;
    if (s.prev >= 0)
      if (const Merge* p = find_merge(syms[s.prev].id, s.id)) queue.push({p->rank, s.prev, p->id});
    if (s.next >= 0)
      if (const Merge* q = find_merge(s.id, syms[s.next].id)) queue.push({q->rank, top.pos, q->id});
  }
  for (int32_t k = 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

void Gpt2BpeTokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedBytes) {
    bpe(piece, out);
    return;
  }
  const size_t hash = StringHash{}(piece);
  Shard& shard = cache[(hash * 0x9E3779B97F4A7C15ull) >> 58];
  {
    std::shared_lock lock(shard.mu);
    if (auto it = shard.map.find(piece); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe(piece, out);
  std::unique_lock lock(shard.mu);
  if (shard.map.size() >= kShardEntries) shard.map.clear();
  shard.map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(first), out.end()));
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

Result<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::load(const std::string& vocab_path,
                                                                 const std::string& merges_path,
                                                                 const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(std::string vocab_text, read_file(vocab_path));
  LOOM_ASSIGN_OR_RETURN(std::string merges_text, read_file(merges_path));
  auto impl = std::make_unique<Impl>();
  impl->name = name;

  nlohmann::json vocab_json;
  try {
    vocab_json = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::parse_error& e) {
    return parse_error(vocab_path + ":" + std::to_string(line_of(vocab_text, e.byte)) + ": not valid JSON (" +
                       e.what() + "); vocab.json is one object mapping each token to its id");
  } catch (const nlohmann::json::exception& e) {
    // Not a syntax error: a number beyond a double's range ("9999999e9999",
    // out_of_range.406). Found by fuzzing: it ended the process.
    return parse_error(vocab_path + ": not valid JSON (" + e.what() +
                       "); vocab.json maps each token to an integer id");
  }
  if (!vocab_json.is_object())
    return parse_error(vocab_path + ": not a JSON object; vocab.json maps each token to its id, {\"!\": 0, ...}");
  constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<const std::string*> token_of_id;
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxId)
      return parse_error(vocab_path + ": token \"" + it.key() + "\" has id " + v.dump() +
                         "; ids must be integers in [0, " + std::to_string(kMaxId) + "]");
    const auto id = static_cast<int32_t>(v.get<int64_t>());
    if (static_cast<size_t>(id) >= token_of_id.size()) token_of_id.resize(static_cast<size_t>(id) + 1, nullptr);
    if (token_of_id[id])
      return invalid_argument(vocab_path + ": tokens \"" + *token_of_id[id] + "\" and \"" + it.key() +
                              "\" both have id " + std::to_string(id) + "; every token needs its own id");
    token_of_id[id] = &vocab.emplace(it.key(), id).first->first;
  }

  const std::array<uint32_t, 256> b2u = bytes_to_unicode();
  std::array<int, 512> u2b;
  u2b.fill(-1);
  for (int b = 0; b < 256; ++b) u2b[b2u[b]] = b;
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(b2u[b], sym);
    auto it = vocab.find(sym);
    if (it == vocab.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return invalid_argument(vocab_path + ": no token for byte " + hex + " (symbol \"" + sym +
                              "\"); a byte-level BPE vocabulary has one for each of the 256 bytes, "
                              "is this a GPT-2-style vocab.json?");
    }
    impl->byte_id[b] = it->second;
  }
  auto eot = vocab.find(std::string(kEndOfText));
  if (eot == vocab.end())
    return invalid_argument(vocab_path + ": no \"<|endoftext|>\" token, so no end-of-document id; add it to the "
                            "vocabulary (GPT-2's is id 50256)");
  impl->eod = eot->second;
  impl->bytes.resize(token_of_id.size());
  for (size_t id = 0; id < token_of_id.size(); ++id)
    if (token_of_id[id] && static_cast<int32_t>(id) != impl->eod) impl->bytes[id] = token_bytes(*token_of_id[id], u2b);

  // merges.txt: "#version ..." may head it (HF skips such a line), then one
  // "left right" per line, rank = order. Like HF, blank lines are errors.
  std::unordered_map<uint64_t, int> merge_line;  // pair -> its line, for the duplicate message
  int line_no = 0;
  int32_t rank = 0;
  for (size_t pos = 0; pos < merges_text.size();) {
    size_t eol = merges_text.find('\n', pos);
    if (eol == std::string::npos) eol = merges_text.size();
    std::string_view line(merges_text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.starts_with("#version")) continue;
    const std::string where = merges_path + ":" + std::to_string(line_no) + ": ";
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      return parse_error(where + "expected two tokens separated by one space (\"a b\"), got \"" + std::string(line) +
                         "\"; remove blank or malformed lines");
    const std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
    int32_t ids[3];
    const std::string* parts[3] = {&left, &right, nullptr};
    const std::string merged = left + right;
    parts[2] = &merged;
    for (int k = 0; k < 3; ++k) {
      auto it = vocab.find(*parts[k]);
      if (it == vocab.end())
        return parse_error(where + "token \"" + *parts[k] + "\" is not in " + fs::path(vocab_path).filename().string() +
                           "; merges.txt and vocab.json must come from the same tokenizer");
      ids[k] = it->second;
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ids[0])) << 32) | static_cast<uint32_t>(ids[1]);
    if (auto [it, fresh] = merge_line.emplace(key, line_no); !fresh)
      return parse_error(where + "merge \"" + std::string(line) + "\" repeats line " + std::to_string(it->second) +
                         "; each pair may appear once");
    impl->merges.emplace(key, Impl::Merge{rank++, ids[2]});
  }
  return std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer(std::move(impl)));
}

Result<std::vector<int32_t>> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 8);
  // The special token is cut out before the regex runs, as HF's added-token
  // matching does: the text on each side is pre-tokenized on its own.
  for (size_t pos = 0;;) {
    const size_t hit = text.find(kEndOfText, pos);
    for_each_pretoken(text.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos),
                      [&](std::string_view piece) { impl_->encode_piece(piece, ids); });
    if (hit == std::string_view::npos) break;
    ids.push_back(impl_->eod);
    pos = hit + kEndOfText.size();
  }
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids)
    if (id >= 0 && static_cast<size_t>(id) < impl_->bytes.size()) out += impl_->bytes[static_cast<size_t>(id)];
  return out;
}

int64_t Gpt2BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->bytes.size()); }
int32_t Gpt2BpeTokenizer::eod_id() const { return impl_->eod; }
std::string Gpt2BpeTokenizer::name() const { return impl_->name; }

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for_each_pretoken(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace loom::data
