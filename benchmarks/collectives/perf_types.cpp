// perf_types.cpp — element types, reduce ops, inputs and the result check of the collective
// benchmarks (the rules are in perf_types.h).
#include "benchmarks/collectives/perf_types.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "compute/bfloat16.h"
#include "compute/error.h"
#include "compute/float16.h"

namespace carousel::perf {

namespace {

bool is_integer(DType t) {
  return t == DType::I8 || t == DType::U8 || t == DType::I32 || t == DType::I64;
}

// x modulo 2^bits of the integer type, as that type's value (two's complement for signed).
std::int64_t wrap(DType t, std::int64_t x) {
  switch (t) {
    case DType::I8:
      return std::int8_t(std::uint8_t(std::uint64_t(x) & 0xFFu));
    case DType::U8:
      return std::int64_t(std::uint64_t(x) & 0xFFu);
    case DType::I32:
      return std::int32_t(std::uint32_t(std::uint64_t(x) & 0xFFFFFFFFu));
    default:
      return x;
  }
}

// Unit roundoff: half the distance from 1 to the next value of the type.
double unit_roundoff(DType t) {
  switch (t) {
    case DType::F32:
      return 0x1p-24;
    case DType::F64:
      return 0x1p-53;
    case DType::F16:
      return 0x1p-11;
    case DType::BF16:
      return 0x1p-8;
    default:
      return 0;
  }
}

template <class Fn>
void for_each_element(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(float{});
    case DType::F64:
      return fn(double{});
    case DType::BF16:
      return fn(bf16{});
    case DType::F16:
      return fn(f16{});
    case DType::I8:
      return fn(std::int8_t{});
    case DType::U8:
      return fn(std::uint8_t{});
    case DType::I32:
      return fn(std::int32_t{});
    case DType::I64:
      return fn(std::int64_t{});
  }
}

std::vector<char> encode(DType t, const std::vector<double>& v) {
  std::vector<char> bytes(v.size() * dtype_size(t));
  for_each_element(t, [&](auto tag) {
    using T = decltype(tag);
    auto* out = reinterpret_cast<T*>(bytes.data());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bf16>)
        out[i] = math::to_bf16(float(v[i]));
      else if constexpr (std::is_same_v<T, f16>)
        out[i] = math::to_f16(float(v[i]));
      else
        out[i] = T(v[i]);
    }
  });
  return bytes;
}

std::vector<double> decode(DType t, const std::vector<char>& bytes) {
  std::vector<double> v(bytes.size() / dtype_size(t));
  for_each_element(t, [&](auto tag) {
    using T = decltype(tag);
    const auto* in = reinterpret_cast<const T*>(bytes.data());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
        v[i] = math::to_float(in[i]);
      else
        v[i] = double(in[i]);
    }
  });
  return v;
}

// acc op x, with avg summing (it divides at the end).
template <class T>
T combine(ReduceOp op, T acc, T x) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return acc + x;
    case ReduceOp::Prod:
      return acc * x;
    case ReduceOp::Min:
      return std::min(acc, x);
    case ReduceOp::Max:
      return std::max(acc, x);
  }
  return acc;
}

// The exact result of reducing element j over every rank, and sum |x_q| for the tolerance.
double exact_reduction(DType t, ReduceOp op, int ranks, std::int64_t j, double& abs_sum) {
  abs_sum = 0;
  if (is_integer(t)) {  // inputs and products are small: int64 holds them exactly
    std::int64_t acc = std::int64_t(input_value(t, op, 0, ranks, j));
    for (int q = 1; q < ranks; ++q) {
      acc = combine(op, acc, std::int64_t(input_value(t, op, q, ranks, j)));
    }
    acc = wrap(t, acc);
    return double(op == ReduceOp::Avg ? acc / ranks : acc);  // int64 division truncates to 0
  }
  double acc = input_value(t, op, 0, ranks, j);
  abs_sum = std::abs(acc);
  for (int q = 1; q < ranks; ++q) {
    const double x = input_value(t, op, q, ranks, j);
    abs_sum += std::abs(x);
    acc = combine(op, acc, x);  // exact: small integers in double
  }
  return op == ReduceOp::Avg ? acc / ranks : acc;
}

}  // namespace

