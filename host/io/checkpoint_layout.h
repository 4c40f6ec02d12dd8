// checkpoint_layout.h — what the checkpoint writer (checkpoint_save.cpp) and reader
// (checkpoint.cpp) share about a checkpoint directory: the format version, the names of its data
// files, and fsync. Internal to host/io/.
#pragma once

#include <filesystem>
#include <string>

#include "host/config/config.h"

namespace carousel::checkpoint_layout {

// 2: the model and the moments may be in parts (model-00001-of-0000N.safetensors, one per writing
// rank, with Hugging Face's index). Version 1 (one file each) reads the same way.
inline constexpr int kFormatVersion = 2;

// <run directory>/checkpoints
std::filesystem::path checkpoints_dir(const Config& cfg);

// model.safetensors / optimizer.safetensors, or their parts model-00001-of-00004.safetensors ...
bool is_data_file(const std::string& name);
bool is_model_file(const std::string& name);
// Writer k of n's file of `stem` ("model", "optimizer"): Hugging Face's shard names.
std::string part_file_name(const std::string& stem, int k, int n);

// fsync of a file or directory; throws naming it (disk full or read-only).
void fsync_path(const std::filesystem::path& p);

}  // namespace carousel::checkpoint_layout
