// tensor_files.cpp — tensors by name across safetensors files, read one at a time; BF16 / F16
// widened to float32 exactly (every bf16 and half value is a float).
#include "host/io/tensor_files.h"

#include <cstring>

#include "compute/error.h"

namespace carousel {

namespace {

// IEEE binary16 -> float32, exact (every half is a float): sign, 5 exponent bits, 10 mantissa.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0x1F) {  // infinity or NaN (payload kept)
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal half = mant * 2^-24: normalise it (a normal float)
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    bits = sign | std::uint32_t(112 - e) << 23 | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// 16-bit values (maybe unaligned) widened to float32.
std::vector<float> widen16(const std::vector<char>& bytes, bool bf16) {
  std::vector<float> out(bytes.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, sizeof(h));
    if (bf16) {
      const std::uint32_t bits = std::uint32_t(h) << 16;
      std::memcpy(&out[i], &bits, sizeof(float));
    } else {
      out[i] = half_to_float(h);
    }
  }
  return out;
}

}  // namespace

TensorFiles::TensorFiles(const std::filesystem::path& dir, const std::vector<std::string>& files,
                         bool widen)
    : widen_(widen) {
  for (const auto& name : files) {
    files_.push_back(std::make_unique<SafetensorsFile>((dir / name).string()));
    const SafetensorsFile* file = files_.back().get();
    for (const auto& [tensor, entry] : file->entries()) {
      const auto [it, fresh] = file_of_.emplace(tensor, file);
      CAROUSEL_CHECK(fresh, "tensor '{}' is in both '{}' and '{}'; each tensor belongs in one file",
                     tensor, it->second->path(), file->path());
    }
  }
}

const SafetensorsEntry* TensorFiles::find(const std::string& name) const {
  const std::string theirs = file_name_(name);
  const auto it = file_of_.find(theirs);
  return it == file_of_.end() ? nullptr : &it->second->entries().at(theirs);
}

const std::string& TensorFiles::path_of(const std::string& name) const {
  const auto it = file_of_.find(file_name_(name));
  CAROUSEL_CHECK(it != file_of_.end(), "no file holds tensor '{}'", name);
  return it->second->path();
}

std::vector<std::string> TensorFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

std::vector<float> TensorFiles::read_f32(const std::string& name, const Shape& shape) const {
  const SafetensorsEntry* e = find(name);
  CAROUSEL_CHECK(e, "no file holds tensor '{}'", name);
  const std::string& path = path_of(name);
  CAROUSEL_CHECK(e->shape == shape, "'{}': tensor '{}' has shape {} but the model needs {}", path,
                 name, shape_str(e->shape), shape_str(shape));
  const bool sixteen = e->dtype_name == "BF16" || e->dtype_name == "F16";
  CAROUSEL_CHECK(
      e->dtype_name == "F32" || (widen_ && sixteen), "'{}': tensor '{}' is {}; {}", path, name,
      e->dtype_name,
      widen_ ? "Hugging Face weights are read from F32, BF16 or F16" : "carousel stores float32");
  const std::string theirs = file_name_(name);
  const std::vector<char> bytes = file_of_.at(theirs)->read(theirs);
  std::vector<float> values;
  if (sixteen) {
    values = widen16(bytes, e->dtype_name == "BF16");
  } else {
    values.resize(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), bytes.size());
  }
  check_finite_f32(values.data(), shape, path, name);
  return values;
}

}  // namespace carousel
