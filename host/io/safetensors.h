// safetensors.h — our reader and writer of the safetensors format (Hugging Face).
//
// Layout: 8 bytes little-endian u64 N, then N bytes of JSON header
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"k": "v"}}
// then the tensor bytes; offsets are relative to the end of the header. The header is padded
// with spaces to a multiple of 8 bytes so tensor data stays aligned.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compute/dtype.h"
#include "compute/tensor.h"

namespace carousel {

struct SafetensorsInput {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data;  // numel(shape) * dtype_size(dtype) bytes
};

// Writes `path` (no fsync; callers that need durability fsync the file), opened as every output
// is (host/io/files.h; `within`: the run directory, when `path` is below it).
void write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::string& within = "");

struct SafetensorsEntry {
  // The header's dtype. F16 is a file-only dtype (no DType: carousel never computes in it;
  // host/io/hf_import.cpp widens it to float32), so `dtype` is empty for it.
  std::optional<DType> dtype;
  std::string dtype_name;  // "F32", "F64", "BF16", "I32" or "F16"
  std::size_t element_size = 0;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // offsets into the data section
};

// A file's header, parsed on open; tensors are read one at a time when asked for (pread), so a
// process holds the tensors it reads, never the whole file. Every entry is validated on open:
// known dtype, offsets inside the file, size = numel * dtype size, and together the tensors
// cover the data section exactly (no overlap, hole or trailing byte: a header length a few bytes
// off cannot shift every tensor). Non-regular files (FIFOs, directories) are refused unopened.
// Errors name the file, the tensor and the field. Reads are safe from several threads.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<char> read(const std::string& name) const;  // its bytes; throws if absent
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;  // file offset of the data section
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

const char* safetensors_dtype(DType dtype);  // "F32", "F64", "BF16", "I32" (and "F16" on read)

// Loaded weights and optimizer state are checked at the door: `values` (n float32, possibly
// unaligned, as read from `file`) must all be finite, else one error naming the file, the tensor,
// the first bad value with its index in `shape`, and how many there are — instead of a step 1
// that blames whichever parameter's gradient overflows first.
void check_finite_f32(const void* values, const Shape& shape, const std::string& file,
                      const std::string& tensor);

}  // namespace carousel
