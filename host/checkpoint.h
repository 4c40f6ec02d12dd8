// checkpoint.h — saving and restoring a run (docs/model.md#checkpoints).
//
// <base_output_directory>/<run_name>/checkpoints/<step>/ holds
//   model.safetensors      full (unsharded) parameters under Hugging Face Llama names
//   config.json            Hugging Face LlamaConfig, so `transformers` can open the directory
//   optimizer.safetensors  AdamW moments "<param name>.exp_avg" / ".exp_avg_sq" (global names:
//                          a run may resume with another parallel layout)
//   state.json             completed steps (= the data position), the full carousel config
//   manifest.json          byte size and CRC32 of every file above; written last
// A checkpoint is written into a temporary directory, every file fsync'ed, the manifest last,
// then renamed into place: a crash leaves either the whole checkpoint or none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cuda/backend.h"
#include "host/config.h"
#include "models/params.h"

namespace carousel {

struct TrainingState {
  std::int64_t step = 0;           // completed steps; the next step to run
  std::int64_t skipped_steps = 0;  // of those, skipped as non-finite (no update applied)
};

struct CheckpointContents {
  const ParamSet* params = nullptr;  // required
  const ParamSet* adam_m = nullptr;  // optimizer moments, optional when loading parameters only
  const ParamSet* adam_v = nullptr;
};

// Writes checkpoints/<state.step>/ under the run directory; returns its path. Refuses to
// replace an existing checkpoint directory.
std::string save_checkpoint(Backend& be, const Config& cfg, const CheckpointContents& contents,
                            const TrainingState& state);

// The newest complete checkpoint of the run (a directory with a manifest), if any.
std::optional<std::string> latest_checkpoint(const Config& cfg);

// Verifies the manifest (sizes, CRC32) and copies the tensors into `contents` (parameters, and
// the moments when given). Every tensor must exist with the table's shape and dtype float32;
// errors name the file, the tensor and both shapes. Returns the saved training state.
TrainingState load_checkpoint(Backend& be, const std::string& directory,
                              const CheckpointContents& contents);

}  // namespace carousel
