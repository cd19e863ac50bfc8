#include "exec/data/preprocess.h"

#include "core/output_file.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "exec/data/parquet_reader.h"
#include "exec/data/remote_cache.h"
#include "exec/data/tokenizer.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchMaxBytes = 4 << 20;  // a batch closes at batch_lines lines or this many bytes
// Parquet record batches (as text and as tokens) waiting for a worker or the
// writer, beyond which a worker reading a row group the writer is not on yet
// pauses before reading its next batch.
constexpr size_t kWaitingBudgetBytes = size_t{16} << 20;

// One work item, made by the reader thread: lines of a JSONL file, or one
// row group of a Parquet file (which the worker reads itself).
struct Batch {
  int64_t seq = 0;
  int file = 0;
  int row_group = -1;             // >= 0: a Parquet row group, the fields below unused
  std::string data;               // the lines, back to back
  std::vector<size_t> ends;       // end offset of each line in data
  std::vector<int64_t> line_nos;  // 1-based line number of each line
  int64_t bytes = 0;              // decompressed bytes consumed (blank lines included)
  int64_t file_bytes = 0;         // bytes of the input file itself this item covers
};

// A work item (or, for a Parquet row group, one record batch of it) after
// tokenization. A row group comes back in several parts, the last one marked.
struct Done {
  std::vector<int32_t> tokens;    // every document back to back
  std::vector<size_t> doc_ends;   // end offset of each document in tokens
  JsonlStats stats;
  Status error;                   // first bad line, OnError::kFail only
  int64_t bytes = 0;
  int64_t file_bytes = 0;
  bool last = true;
  size_t held = 0;                // bytes counted in Pipeline::done_bytes
  // With cleaning: what the workers dropped (counted here), and for each
  // document in doc_ends its verdict and dedup keys, for the writer's
  // in-order duplicate check.
  CleanStats dropped;
  std::vector<DocVerdict> verdicts;
  std::vector<DocKeys> keys;
};

using PartKey = std::pair<int64_t, int>;  // (item seq, part)

// One record batch of a Parquet row group, its texts copied out, waiting for
// any worker to tokenize it: a single large row group is tokenized by every
// worker, not just by the one reading it.
struct TextPart {
  PartKey key;
  bool last = false;
  int file = 0;
  std::string data;             // the texts, back to back
  std::vector<size_t> ends;     // end offset of each text in data
  std::vector<int64_t> rows;    // 0-based row number in the file of each text
  std::vector<uint8_t> null;    // 1 where the text is null
  // Field-filter columns, row-major (rows x filters), when cleaning has filters.
  std::vector<FieldValue> fields;
  std::string field_data;       // the string values of `fields`, back to back
  std::vector<size_t> field_ends;
  int64_t file_bytes = 0;
};

// State shared by the reader, the workers and the writing (calling) thread.
struct Pipeline {
  std::mutex mu;
  std::condition_variable cv;  // one cv: every wait re-checks its own predicate
  std::deque<Batch> untokenized;  // read by the reader, waiting for a worker
  std::map<PartKey, TextPart> parts;  // Parquet record batches waiting for a worker (taken first, lowest first)
  size_t max_parts = 4;           // beyond this the reading worker tokenizes its batch itself
  size_t parts_bytes = 0;
  int reading = 0;                // workers reading a row group (they may add parts)
  std::map<PartKey, Done> done;
  size_t done_bytes = 0;
  int64_t produced = 0, consumed = 0;
  int next_part = 0;  // of item `consumed`, the part the writer needs next
  size_t window = 8;  // batches in flight (read but not yet written)
  bool reader_finished = false;
  bool stop = false;
  Status reader_status;
  // Used buffers come back here and are taken again with their capacity, so
  // a steady run allocates no large blocks: no page faults for fresh ones,
  // and no freed multi-megabyte blocks for malloc to scatter (the resident
  // size stays flat whatever the input's size).
  std::vector<std::vector<int32_t>> spare_tokens;
  std::vector<std::string> spare_text;
  size_t max_spares = 16;
};

