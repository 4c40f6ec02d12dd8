// safetensors.cpp — writer and validating reader of the safetensors format.
#include "host/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cuda/error.h"

namespace carousel {

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
  }
  return "?";
}

namespace {
bool parse_dtype(const std::string& s, DType& out) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::I32}) {
    if (s == safetensors_dtype(d)) {
      out = d;
      return true;
    }
  }
  return false;
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = std::uint64_t(numel(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  CAROUSEL_CHECK(out.good(), "cannot create '{}'", path);
  const std::uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& t : tensors) {
    out.write(static_cast<const char*>(t.data),
              std::streamsize(numel(t.shape) * dtype_size(t.dtype)));
  }
  out.flush();
  CAROUSEL_CHECK(out.good(), "writing '{}' failed (disk full?)", path);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  CAROUSEL_CHECK(in.good() && std::filesystem::is_regular_file(path), "cannot open '{}'", path);
  bytes_.assign(std::istreambuf_iterator<char>(in), {});
  CAROUSEL_CHECK(bytes_.size() >= 8, "'{}' is {} bytes: too short for a safetensors file", path,
                 bytes_.size());
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes_[i])) << (8 * i);
  CAROUSEL_CHECK(n <= bytes_.size() - 8, "'{}': header length {} exceeds the file size {}", path,
                 n, bytes_.size());
  data_start_ = 8 + n;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes_.begin() + 8, bytes_.begin() + 8 + std::ptrdiff_t(n));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}': the safetensors header is not valid JSON: {}", path, e.what());
  }
  CAROUSEL_CHECK(header.is_object(), "'{}': the safetensors header is not a JSON object", path);
  const std::uint64_t data_size = bytes_.size() - data_start_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : value.items()) metadata_[k] = v.get<std::string>();
      continue;
    }
    SafetensorsEntry e;
    try {
      CAROUSEL_CHECK(parse_dtype(value.at("dtype").get<std::string>(), e.dtype),
                     "'{}': tensor '{}' has unsupported dtype {}", path, name,
                     value.at("dtype").dump());
      e.shape = value.at("shape").get<Shape>();
      const auto off = value.at("data_offsets").get<std::vector<std::uint64_t>>();
      CAROUSEL_CHECK(off.size() == 2, "'{}': tensor '{}' data_offsets must have 2 entries", path,
                     name);
      e.begin = off[0];
      e.end = off[1];
    } catch (const nlohmann::json::exception& ex) {
      fail("'{}': tensor '{}' has a malformed header entry: {}", path, name, ex.what());
    }
    const std::uint64_t expected = std::uint64_t(numel(e.shape)) * dtype_size(e.dtype);
    CAROUSEL_CHECK(e.begin <= e.end && e.end <= data_size && e.end - e.begin == expected,
                   "'{}': tensor '{}' ({} {}) has data_offsets [{}, {}] but needs {} bytes inside "
                   "a data section of {} bytes (truncated or corrupt)",
                   path, name, safetensors_dtype(e.dtype), shape_str(e.shape), e.begin, e.end,
                   expected, data_size);
    ranges.emplace_back(e.begin, e.end);
    entries_[name] = e;
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    CAROUSEL_CHECK(ranges[i].first >= ranges[i - 1].second,
                   "'{}': tensor data ranges overlap (corrupt file)", path);
  }
}

const void* SafetensorsFile::data(const std::string& name) const {
  const auto it = entries_.find(name);
  CAROUSEL_CHECK(it != entries_.end(), "'{}' has no tensor '{}'", path_, name);
  return bytes_.data() + data_start_ + it->second.begin;
}

}  // namespace carousel
