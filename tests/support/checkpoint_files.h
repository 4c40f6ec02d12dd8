// checkpoint_files.h — a checkpoint's contents for tests that compare the checkpoints of two
// runs: the bytes of its data files (the same layout writes the same parts), or its tensors by
// name (another layout splits them into other parts).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "host/io/checkpoint.h"
#include "host/io/tensor_files.h"

namespace carousel::testing {

// Data file name -> bytes (model and optimizer files, parts included); none is a test failure.
inline std::map<std::string, std::vector<char>> checkpoint_data_bytes(
    const std::filesystem::path& dir) {
  std::map<std::string, std::vector<char>> out;
  for (const auto& name : checkpoint_data_files(dir.string())) {
    std::ifstream in(dir / name, std::ios::binary);
    out[name] = std::vector<char>(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_FALSE(out.empty()) << "no checkpoint data files in " << dir;
  return out;
}

// Tensor name -> float32 values, from every data file of a verified checkpoint.
inline std::map<std::string, std::vector<float>> checkpoint_tensors(
    const std::filesystem::path& dir) {
  verify_checkpoint(dir.string());
  const TensorFiles files(dir, checkpoint_data_files(dir.string()), /*widen=*/false);
  std::map<std::string, std::vector<float>> out;
  for (const auto& name : files.names()) out[name] = files.read_f32(name, files.find(name)->shape);
  EXPECT_FALSE(out.empty()) << "no tensors in " << dir;
  return out;
}

}  // namespace carousel::testing