std::vector<int32_t> take_tokens(Pipeline& p) {
  std::lock_guard lock(p.mu);
  if (p.spare_tokens.empty()) return {};
  std::vector<int32_t> v = std::move(p.spare_tokens.back());
  p.spare_tokens.pop_back();
  v.clear();
  return v;
}
void give_tokens(Pipeline& p, std::vector<int32_t>&& v) {
  std::lock_guard lock(p.mu);
  if (p.spare_tokens.size() < p.max_spares && v.capacity() > 0) p.spare_tokens.push_back(std::move(v));
}
std::string take_text(Pipeline& p) {
  std::lock_guard lock(p.mu);
  if (p.spare_text.empty()) return {};
  std::string s = std::move(p.spare_text.back());
  p.spare_text.pop_back();
  s.clear();
  return s;
}
void give_text(Pipeline& p, std::string&& s) {
  std::lock_guard lock(p.mu);
  if (p.spare_text.size() < p.max_spares && s.capacity() > 0) p.spare_text.push_back(std::move(s));
}

// What every stage reads, fixed for the run.
struct Ctx {
  const std::vector<std::string>& files;      // local paths
  const std::vector<char>& parquet;           // per file: Parquet (else JSONL)
  const Cleaner* cleaner;                     // null: no cleaning
  const Tokenizer& tok;
  const PreprocessOptions& o;
  std::vector<std::string> filter_columns;    // Parquet columns the field filters read
};

void read_all(Pipeline& p, const Ctx& c) {
  const std::vector<std::string>& files = c.files;
  const std::vector<char>& parquet = c.parquet;
  const PreprocessOptions& o = c.o;
  auto push = [&](Batch&& b) -> bool {
    std::unique_lock lock(p.mu);
    p.cv.wait(lock, [&] { return p.stop || p.produced - p.consumed < static_cast<int64_t>(p.window); });
    if (p.stop) return false;
    b.seq = p.produced++;
    p.untokenized.push_back(std::move(b));
    p.cv.notify_all();
    return true;
  };
  auto finish = [&](Status s) {
    std::lock_guard lock(p.mu);
    p.reader_status = std::move(s);
    p.reader_finished = true;
    p.cv.notify_all();
  };
  std::string line;
  for (int f = 0; f < static_cast<int>(files.size()); ++f) {
    if (parquet[f]) {
      // One item per row group; the workers read them. Opening checks the
      // columns before any worker starts on the file.
      auto pf = ParquetTextFile::open(files[f], o.text_field, c.filter_columns);
      if (!pf.is_ok()) return finish(pf.status());
      for (int g = 0; g < (*pf)->row_groups(); ++g) {
        Batch b;
        b.file = f;
        b.row_group = g;
        b.file_bytes = (*pf)->row_group_compressed_bytes(g);
        if (!push(std::move(b))) return;
      }
      continue;
    }
    auto reader = LineReader::open(files[f]);
    if (!reader.is_ok()) return finish(reader.status());
    Batch b;
    b.file = f;
    b.data = take_text(p);
    int64_t last_bytes = 0, last_file_bytes = 0;
    for (;;) {
      auto more = (*reader)->next_line(&line);
      if (!more.is_ok()) return finish(more.status());
      if (*more && !is_blank_line(line)) {
        b.data += line;
        b.ends.push_back(b.data.size());
        b.line_nos.push_back((*reader)->line_number());
      }
      bool full = static_cast<int>(b.ends.size()) >= o.batch_lines || b.data.size() >= kBatchMaxBytes;
      if ((full || !*more) && (!b.ends.empty() || (*reader)->bytes_out() > last_bytes)) {
        b.bytes = (*reader)->bytes_out() - last_bytes;
        last_bytes = (*reader)->bytes_out();
        b.file_bytes = (*reader)->file_bytes_read() - last_file_bytes;
        last_file_bytes = (*reader)->file_bytes_read();
        if (!push(std::move(b))) return;
        b = Batch{};
        b.file = f;
        b.data = take_text(p);
      }
      if (!*more) break;
    }
  }
  finish(Status::ok());
}

