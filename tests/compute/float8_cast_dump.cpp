// float8_cast_dump.cpp — the C++ half of the float8 cast test (tests/compute/float8_casts.py,
// which compares everything written here with ml_dtypes bit for bit).
//
// usage: float8_cast_dump VALUES SCALE_TENSORS OUT
//   VALUES         float32 values (the script writes every bfloat16 bit pattern and 10^6 random
//                  float32 values with the specials);
//   SCALE_TENSORS  K tensors of 4096 float32 values each, for amax and the tensorwise scales;
//   OUT            in order: the E4M3 bytes, the E5M2 bytes of VALUES (float8_encode); the CPU
//                  backend's quantize_float8 of VALUES as float32 (E4M3, scale 1, float32 out) and
//                  (E5M2, scale 0.37, bfloat16 out, widened); the decoded 256 E4M3 and 256 E5M2
//                  patterns (float8_decode); per scale tensor its amax (Backend::amax) and
//                  float8_scale for E4M3 and E5M2.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "compute/bfloat16.h"
#include "compute/cpu_backend.h"
#include "compute/float8/float8.h"

namespace {

std::vector<float> read_floats(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

template <class T>
void put(std::ofstream& out, const std::vector<T>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace carousel;
  if (argc != 4) {
    std::fprintf(stderr, "usage: float8_cast_dump VALUES SCALE_TENSORS OUT\n");
    return 2;
  }
  const std::vector<float> values = read_floats(argv[1]), scaled = read_floats(argv[2]);
  std::ofstream out(argv[3], std::ios::binary);
  for (const Float8Format f : {Float8Format::E4M3, Float8Format::E5M2}) {
    std::vector<std::uint8_t> bytes(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bytes[i] = math::float8_encode(values[i], f);
    put(out, bytes);
  }
  CpuBackend be;
  const Tensor x = be.from_host(values, {std::int64_t(values.size())});
  Tensor q32 = be.empty(x.shape(), DType::F32), q16 = be.empty(x.shape(), DType::BF16);
  be.quantize_float8(x, Float8Format::E4M3, 1.0f, q32);
  be.quantize_float8(x, Float8Format::E5M2, 0.37f, q16);
  put(out, be.to_host<float>(q32));
  std::vector<float> widened;
  for (const bf16 v : be.to_host<bf16>(q16)) widened.push_back(math::to_float(v));
  put(out, widened);
  for (const Float8Format f : {Float8Format::E4M3, Float8Format::E5M2}) {
    std::vector<float> decoded(256);
    for (int b = 0; b < 256; ++b) decoded[std::size_t(b)] = math::float8_decode(std::uint8_t(b), f);
    put(out, decoded);
  }
  constexpr std::int64_t kTensor = 4096;
  std::vector<float> scales;
  const Tensor amax = be.empty({1}, DType::F32);
  for (std::size_t at = 0; at + kTensor <= scaled.size(); at += kTensor) {
    const std::vector<float> part(scaled.begin() + std::ptrdiff_t(at),
                                  scaled.begin() + std::ptrdiff_t(at + kTensor));
    be.amax(be.from_host(part, {kTensor}), amax);
    const float a = be.to_host<float>(amax)[0];
    scales.insert(scales.end(),
                  {a, float8_scale(Float8Format::E4M3, a), float8_scale(Float8Format::E5M2, a)});
  }
  put(out, scales);
  return out.good() ? 0 : 1;
}
