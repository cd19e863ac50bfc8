// loom preprocess: JSONL or Parquet -> Megatron indexed dataset (.bin/.idx + manifest).
// loom tokenizer:  train a SentencePiece model, or encode a string with one.
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/s3_options.h"
#include "core/output_file.h"
#include "core/resources.h"
#include "exec/data/preprocess.h"
#include "exec/data/tokenizer.h"

namespace loom::cli {

namespace {

std::string duration_text(double s) {
  char buf[32];
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

// One line, rewritten in place on a terminal; the final summary is on stdout.
void print_progress(const data::PreprocessProgress& p) {
  std::string eta = p.final ? "done in " + duration_text(p.elapsed_s)
                            : p.eta_s >= 0 ? "ETA " + duration_text(p.eta_s) : "ETA ?";
  double pct = p.input_bytes_total > 0 ? 100.0 * p.input_bytes_done / p.input_bytes_total : 0;
  std::fprintf(stderr, "\r\033[Kpreprocess: %3.0f%%  %lld docs (%.0f/s)  %.1f MB (%.1f MB/s)  %lld tokens  %s%s", pct,
               static_cast<long long>(p.documents), p.docs_per_s, p.bytes_read / 1e6, p.mb_per_s,
               static_cast<long long>(p.tokens), eta.c_str(), p.final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace

int cmd_preprocess(int argc, char** argv) {
  CLI::App app{"Tokenize JSONL (plain, .gz, .zst) or Parquet into Megatron indexed dataset shards (.bin/.idx).",
               "loom preprocess"};
  data::PreprocessOptions o;
  std::string on_error = "fail";
  bool no_eod = false;
  bool quiet = false;
  app.add_option("--input", o.inputs,
                 "JSONL or Parquet files, directories (their *.jsonl[.gz|.zst] and *.parquet), glob patterns, "
                 "s3:// objects, folders (s3://b/dir/) and patterns, or http(s):// objects")
      ->required();
  app.add_option("--output", o.output_prefix, "output prefix: PREFIX.bin/.idx, or PREFIX_00000.bin/.idx... with --shards")
      ->required();
  app.add_option("--text-key,--text-field", o.text_field, "JSON field (Parquet: column) holding the document text")
      ->capture_default_str();
  o.cache_dir = user_cache_dir();
  app.add_option("--cache-dir", o.cache_dir, "where remote inputs are fetched (default $LOOM_CACHE_DIR or ~/.cache/loom)");
  add_s3_options(app, &o.s3);
  app.add_option("--tokenizer", o.tokenizer,
                 "byte, a SentencePiece .model path, or gpt2:DIR (vocab.json + merges.txt)")->capture_default_str();
  app.add_option("--shards", o.shards, "output shards; document k goes to shard k mod N")->capture_default_str();
  app.add_option("--workers", o.workers, "tokenizer threads (plus one reader thread)")->capture_default_str();
  app.add_flag("--no-eod", no_eod, "do not append the EOD token to each document");
  app.add_option("--on-error", on_error, "bad line or row: fail (stop, name FILE:LINE or FILE: row N) or skip (count it)")
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "no progress line (there is none anyway when stderr is not a terminal)");
  // Cleaning before tokenizing (docs/data.md "Cleaning"); every step off unless asked for.
  std::string normalize = "none";
  data::CleanOptions& c = o.clean;
  app.add_option("--normalize", normalize, "Unicode normalization of the text: none, nfc or nfkc")
      ->capture_default_str()->group("Cleaning");
  app.add_flag("--strip-control", c.strip_control,
               "remove control characters (Cc but \\t \\n \\r; BOM and other format controls ftfy removes)")
      ->group("Cleaning");
  app.add_option("--min-chars", c.min_chars, "drop documents with fewer code points (after cleaning)")->group("Cleaning");
  app.add_option("--max-chars", c.max_chars, "drop documents with more code points (0: no limit)")->group("Cleaning");
  app.add_option("--min-words", c.min_words, "drop documents with fewer whitespace-separated words")->group("Cleaning");
  app.add_flag("--dedup", c.exact_dedup,
               "drop exact duplicates (64-bit hash of the cleaned text; the first copy in input order is kept)")
      ->group("Cleaning");
  app.add_flag("--near-dedup", c.near_dedup, "drop near duplicates by MinHash-LSH (datatrove's parameters by default)")
      ->group("Cleaning");
  app.add_option("--minhash-ngram", c.minhash.ngram, "words per shingle")->capture_default_str()->group("Cleaning");
  app.add_option("--minhash-bands", c.minhash.bands, "LSH bands")->capture_default_str()->group("Cleaning");
  app.add_option("--minhash-rows", c.minhash.rows, "hashes per band")->capture_default_str()->group("Cleaning");
  app.add_option("--minhash-seed", c.minhash.seed, "seed of the hash permutations")->capture_default_str()->group("Cleaning");
  app.add_option("--filter", c.field_filters,
                 "keep documents whose field passes, as tagged by an upstream tool: lang=en, lang=en,fr, "
                 "quality>=0.5, flag!=spam (repeatable; JSONL field or Parquet column)")
      ->group("Cleaning");
  if (int rc = parse_args(app, "preprocess", argc, argv); rc >= 0) return rc;

  auto form = data::parse_normalization(normalize);
  if (!form.is_ok()) return fail("preprocess", form.status().with_context("--normalize"));
  c.normalization = *form;
  auto policy = data::parse_on_error(on_error);
  if (!policy.is_ok()) return fail("preprocess", policy.status());
  o.on_error = *policy;
  o.append_eod = !no_eod;
  const bool tty = isatty(fileno(stderr));
  if (!quiet && tty) o.progress = print_progress;
  // The pipeline's buffers are megabytes each and freed by other threads than
  // the ones that made them. glibc's mmap threshold rises with such frees, so
  // they end up in its arenas and the resident size grows with the input
  // (+150 MB for a 280 MB Parquet file) although the pipeline holds a bounded
  // amount. A fixed threshold returns them to the system (+11 MB).
  // glibc's own MALLOC_MMAP_THRESHOLD_ (or GLIBC_TUNABLES) wins when set.
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_") && !std::getenv("GLIBC_TUNABLES")) ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  auto s = data::preprocess(o);
  if (!s.is_ok()) {
    if (o.progress) std::fprintf(stderr, "\n");
    return fail("preprocess", s.status());
  }
  std::printf("inputs: %zu file(s), %lld lines, %.1f MB\n", s->input_files.size(),
              static_cast<long long>(s->lines.lines), s->bytes_read / 1e6);
  std::printf("documents: %lld written", static_cast<long long>(s->documents));
  if (s->empty_documents) std::printf(", %lld empty dropped", static_cast<long long>(s->empty_documents));
  if (s->lines.skipped())
    std::printf(", %lld lines skipped (%lld malformed JSON, %lld missing field, %lld invalid UTF-8)",
                static_cast<long long>(s->lines.skipped()), static_cast<long long>(s->lines.skipped_malformed),
                static_cast<long long>(s->lines.skipped_missing_field),
                static_cast<long long>(s->lines.skipped_invalid_utf8));
  if (s->cleaned) {
    const data::CleanStats& cs = s->clean;
    std::printf("\ncleaning: %lld of %lld documents kept", static_cast<long long>(cs.kept),
                static_cast<long long>(cs.documents));
    auto item = [](const char* what, int64_t n) {
      if (n) std::printf(", %lld %s", static_cast<long long>(n), what);
    };
    item("too short", cs.too_short);
    item("too long", cs.too_long);
    item("too few words", cs.too_few_words);
    item("exact duplicates", cs.exact_duplicates);
    item("near duplicates", cs.near_duplicates);
    item("invalid UTF-8", cs.invalid_utf8);
    item("without a filter field", cs.filter_field_missing);
    for (size_t i = 0; i < cs.filtered_by_field.size(); ++i)
      if (cs.filtered_by_field[i])
        std::printf(", %lld failed %s", static_cast<long long>(cs.filtered_by_field[i]), c.field_filters[i].c_str());
    if (cs.normalized_changed || cs.control_stripped_docs)
      std::printf("; text changed by normalization in %lld, control characters stripped from %lld",
                  static_cast<long long>(cs.normalized_changed), static_cast<long long>(cs.control_stripped_docs));
  }
  std::printf("\ntokens: %lld (tokenizer %s, vocab %lld, dtype %s)\n", static_cast<long long>(s->tokens),
              s->tokenizer_name.c_str(), static_cast<long long>(s->vocab_size), data::dtype_name(s->dtype));
  for (const auto& sh : s->shards)
    std::printf("  %s  %lld docs  %lld tokens  %lld bytes\n", sh.bin_path.c_str(),
                static_cast<long long>(sh.documents), static_cast<long long>(sh.tokens),
                static_cast<long long>(sh.bin_bytes));
  if (s->empty_shards)
    std::printf("  (%d of %d shards not written: %lld documents, fewer than --shards)\n", s->empty_shards,
                o.shards, static_cast<long long>(s->documents));
  std::printf("manifest: %s\n", s->manifest_path.c_str());
  std::printf("time: %.2f s, %.1f MB/s\n", s->elapsed_s, s->mb_per_s);
  return 0;
}

int cmd_tokenizer(int argc, char** argv) {
  CLI::App app{"Train a SentencePiece tokenizer, or encode text with one.", "loom tokenizer"};
  app.require_subcommand(1);

  CLI::App* train = app.add_subcommand("train", "train a SentencePiece model (writes PREFIX.model and PREFIX.vocab)");
  std::vector<std::string> inputs;
  std::string prefix, model_type = "bpe";
  int vocab_size = 0;
  data::TrainOptions topt;
  train->add_option("--input", inputs, "plain text (one sentence per line) or JSONL files")->required();
  train->add_option("--output", prefix, "model prefix")->required();
  train->add_option("--vocab-size", vocab_size, "pieces in the vocabulary (>= 300)")->required();
  train->add_option("--model-type", model_type, "bpe or unigram")->capture_default_str();
  train->add_option("--text-field", topt.text_field, "JSON field of JSONL inputs")->capture_default_str();
  train->add_option("--threads", topt.threads, "trainer threads")->capture_default_str();

  CLI::App* encode = app.add_subcommand("encode", "print the token ids of TEXT (and check the round trip)");
  std::string model = "byte", text;
  encode->add_option("--model", model, "byte, a SentencePiece .model path, or gpt2:DIR (vocab.json + merges.txt)")
      ->capture_default_str();
  encode->add_option("text", text, "text to encode")->required();

  if (int rc = parse_args(app, "tokenizer", argc, argv); rc >= 0) return rc;

  if (train->parsed()) {
    for (const char* ext : {".model", ".vocab"})  // SentencePiece writes them itself: check first
      if (Status c = check_output_path(prefix + ext, "--output", false); !c.is_ok()) return fail("tokenizer", c);
    Status s = data::train_sentencepiece(inputs, prefix, vocab_size, model_type, topt);
    if (!s.is_ok()) return fail("tokenizer", s);
    auto tok = data::load_tokenizer(prefix + ".model");
    if (!tok.is_ok()) return fail("tokenizer", tok.status());
    std::printf("wrote %s.model and %s.vocab (%s, vocab %lld, EOD id %d)\n", prefix.c_str(), prefix.c_str(),
                model_type.c_str(), static_cast<long long>((*tok)->vocab_size()), (*tok)->eod_id());
    return 0;
  }
  auto tok = data::load_tokenizer(model);
  if (!tok.is_ok()) return fail("tokenizer", tok.status());
  auto ids = (*tok)->encode(text);
  if (!ids.is_ok()) return fail("tokenizer", ids.status());
  for (size_t i = 0; i < ids->size(); ++i) std::printf("%s%d", i ? " " : "", (*ids)[i]);
  std::printf("\n");
  bool round_trip = (*tok)->decode(*ids) == text;
  std::fprintf(stderr, "%zu tokens for %zu bytes (%s, EOD id %d); round trip %s\n", ids->size(), text.size(),
               (*tok)->name().c_str(), (*tok)->eod_id(), round_trip ? "ok" : "DIFFERS");
  return round_trip ? 0 : 1;
}

}  // namespace loom::cli