// Cleans (with a cleaner; `fields` is the field filters' verdict) and
// tokenizes one document's text into d. The text is valid UTF-8.
Status add_document(std::string_view text, const Cleaner* cleaner, const DocVerdict& fields, const Tokenizer& tok,
                    const PreprocessOptions& o, Done* d) {
  thread_local std::string cleaned;  // reused: its capacity outlives the document
  if (cleaner) {
    DocVerdict v = fields;
    DocKeys keys;
    if (v.kept()) {
      cleaned.assign(text);
      v = cleaner->clean(&cleaned, &keys);
      text = cleaned;
    }
    if (!v.kept()) {
      if (d->dropped.filtered_by_field.size() != cleaner->filters().size()) d->dropped = cleaner->new_stats();
      d->dropped.add(v);
      return Status::ok();
    }
    d->verdicts.push_back(v);
    d->keys.push_back(std::move(keys));
  }
  auto ids = tok.encode(text);
  if (!ids.is_ok()) return ids.status();
  d->tokens.insert(d->tokens.end(), ids->begin(), ids->end());
  if (o.append_eod) d->tokens.push_back(tok.eod_id());
  d->doc_ends.push_back(d->tokens.size());
  ++d->stats.documents;
  return Status::ok();
}

void tokenize_batch(const Batch& b, const Ctx& c, Done* d) {
  const std::string& file = c.files[b.file];
  const Cleaner* cleaner = c.cleaner;
  const Tokenizer& tok = c.tok;
  const PreprocessOptions& o = c.o;
  std::string text, why;
  const bool need_record = cleaner && !cleaner->filters().empty();
  nlohmann::json record;
  d->bytes = b.bytes;
  size_t start = 0;
  for (size_t i = 0; i < b.ends.size(); ++i) {
    std::string_view line(b.data.data() + start, b.ends[i] - start);
    start = b.ends[i];
    ++d->stats.lines;
    LineError e = extract_text(line, o.text_field, &text, &why, need_record ? &record : nullptr);
    if (e == LineError::kNone) {
      const DocVerdict fields = need_record ? cleaner->check_fields(record) : DocVerdict{};
      Status st = add_document(text, cleaner, fields, tok, o, d);
      if (!st.is_ok()) {
        d->error = st.with_context(file + ":" + std::to_string(b.line_nos[i]));
        return;
      }
      continue;
    }
    if (o.on_error == OnError::kFail) {
      d->error = parse_error(file + ":" + std::to_string(b.line_nos[i]) + ": " + why +
                             " (fix the line, or pass --on-error skip to skip and count bad lines)");
      return;
    }
    if (e == LineError::kMalformedJson) ++d->stats.skipped_malformed;
    else if (e == LineError::kMissingField) ++d->stats.skipped_missing_field;
    else ++d->stats.skipped_invalid_utf8;
  }
}

// Hands part `part` of item `seq` to the writer; never waits (memory is
// bounded where work starts: the reader's window of items, the cap on queued
// parts, and paused row-group readers). False: stopped.
bool emit(Pipeline& p, int64_t seq, int part, Done&& d) {
  d.held = d.tokens.size() * sizeof(int32_t) + d.doc_ends.size() * sizeof(size_t);
  std::lock_guard lock(p.mu);
  if (p.stop) return false;
  p.done_bytes += d.held;
  p.done.emplace(PartKey{seq, part}, std::move(d));
  p.cv.notify_all();
  return true;
}

