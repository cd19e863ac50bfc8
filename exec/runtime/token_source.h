// Where training tokens come from. The loader interface the real data
// pipeline (Megatron .bin/.idx shards) plugs into; this version reads a text
// file with a byte-level tokenizer (token = byte value, vocabulary 256).
//
// Samples are addressed by their GLOBAL index (step * global_batch + i), and a
// sample's tokens depend only on (seed, global index): every layout sees the
// same data, each DP rank reading only its own rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom::exec {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // tokens(n * T) and targets(n * T) of samples [first, first + n): targets
  // are the tokens shifted by one.
  virtual Status read(int64_t first_sample, int64_t n, int64_t T, int32_t* tokens, int32_t* targets) = 0;
  virtual int64_t vocab_size() const = 0;  // ids are < vocab_size()
  virtual std::string describe() const = 0;
  // Position in the sample stream for checkpoints (JSON), and its restore.
  // Sources whose samples are a pure function of the global index are
  // stateless: "{}".
  virtual std::string state_json() const { return "{}"; }
  virtual Status restore_state(const std::string& json, int64_t next_global_sample) { return Status::ok(); }
  // After restore_state: what the run now reads that the checkpoint's run did
  // not (another dataset or mix), for a notice; empty when the same.
  virtual std::string resume_notice() const { return ""; }
};

// Byte-level tokens of a text file. Sample i starts at a pseudo-random offset
// drawn from (seed, i). Errors: file missing, empty or shorter than T + 1 bytes.
Result<std::unique_ptr<TokenSource>> open_byte_text(const std::string& path, uint64_t seed);

}  // namespace loom::exec
