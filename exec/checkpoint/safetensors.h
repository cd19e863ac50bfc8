// Export a Loom checkpoint's model weights as one Hugging Face safetensors
// file (consolidated fp32, "F32"), with Hugging Face names and orientations.
// The name mapping is in docs/formats/checkpoint.md ("safetensors export").
#pragma once

#include <string>

#include "core/status.h"
#include "exec/checkpoint/checkpoint.h"

namespace loom::ckpt {

// `family`: "gpt2" or "llama". The true vocabulary size V comes from the
// checkpoint metadata's model config ("vocab_size" in the object under
// "model_config", "model" or "config", else at the top level); only the
// first V rows of the padded embedding / lm_head are exported. Without it
// the padded Vp rows are exported. Writes OUT.tmp, fsyncs, renames.
// Errors: kNotFound for a missing tensor, kInvalidArgument for an unknown
// family or a light checkpoint.
Status export_safetensors(const CheckpointReader& reader, const std::string& out_path, const std::string& family);

// The model config object of a checkpoint's metadata (see above), or null.
std::string checkpoint_model_config(const CheckpointReader& reader);

}  // namespace loom::ckpt