// Tokenizes one Parquet record batch's texts into d.
void tokenize_part(const TextPart& t, const Ctx& c, Done* d) {
  const std::string& file = c.files[t.file];
  const Cleaner* cleaner = c.cleaner;
  const Tokenizer& tok = c.tok;
  const PreprocessOptions& o = c.o;
  const size_t nf = cleaner ? cleaner->filters().size() : 0;
  d->file_bytes = t.file_bytes;
  d->last = t.last;
  size_t start = 0;
  for (size_t i = 0; i < t.ends.size(); ++i) {
    std::string_view text(t.data.data() + start, t.ends[i] - start);
    start = t.ends[i];
    ++d->stats.lines;
    auto where = [&] { return file + ": row " + std::to_string(t.rows[i]); };
    if (t.null[i] || !is_valid_utf8(text)) {
      if (o.on_error == OnError::kFail) {
        d->error = parse_error(where() + ": " +
                               (t.null[i] ? "column \"" + o.text_field + "\" is null"
                                          : std::string("the text is not valid UTF-8")) +
                               " (fix the row, or pass --on-error skip to skip and count bad rows)");
        return;
      }
      if (t.null[i]) ++d->stats.skipped_missing_field;
      else ++d->stats.skipped_invalid_utf8;
      continue;
    }
    d->bytes += static_cast<int64_t>(text.size());
    DocVerdict fields;
    if (nf > 0) {
      fields = cleaner->check_fields([&](const FieldFilter& f) {
        const size_t cell = i * nf + static_cast<size_t>(&f - cleaner->filters().data());
        const FieldValue& v = t.fields[cell];
        if (v.kind == FieldValue::Kind::kString) {
          const size_t from = cell > 0 ? t.field_ends[cell - 1] : 0;
          return f.evaluate(std::optional<std::string>(t.field_data.substr(from, t.field_ends[cell] - from)));
        }
        if (v.kind == FieldValue::Kind::kNumber) return f.evaluate(std::optional<double>(v.num));
        return f.evaluate(std::optional<std::string>());
      });
    }
    Status st = add_document(text, cleaner, fields, tok, o, d);
    if (!st.is_ok()) {
      d->error = st.with_context(where());
      return;
    }
  }
}

// Reads one Parquet row group record batch by record batch. Each batch
// becomes a TextPart that any worker may tokenize; when enough are already
// waiting, this worker tokenizes it itself. False: stopped.
bool read_row_group(Pipeline& p, const Batch& b, const ParquetTextFile& pf, const Ctx& c) {
  const int64_t group_rows = pf.row_group_rows(b.row_group);
  TextPart t;
  t.data = take_text(p);
  int part = 0;
  bool stopped = false;
  auto row_fn = [&](const ParquetRow& r) -> Status {
    if (r.text) t.data.append(r.text->data(), r.text->size());
    t.ends.push_back(t.data.size());
    t.rows.push_back(r.row);
    t.null.push_back(r.text ? 0 : 1);
    for (const FieldValue& v : *r.fields) {  // the filter columns, in filter order
      if (v.kind == FieldValue::Kind::kString) t.field_data.append(v.str.data(), v.str.size());
      t.fields.push_back(FieldValue{v.kind, {}, v.num});
      t.field_ends.push_back(t.field_data.size());
    }
    return Status::ok();
  };
  auto batch_fn = [&](bool last) -> Status {
    t.key = PartKey{b.seq, part++};
    t.last = last;
    t.file = b.file;
    t.file_bytes = group_rows > 0 ? b.file_bytes * static_cast<int64_t>(t.ends.size()) / group_rows : b.file_bytes;
    // Queue this batch; with the queue full, tokenize the oldest queued one
    // here (the writer needs the oldest first).
    TextPart mine;
    bool take = false;
    {
      std::lock_guard lock(p.mu);
      if (p.stop) {
        stopped = true;
        return internal_error("stopped");
      }
      p.parts_bytes += t.data.size();
      p.parts.emplace(t.key, std::move(t));
      if (p.parts.size() > p.max_parts) {
        mine = std::move(p.parts.begin()->second);
        p.parts.erase(p.parts.begin());
        p.parts_bytes -= mine.data.size();
        take = true;
      }
      p.cv.notify_all();
    }
    t = TextPart{};
    t.data = take_text(p);
    if (take) {
      Done d;
      d.tokens = take_tokens(p);
      tokenize_part(mine, c, &d);
      give_text(p, std::move(mine.data));
      if (!emit(p, mine.key.first, mine.key.second, std::move(d))) {
        stopped = true;
        return internal_error("stopped");
      }
    }
    if (last) return Status::ok();
    // With enough waiting, pause before reading on: a row group ahead of the
    // writer until the writer reaches it or the waiting bytes drain; the one
    // the writer is on only while the writer has its next part in hand, so
    // nothing the writer needs is ever held back.
    std::unique_lock lock(p.mu);
    p.cv.wait(lock, [&] {
      if (p.stop || p.done_bytes + p.parts_bytes <= kWaitingBudgetBytes) return true;
      if (b.seq != p.consumed) return false;
      return p.done.count(PartKey{p.consumed, p.next_part}) == 0;
    });
    if (p.stop) {
      stopped = true;
      return internal_error("stopped");
    }
    return Status::ok();
  };
  Status st = pf.read_row_group(b.row_group, c.o.batch_lines, row_fn, batch_fn);
  if (stopped) return false;
  if (!st.is_ok()) {
    Done e;
    e.error = std::move(st);
    return emit(p, b.seq, part, std::move(e));
  }
  return true;
}

