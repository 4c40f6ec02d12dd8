// checkpoint.h — saving and restoring a run (docs/model.md#checkpoints).
//
// <base_output_directory>/<run_name>/checkpoints/<step>/ holds
//   model.safetensors      whole (unsharded) parameters under Hugging Face Llama names; with
//                          several writing ranks their parts model-00001-of-0000N.safetensors
//                          and Hugging Face's model.safetensors.index.json
//   config.json            Hugging Face LlamaConfig, so `transformers` can open the directory
//   optimizer.safetensors  AdamW moments "<param name>.exp_avg" / ".exp_avg_sq" (global names:
//                          a run may resume with another parallel layout); in parts likewise
//   state.json             completed steps (= the data position), the full carousel config
//   manifest.json          byte size and CRC32 of every file above; written last
// Each writing rank writes its own part (whole tensors: every tensor has one writer), so no rank
// or process gathers the model. A checkpoint is assembled in a temporary directory: the parts,
// then (by the finishing rank, once every part is there) the small files and the manifest, every
// file fsync'ed, then renamed into place: a crash leaves either the whole checkpoint or none (and
// a temporary directory, cleaned by the next save). Failure modes:
// docs/reliability.md#files-and-outputs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compute/backend.h"
#include "host/config/config.h"
#include "host/config/paths.h"
#include "host/io/safetensors.h"
#include "host/io/tensor_files.h"
#include "host/io/tokenizer.h"
#include "models/params.h"

