#include "exec/data/preprocess.h"

#include "core/output_file.h"

#include <xxhash.h>

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
#include <thread>

#include "exec/data/tokenizer.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchMaxBytes = 4 << 20;  // a batch closes at batch_lines lines or this many bytes

// Lines of one file, read by the reader thread.
struct Batch {
  int64_t seq = 0;
  int file = 0;
  std::string data;               // the lines, back to back
  std::vector<size_t> ends;       // end offset of each line in data
  std::vector<int64_t> line_nos;  // 1-based line number of each line
  int64_t bytes = 0;              // decompressed bytes consumed (blank lines included)
};

// A batch after tokenization, in the same order.
struct Done {
  std::vector<int32_t> tokens;    // every document back to back
  std::vector<size_t> doc_ends;   // end offset of each document in tokens
  JsonlStats stats;
  Status error;                   // first bad line, OnError::kFail only
  int64_t bytes = 0;
};

// State shared by the reader, the workers and the writing (calling) thread.
struct Pipeline {
  std::mutex mu;
  std::condition_variable cv;  // one cv: every wait re-checks its own predicate
  std::deque<Batch> untokenized;  // read by the reader, waiting for a worker
  std::map<int64_t, Done> done;
  int64_t produced = 0, consumed = 0;
  size_t window = 8;  // batches in flight (read but not yet written)
  bool reader_finished = false;
  bool stop = false;
  Status reader_status;
};

void read_all(Pipeline& p, const std::vector<std::string>& files, int batch_lines) {
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
    auto reader = LineReader::open(files[f]);
    if (!reader.is_ok()) return finish(reader.status());
    Batch b;
    b.file = f;
    int64_t last_bytes = 0;
    for (;;) {
      auto more = (*reader)->next_line(&line);
      if (!more.is_ok()) return finish(more.status());
      if (*more && !is_blank_line(line)) {
        b.data += line;
        b.ends.push_back(b.data.size());
        b.line_nos.push_back((*reader)->line_number());
      }
      bool full = static_cast<int>(b.ends.size()) >= batch_lines || b.data.size() >= kBatchMaxBytes;
      if ((full || !*more) && (!b.ends.empty() || (*reader)->bytes_out() > last_bytes)) {
        b.bytes = (*reader)->bytes_out() - last_bytes;
        last_bytes = (*reader)->bytes_out();
        if (!push(std::move(b))) return;
        b = Batch{};
        b.file = f;
      }
      if (!*more) break;
    }
  }
  finish(Status::ok());
}