const std::vector<ElementType>& element_types() {
  static const std::vector<ElementType> types = {{DType::I8, "int8"},    {DType::U8, "uint8"},
                                                 {DType::I32, "int32"},  {DType::I64, "int64"},
                                                 {DType::F16, "half"},   {DType::F32, "float"},
                                                 {DType::F64, "double"}, {DType::BF16, "bfloat16"}};
  return types;
}

const std::vector<ReduceChoice>& reduce_choices() {
  static const std::vector<ReduceChoice> ops = {{ReduceOp::Sum, "sum"},
                                                {ReduceOp::Prod, "prod"},
                                                {ReduceOp::Max, "max"},
                                                {ReduceOp::Min, "min"},
                                                {ReduceOp::Avg, "avg"}};
  return ops;
}

template <class T>
std::optional<std::vector<T>> parse_choice(const std::vector<T>& all, const std::string& text) {
  if (text == "all") return all;
  for (const T& c : all) {
    if (c.name == text) return std::vector<T>{c};
  }
  return std::nullopt;
}

std::optional<std::vector<ElementType>> parse_types(const std::string& text) {
  return parse_choice(element_types(), text);
}
std::optional<std::vector<ReduceChoice>> parse_ops(const std::string& text) {
  return parse_choice(reduce_choices(), text);
}

std::string type_names() {
  std::string s;
  for (const auto& t : element_types()) s += t.name + ", ";
  return s + "all";
}
std::string op_names() {
  std::string s;
  for (const auto& o : reduce_choices()) s += o.name + ", ";
  return s + "all";
}

double input_value(DType dtype, ReduceOp op, int rank, int ranks, std::int64_t j) {
  const bool is_signed = dtype != DType::U8;
  if (op == ReduceOp::Prod) {
    if (rank == j % ranks) return double(2 + j % 5);
    if (is_signed && ranks > 1 && rank == (j + 1) % ranks) return -1;
    return 1;
  }
  const auto base = double((3 * std::int64_t(rank) + j) % 11);
  return is_signed ? base - 5 : base + 1;
}

void fill_inputs(Backend& be, const Tensor& t, ReduceOp op, int rank, int ranks) {
  std::vector<double> v(t.numel());
  for (std::int64_t j = 0; j < t.numel(); ++j) v[j] = input_value(t.dtype(), op, rank, ranks, j);
  be.upload(encode(t.dtype(), v).data(), t);
}

double tolerance(DType dtype, ReduceOp op, int ranks, double abs_sum) {
  if (is_integer(dtype) || (op != ReduceOp::Sum && op != ReduceOp::Avg)) return 0;
  const int roundings = op == ReduceOp::Sum ? ranks - 1 : ranks + 1;
  const double ku = roundings * unit_roundoff(dtype);
  if (ku >= 1) return std::numeric_limits<double>::infinity();
  const double gamma = ku / (1 - ku);
  return op == ReduceOp::Sum ? gamma * abs_sum : gamma * abs_sum / ranks;
}

std::int64_t count_wrong(Backend& be, const Tensor& recv, ReduceOp op, int ranks,
                         const std::function<Source(std::int64_t i)>& source) {
  const DType t = recv.dtype();
  std::vector<char> bytes(recv.nbytes());
  be.download(recv, bytes.data());
  const std::vector<double> got = decode(t, bytes);
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < std::int64_t(got.size()); ++i) {
    const Source s = source(i);
    double expected = 0, tol = 0;
    if (s.kind == Source::OneRank) {
      expected = input_value(t, op, s.rank, ranks, s.index);
    } else if (s.kind == Source::AllRanks) {
      double abs_sum = 0;
      expected = exact_reduction(t, op, ranks, s.index, abs_sum);
      tol = tolerance(t, op, ranks, abs_sum);
    }
    if (!(std::abs(got[i] - expected) <= tol)) ++wrong;  // NaN counts as wrong
  }
  return wrong;
}

}  // namespace carousel::perf