namespace carousel {

struct TrainingState {
  std::int64_t step = 0;           // completed steps; the next step to run
  std::int64_t skipped_steps = 0;  // of those, skipped as non-finite (no update applied)
  // Mixture of experts with routed_bias: each layer's auxiliary-loss-free bias (models/layer.h
  // RouterBias; empty vectors for dense layers), or empty.
  std::vector<std::vector<double>> router_bias = {};
};

struct CheckpointContents {
  const ParamSet* params = nullptr;  // required
  const ParamSet* adam_m = nullptr;  // optimizer moments, optional when loading parameters only
  const ParamSet* adam_v = nullptr;
};

// A whole tensor under its global name, in host memory.
struct WholeTensor {
  std::string name;
  Shape shape;
  std::vector<float> values;  // numel(shape)
};

// One writer's share of a checkpoint.
struct CheckpointPart {
  std::vector<WholeTensor> params;   // model tensors
  std::vector<WholeTensor> moments;  // "<name>.exp_avg", "<name>.exp_avg_sq"; empty: none
  bool empty() const { return params.empty() && moments.empty(); }
};

// Where a checkpoint of `step` is assembled: checkpoints/.tmp-<step>-<owner_pid>, owner_pid the
// pid of the process that finishes it (world rank 0's), so every process names the same one.
std::string checkpoint_temp_dir(const Config& cfg, std::int64_t step, long owner_pid);

// Before any part is written, on the finishing process: creates the checkpoints directory,
// cleans partial saves, moves an unusable directory of `step` aside (a verified one is an
// error: never overwritten) and creates the empty temporary directory. Returns it.
std::string begin_checkpoint(const Config& cfg, std::int64_t step, long owner_pid);

// Writer k of n: model-<k+1>-of-<n>.safetensors and optimizer-<k+1>-of-<n>.safetensors
// (model.safetensors and optimizer.safetensors when n = 1) in `temp_dir`, fsync'ed, then
// part-<k>.json with their sizes, CRC32 and tensor names, written atomically. A failure writes
// part-<k>.failed with its message, for the finisher, and is rethrown.
void write_checkpoint_part(const std::string& temp_dir, std::int64_t step, int k, int n,
                           const CheckpointPart& part);

// The finishing process, after its own part: waits for the n parts (at most timeout_seconds;
// a failed part stops the wait with its message), then writes config.json, state.json, the
// tokenizer, model.safetensors.index.json (n > 1) and the manifest of every file, and renames
// the directory into place. Returns its path. `tokenizer` as for save_checkpoint.
std::string finish_checkpoint(const Config& cfg, const std::string& temp_dir, int n,
                              const TrainingState& state, const TokenizerInfo* tokenizer,
                              double timeout_seconds);

// One writer's whole checkpoint (begin, one part, finish): writes checkpoints/<state.step>/
// under the run directory; returns its path. Refuses to
// replace an existing checkpoint directory. `tokenizer` (the run's, read once:
// read_run_tokenizer; nullptr for none) is copied in and its bos/eos ids go into config.json;
// when its files can no longer be copied the checkpoint is saved without them (a warning).
std::string save_checkpoint(Backend& be, const Config& cfg, const CheckpointContents& contents,
                            const TrainingState& state, const TokenizerInfo* tokenizer);

// The checkpoint step directories under `root` (names of decimal digits), newest first, with
// their steps; none when `root` is not a directory. Throws carousel::Error when it cannot be
// listed.
std::vector<std::pair<std::int64_t, std::string>> step_directories(const std::string& root);

// The newest usable checkpoint of the run: the newest step directory whose manifest verifies
// (every file present with its size and CRC32). Newer directories that fail are skipped with a
// warning naming what is wrong; nothing is deleted.
std::optional<std::string> latest_checkpoint(const Config& cfg);

// The config a checkpoint was saved with (state.json: every key's value as text); empty when
// the file has none.
std::map<std::string, std::string> checkpoint_config(const std::string& directory);

// Temporary directories (checkpoints/.tmp-<step>-<pid>) that an interrupted save left behind:
// each is reported with a warning and removed, except one whose manifest verifies (the save
// stopped between the manifest and the rename), which is renamed into place when its step
// directory does not exist, and otherwise left alone. A directory of another live process is
// left alone. Safe to run in every process of a run at once. Runs on every save; returns the
// directories removed.
std::vector<std::string> clean_partial_checkpoints(const Config& cfg);

// Before step 1 (on the process that writes outputs): the run directory can be created and
// written (a file is written, fsync'ed and removed), the checkpoints path is a directory when
// checkpointing, the metrics file can be opened for appending and its file system is not full,
// no path is a remote URL. Also cleans partial checkpoints (clean_partial_checkpoints). Every
// process of a run may call it (each probes with its own file name).
void check_outputs_writable(const Config& cfg);

// Checks a checkpoint step directory as a resume would: manifest.json present and well formed,
// model.safetensors and state.json listed, every listed file present with its byte size and
// CRC32. Throws carousel::Error naming the first problem (the file and what is wrong).
void verify_checkpoint(const std::string& directory);

// max_num_checkpoints_to_keep = N > 0: after the save of checkpoint `saved_step`, keeps it and
// the newest N - 1 older checkpoints that verify (verify_checkpoint: a corrupt one takes no
// place), and removes the older complete ones (those with a manifest). Directories without a
// manifest, and any newer than the save, are left alone. Each removal renames the directory
// aside first (checkpoints/.removing-<step>-<pid>, cleaned by the next call), so an interrupted
// removal never leaves a half-deleted directory that looks like a checkpoint. Returns those
// removed.
std::vector<std::string> prune_checkpoints(const Config& cfg, std::int64_t saved_step);

// metrics_file, or <run directory>/metrics.jsonl when it is empty.
std::string metrics_file_path(const Config& cfg);

// Verifies the manifest (sizes, CRC32) and opens the checkpoint's data files (headers only),
// checked against the model table `specs` (whole tensors): every parameter, and with `moments`
// its ".exp_avg" / ".exp_avg_sq", present with its shape in float32, and no tensor the model
// lacks; errors name the file, the tensor and both shapes. Tensors are read one at a time from
// the result, so a resuming rank reads only what it holds. `verified`: the caller verified the
// manifest just before (latest_checkpoint does), so every file is not read a second time for
// its CRC32 (96 GB per process for llama3-8b with Adam).
TensorFiles open_checkpoint_tensors(const std::string& directory,
                                    const std::vector<ParamSpec>& specs, bool moments,
                                    bool verified = false);

// The saved training state (state.json).
TrainingState read_training_state(const std::string& directory);

// The checkpoint's data files present in `directory` (model, then optimizer; parts in order).
std::vector<std::string> checkpoint_data_files(const std::string& directory);

// open_checkpoint_tensors, then copies the tensors into `contents` (parameters, and the moments
// when given). Returns the saved training state.
TrainingState load_checkpoint(Backend& be, const std::string& directory,
                              const CheckpointContents& contents);

// `load_parameters_path`: the parameters of a new run, from a carousel checkpoint directory
// (manifest.json or state.json present: open_checkpoint_tensors, parameters only) or a Hugging
// Face model directory (config.json + model.safetensors or sharded with
// model.safetensors.index.json: host/io/huggingface/hf_import.h, which checks config.json against `model`).
// Opened (headers only) and checked; tensors are read from the result one at a time.
TensorFiles open_parameters(const std::string& directory, const ModelConfig& model);

// open_parameters, then every tensor copied into `params`.
void load_parameters(Backend& be, const ModelConfig& model, const std::string& directory,
                     const ParamSet& params);

}  // namespace carousel
