// tensor_files.h — the tensors of a directory's safetensors files, found by name and read one at
// a time as float32.
//
// Checkpoints are written in parts (one file pair per writing rank) and Hugging Face models in
// shards; a resuming rank needs only the tensors of its own stage, and no process should hold a
// whole 8B model to hand each rank its part. TensorFiles opens the files' headers once and reads
// one tensor per call (safetensors.h: pread), from any thread.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/io/safetensors.h"

namespace carousel {

class TensorFiles {
 public:
  // Opens the headers of `files` (names in `dir`). A tensor name in two files is an error naming
  // both. `widen`: BF16 and F16 tensors read as float32 (Hugging Face weights); otherwise every
  // tensor read must be F32 (carousel's checkpoints).
  TensorFiles(const std::filesystem::path& dir, const std::vector<std::string>& files, bool widen);

  // Tensors are asked for by carousel's names from here on; `file_name` gives a tensor's name in
  // the files (a Hugging Face architecture that names them otherwise: hf_architectures.h).
  void use_file_names(std::function<std::string(const std::string&)> file_name) {
    file_name_ = std::move(file_name);
  }

  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
  const std::string& path_of(const std::string& name) const;    // the file holding `name`
  std::vector<std::string> names() const;                       // sorted

  // The tensor `name` as float32, checked: present, `shape`, a dtype this reader takes, every
  // value finite. Errors name the file and the tensor.
  std::vector<float> read_f32(const std::string& name, const Shape& shape) const;

 private:
  bool widen_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> file_of_;  // by the name in the files
  std::function<std::string(const std::string&)> file_name_ = [](const std::string& n) {
    return n;
  };
};

}  // namespace carousel