void work(Pipeline& p, const Ctx& c) {
  const std::vector<std::string>& files = c.files;
  std::unique_ptr<ParquetTextFile> pf;  // this worker's reader of the Parquet file it last read
  int pf_file = -1;
  for (;;) {
    Batch b;
    TextPart t;
    bool have_part = false;
    {
      std::unique_lock lock(p.mu);
      p.cv.wait(lock, [&] {
        return p.stop || !p.parts.empty() || !p.untokenized.empty() || (p.reader_finished && p.reading == 0);
      });
      if (p.stop) return;
      if (!p.parts.empty()) {
        t = std::move(p.parts.begin()->second);
        p.parts.erase(p.parts.begin());
        p.parts_bytes -= t.data.size();
        have_part = true;
      } else if (!p.untokenized.empty()) {
        b = std::move(p.untokenized.front());
        p.untokenized.pop_front();
        if (b.row_group >= 0) ++p.reading;
      } else {
        return;  // the reader is done, and nobody can add parts any more
      }
      p.cv.notify_all();
    }
    if (have_part) {
      Done d;
      d.tokens = take_tokens(p);
      tokenize_part(t, c, &d);
      give_text(p, std::move(t.data));
      if (!emit(p, t.key.first, t.key.second, std::move(d))) return;
      continue;
    }
    if (b.row_group >= 0) {
      bool go_on = true;
      if (pf_file != b.file) {
        pf.reset();
        pf_file = -1;
        auto opened = ParquetTextFile::open(files[b.file], c.o.text_field, c.filter_columns);
        if (opened.is_ok()) {
          pf = std::move(*opened);
          pf_file = b.file;
        } else {
          Done e;
          e.error = opened.status();
          go_on = emit(p, b.seq, 0, std::move(e));
        }
      }
      if (go_on && pf) go_on = read_row_group(p, b, *pf, c);
      {
        std::lock_guard lock(p.mu);
        --p.reading;
        p.cv.notify_all();
      }
      if (!go_on) return;
      continue;
    }
    Done d;
    d.tokens = take_tokens(p);
    tokenize_batch(b, c, &d);
    give_text(p, std::move(b.data));
    d.file_bytes = b.file_bytes;
    if (!emit(p, b.seq, 0, std::move(d))) return;
  }
}

}  // namespace