void tokenize_batch(const Batch& b, const std::string& file, const Tokenizer& tok, const PreprocessOptions& o,
                    Done* d) {
  std::string text, why;
  d->bytes = b.bytes;
  size_t start = 0;
  for (size_t i = 0; i < b.ends.size(); ++i) {
    std::string_view line(b.data.data() + start, b.ends[i] - start);
    start = b.ends[i];
    ++d->stats.lines;
    LineError e = extract_text(line, o.text_field, &text, &why);
    if (e == LineError::kNone) {
      auto ids = tok.encode(text);
      if (!ids.is_ok()) {
        d->error = ids.status().with_context(file + ":" + std::to_string(b.line_nos[i]));
        return;
      }
      d->tokens.insert(d->tokens.end(), ids->begin(), ids->end());
      if (o.append_eod) d->tokens.push_back(tok.eod_id());
      d->doc_ends.push_back(d->tokens.size());
      ++d->stats.documents;
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

void work(Pipeline& p, const std::vector<std::string>& files, const Tokenizer& tok, const PreprocessOptions& o) {
  for (;;) {
    Batch b;
    {
      std::unique_lock lock(p.mu);
      p.cv.wait(lock, [&] { return p.stop || !p.untokenized.empty() || p.reader_finished; });
      if (p.stop || p.untokenized.empty()) return;
      b = std::move(p.untokenized.front());
      p.untokenized.pop_front();
    }
    Done d;
    tokenize_batch(b, files[b.file], tok, o, &d);
    std::lock_guard lock(p.mu);
    p.done.emplace(b.seq, std::move(d));
    p.cv.notify_all();
  }
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status write_manifest(const PreprocessOptions& o, const PreprocessStats& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardStats& sh : s.shards) {
    shards.push_back({{"bin", fs::path(sh.bin_path).filename().string()},
                      {"idx", fs::path(sh.idx_path).filename().string()},
                      {"documents", sh.documents},
                      {"tokens", sh.tokens},
                      {"bin_bytes", sh.bin_bytes},
                      {"idx_bytes", sh.idx_bytes},
                      {"bin_xxh64", hex64(sh.bin_xxh64)},
                      {"idx_xxh64", hex64(sh.idx_xxh64)}});
  }
  nlohmann::json m = {
      {"format", "loom-preprocess-manifest"},
      {"version", 1},
      {"tokenizer", {{"spec", o.tokenizer}, {"name", s.tokenizer_name}, {"vocab_size", s.vocab_size}}},
      {"dtype", dtype_name(s.dtype)},
      {"dtype_code", static_cast<int>(s.dtype)},
      {"append_eod", o.append_eod},
      {"text_field", o.text_field},
      {"shard_assignment", "round_robin"},
      {"inputs", s.input_files},
      {"documents", s.documents},
      {"tokens", s.tokens},
      {"empty_documents", s.empty_documents},
      {"skipped_lines",
       {{"malformed_json", s.lines.skipped_malformed},
        {"missing_field", s.lines.skipped_missing_field},
        {"invalid_utf8", s.lines.skipped_invalid_utf8}}},
      {"shards", shards}};
  WriteOptions wo;
  wo.durable = true;
  wo.allow_stdout = false;
  return write_output_file(s.manifest_path, m.dump(2) + "\n", wo);
}

}  // namespace

std::string shard_prefix(const std::string& prefix, int i, int n) {
  if (n == 1) return prefix;
  char buf[16];
  std::snprintf(buf, sizeof buf, "_%05d", i);
  return prefix + buf;
}

Result<uint64_t> xxh64_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return not_found(path + ": cannot open for checksum");
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH64_update(st, buf.data(), n);
  bool bad = std::ferror(f);
  std::fclose(f);
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  if (bad) return io_error(path + ": read failed while checksumming");
  return h;
}

Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in, ec))
        if (e.is_regular_file() && is_jsonl_name(e.path().filename().string())) found.push_back(e.path().string());
      if (ec) return io_error(in + ": cannot list directory (" + ec.message() + ")");
      if (found.empty())
        return invalid_argument(in + ": directory has no *.jsonl, *.jsonl.gz or *.jsonl.zst files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      return not_found(in + ": no such file or directory");
    }
  }
  if (files.empty()) return invalid_argument("preprocess: no inputs; pass --input FILE|DIR");
  return files;
}

Result<PreprocessStats> preprocess(const PreprocessOptions& o) {
  if (o.output_prefix.empty()) return invalid_argument("preprocess: empty --output prefix");
  if (o.shards < 1 || o.shards > 99999)
    return invalid_argument("preprocess: --shards " + std::to_string(o.shards) + " must be in 1..99999");
  if (o.workers < 1 || o.workers > 1024)
    return invalid_argument("preprocess: --workers " + std::to_string(o.workers) + " must be in 1..1024");
  if (o.batch_lines < 1) return invalid_argument("preprocess: batch_lines must be >= 1");
  if (o.text_field.empty()) return invalid_argument("preprocess: empty --text-field");
  PreprocessStats s;
  LOOM_ASSIGN_OR_RETURN(s.input_files, expand_inputs(o.inputs));
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

  Pipeline p;
  p.window = static_cast<size_t>(4 * o.workers + 4);
  std::vector<std::thread> threads;
  threads.emplace_back(read_all, std::ref(p), std::cref(s.input_files), o.batch_lines);
  for (int i = 0; i < o.workers; ++i)
    threads.emplace_back(work, std::ref(p), std::cref(s.input_files), std::cref(*tok), std::cref(o));
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
    pr.final = final;
    o.progress(pr);
  };

  // In-order writer: batch `consumed` is written only after batches 0..consumed-1.
  int64_t doc_k = 0;
  for (;;) {
    Done d;
    {
      std::unique_lock lock(p.mu);
      p.cv.wait(lock, [&] { return p.done.count(p.consumed) || (p.reader_finished && p.consumed == p.produced); });
      auto it = p.done.find(p.consumed);
      if (it == p.done.end()) break;  // reader finished and every batch is written
      d = std::move(it->second);
      p.done.erase(it);
      ++p.consumed;
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
    size_t start = 0;
    for (size_t end : d.doc_ends) {
      size_t n = end - start;
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
                            " skipped): nothing written; check --text-field (\"" + o.text_field + "\") and the input");
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
  LOOM_RETURN_IF_ERROR(write_manifest(o, s));
  return s;
}

}  // namespace loom::data
