// dtype.h — element types a Tensor can hold.
//
// F32 is the training dtype on every backend; F64 exists on the CPU backend so gradients can be
// checked against finite differences in double precision; BF16 is the GPU compute dtype (so far
// accepted by fill, cast and gemm on both backends; the CPU computes it in float32);
// I32 holds token ids. F16 (IEEE half), I8, U8 and I64 exist for the communicators and the
// collective benchmarks (NCCL moves and reduces them); no Backend op computes in them: they can
// be created, zeroed, uploaded and downloaded, and the op checks reject them by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace carousel {

enum class DType : std::uint8_t { F32, F64, BF16, I32, F16, I8, U8, I64 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::F16:
      return 2;
    case DType::I8:
    case DType::U8:
      return 1;
    case DType::I64:
      return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::BF16:
      return "bfloat16";
    case DType::I32:
      return "int32";
    case DType::F16:
      return "float16";
    case DType::I8:
      return "int8";
    case DType::U8:
      return "uint8";
    case DType::I64:
      return "int64";
  }
  return "?";
}

// bfloat16 as stored: the upper 16 bits of a float32 (conversions in compute/bfloat16.h).
struct bf16 {
  std::uint16_t bits;
};
// IEEE 754 binary16 as stored (conversions in compute/float16.h).
struct f16 {
  std::uint16_t bits;
};

// The DType of a C++ element type (used by Tensor::data<T>() to check what the caller expects).
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::F16;
}
template <>
constexpr DType dtype_of<std::int8_t>() {
  return DType::I8;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::U8;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::I64;
}

// The dtype of per-row statistics (RMSNorm's 1/rms, attention's log-sum-exp, losses) and of the
// RoPE tables for activations of `activations`: float32 when those are bfloat16, so what a
// backward reuses is not rounded to 8 bits; otherwise the activations' own dtype.
constexpr DType stats_dtype(DType activations) {
  return activations == DType::BF16 ? DType::F32 : activations;
}

}  // namespace carousel