Result<PreprocessStats> preprocess(const PreprocessOptions& o) {
  if (o.output_prefix.empty()) return invalid_argument("preprocess: empty --output prefix");
  if (o.shards < 1 || o.shards > 99999)
    return invalid_argument("preprocess: --shards " + std::to_string(o.shards) + " must be in 1..99999");
  if (o.workers < 1 || o.workers > 1024)
    return invalid_argument("preprocess: --workers " + std::to_string(o.workers) + " must be in 1..1024");
  if (o.batch_lines < 1) return invalid_argument("preprocess: batch_lines must be >= 1");
  if (o.text_field.empty()) return invalid_argument("preprocess: empty --text-field");
  PreprocessStats s;
  RemoteCacheOptions rc;
  rc.cache_dir = o.cache_dir;
  rc.s3 = o.s3;
  std::optional<Cleaner> cleaner;
  if (o.clean.any()) {
    LOOM_ASSIGN_OR_RETURN(Cleaner made, Cleaner::create(o.clean));
    cleaner.emplace(std::move(made));
    s.cleaned = true;
    s.clean = cleaner->new_stats();
  }
  LOOM_ASSIGN_OR_RETURN(s.inputs, expand_inputs(o.inputs, &rc));
  // Remote inputs are fetched into the cache first (remote_cache.h); the
  // manifest names them by URL.
  std::vector<char> parquet;
  for (const std::string& in : s.inputs) {
    std::string local = in;
    if (in.rfind("s3://", 0) == 0 || in.rfind("http://", 0) == 0 || in.rfind("https://", 0) == 0) {
      if (rc.cache_dir.empty()) return invalid_argument("preprocess: " + in + " is remote; pass --cache-dir DIR");
      LOOM_ASSIGN_OR_RETURN(local, fetch_to_cache(in, rc));
    }
    const bool pq = is_parquet_file(local);
    if (!pq && is_parquet_name(in))
      return parse_error(in + ": named like a Parquet file but does not start with PAR1: not a Parquet file");
    if (pq) LOOM_RETURN_IF_ERROR(parquet_available().with_context(in));
    std::error_code fec;
    s.input_bytes += static_cast<int64_t>(fs::file_size(local, fec));
    s.input_files.push_back(local);
    parquet.push_back(pq ? 1 : 0);
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, load_tokenizer(o.tokenizer));
  s.tokenizer_name = tok->name();
  s.vocab_size = tok->vocab_size();
  s.dtype = dtype_for_vocab(s.vocab_size);
  s.manifest_path = o.output_prefix + ".manifest.json";
  std::error_code ec;
  fs::path parent = fs::path(o.output_prefix).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);

  // Every output is checked before any input is read (core/output_file.h).
  LOOM_RETURN_IF_ERROR(check_output_path(s.manifest_path, "--output", false));
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (int i = 0; i < o.shards; ++i) {
    LOOM_ASSIGN_OR_RETURN(auto w, IndexedDatasetWriter::create(shard_prefix(o.output_prefix, i, o.shards), s.dtype));
    writers.push_back(std::move(w));
  }

  Ctx ctx{s.input_files, parquet, cleaner ? &*cleaner : nullptr, *tok, o, {}};
  if (cleaner)
    for (const FieldFilter& f : cleaner->filters()) ctx.filter_columns.push_back(f.field());
  DedupIndex dedup;

  Pipeline p;
  p.window = static_cast<size_t>(4 * o.workers + 4);
  p.max_parts = static_cast<size_t>(2 * o.workers);
  p.max_spares = static_cast<size_t>(o.workers + 2);
  std::vector<std::thread> threads;
  threads.emplace_back(read_all, std::ref(p), std::cref(ctx));
  for (int i = 0; i < o.workers; ++i)
    threads.emplace_back(work, std::ref(p), std::cref(ctx));
  auto stop_all = [&] {
    {
      std::lock_guard lock(p.mu);
      p.stop = true;
      p.cv.notify_all();
    }
    for (auto& t : threads) t.join();
    threads.clear();
  };

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto last_report = t0;
  auto report = [&](bool final) {
    if (!o.progress) return;
    PreprocessProgress pr;
    pr.bytes_read = s.bytes_read;
    pr.documents = s.documents;
    pr.tokens = s.tokens;
    pr.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    pr.mb_per_s = pr.elapsed_s > 0 ? s.bytes_read / pr.elapsed_s / 1e6 : 0;
    pr.docs_per_s = pr.elapsed_s > 0 ? s.documents / pr.elapsed_s : 0;
    pr.input_bytes_done = std::min(s.input_bytes_done, s.input_bytes);
    pr.input_bytes_total = s.input_bytes;
    double frac = s.input_bytes > 0 ? static_cast<double>(pr.input_bytes_done) / static_cast<double>(s.input_bytes) : 0;
    pr.eta_s = final ? 0 : frac > 0.001 ? pr.elapsed_s * (1 / frac - 1) : -1;
    pr.final = final;
    o.progress(pr);
  };

  // In-order writer: item `consumed` is written only after items
  // 0..consumed-1, and its parts in order.
  int64_t doc_k = 0;
  int part = 0;
  for (;;) {
    Done d;
    {
      std::unique_lock lock(p.mu);
      p.cv.wait(lock, [&] {
        return p.done.count(PartKey{p.consumed, part}) || (p.reader_finished && p.consumed == p.produced);
      });
      auto it = p.done.find(PartKey{p.consumed, part});
      if (it == p.done.end()) break;  // reader finished and every item is written
      d = std::move(it->second);
      p.done.erase(it);
      p.done_bytes -= d.held;
      if (d.last) {
        ++p.consumed;
        part = 0;
      } else {
        ++part;
      }
      p.next_part = part;
      p.cv.notify_all();
    }
    if (!d.error.is_ok()) {
      stop_all();
      return d.error;
    }
    s.lines.lines += d.stats.lines;
    s.lines.documents += d.stats.documents;
    s.lines.skipped_malformed += d.stats.skipped_malformed;
    s.lines.skipped_missing_field += d.stats.skipped_missing_field;
    s.lines.skipped_invalid_utf8 += d.stats.skipped_invalid_utf8;
    s.bytes_read += d.bytes;
    s.input_bytes_done += d.file_bytes;
    if (d.dropped.documents > 0) s.clean += d.dropped;
    size_t start = 0;
    for (size_t k = 0; k < d.doc_ends.size(); ++k) {
      const size_t end = d.doc_ends[k];
      size_t n = end - start;
      if (cleaner) {
        // Duplicates are decided here, in input order: the first copy stays.
        DocVerdict v = d.verdicts[k];
        v.reason = dedup.admit(d.keys[k]);
        s.clean.add(v);
        if (!v.kept()) {
          start = end;
          continue;
        }
      }
      if (n == 0) {
        ++s.empty_documents;
        continue;
      }
      Status ws = writers[doc_k % o.shards]->add_document(d.tokens.data() + start, n);
      if (!ws.is_ok()) {
        stop_all();
        return ws;
      }
      ++doc_k;
      s.tokens += static_cast<int64_t>(n);
      start = end;
    }
    s.documents = doc_k;
    give_tokens(p, std::move(d.tokens));
    if (o.progress && std::chrono::duration<double>(Clock::now() - last_report).count() >= o.progress_interval_s) {
      last_report = Clock::now();
      report(false);
    }
  }
  Status reader_status = p.reader_status;
  stop_all();
  if (!reader_status.is_ok()) return reader_status;

  // Nothing to train on: publish nothing rather than empty shards that
  // `loom execute` could only refuse later.
  if (s.documents == 0) {
    writers.clear();  // unfinalized: their temporaries are removed
    return invalid_argument("preprocess: no documents in the input (" + std::to_string(s.lines.lines) + " lines, " +
                            std::to_string(s.empty_documents) + " empty, " + std::to_string(s.lines.skipped()) +
                            " skipped" +
                            (s.cleaned ? ", " + std::to_string(s.clean.removed()) + " removed by cleaning" : "") +
                            "): nothing written; check --text-key (\"" + o.text_field + "\"), the cleaning options "
                            "and the input");
  }
  for (int i = 0; i < o.shards; ++i) {
    // Documents go round robin, so only the last shards can be empty (fewer
    // documents than --shards): they are not written and not listed.
    if (writers[i]->documents() == 0) {
      writers[i].reset();
      ++s.empty_shards;
      continue;
    }
    ShardStats sh;
    std::string prefix = shard_prefix(o.output_prefix, i, o.shards);
    sh.documents = writers[i]->documents();
    sh.tokens = writers[i]->tokens();
    LOOM_RETURN_IF_ERROR(writers[i]->finalize());
    sh.bin_path = prefix + ".bin";
    sh.idx_path = prefix + ".idx";
    sh.bin_bytes = static_cast<int64_t>(fs::file_size(sh.bin_path, ec));
    sh.idx_bytes = static_cast<int64_t>(fs::file_size(sh.idx_path, ec));
    if (ec) return io_error(prefix + ": finalized shard is missing (" + ec.message() + ")");
    LOOM_ASSIGN_OR_RETURN(sh.bin_xxh64, xxh64_file(sh.bin_path));
    LOOM_ASSIGN_OR_RETURN(sh.idx_xxh64, xxh64_file(sh.idx_path));
    s.shards.push_back(std::move(sh));
  }
  s.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  s.mb_per_s = s.elapsed_s > 0 ? s.bytes_read / s.elapsed_s / 1e6 : 0;
  report(true);
  LOOM_RETURN_IF_ERROR(write_preprocess_manifest(o, s));
  return s;
}

}  // namespace loom::data
