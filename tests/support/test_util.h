// test_util.h — helpers shared by the tests: seeded random data, host<->tensor conversion in
// any floating dtype, closeness checks that report the worst element, and a central
// finite-difference gradient checker in double precision.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace carousel::testing {

inline std::vector<double> randn(std::size_t n, std::uint64_t seed, double stddev = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline std::vector<std::int32_t> randint(std::size_t n, std::int32_t hi, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, hi - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// A tensor of `dtype` (F32, F64 or BF16) holding `values` (rounded to the dtype; BF16 through
// float32 and the backend's cast).
inline Tensor make(Backend& be, const std::vector<double>& values, Shape shape, DType dtype) {
  if (dtype == DType::F64) return be.from_host(values, std::move(shape));
  Tensor f = be.from_host(std::vector<float>(values.begin(), values.end()), std::move(shape));
  if (dtype == DType::F32) return f;
  Tensor t = be.empty(f.shape(), dtype);
  be.cast(f, t);
  return t;
}

// The values of a F32, F64 or BF16 tensor, as doubles.
inline std::vector<double> fetch(Backend& be, const Tensor& t) {
  if (t.dtype() == DType::F64) return be.to_host<double>(t);
  Tensor f = t;
  if (t.dtype() != DType::F32) {
    f = be.empty(t.shape(), DType::F32);
    be.cast(t, f);
  }
  auto v = be.to_host<float>(f);
  return {v.begin(), v.end()};
}

// The message of the carousel::Error that fn throws, or "<no error>".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Bitwise equality of two tensors' bytes.
inline bool bitwise_equal(Backend& be, const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return false;
  std::vector<char> ha(a.nbytes()), hb(b.nbytes());
  be.download(a, ha.data());
  be.download(b, hb.data());
  return std::memcmp(ha.data(), hb.data(), ha.size()) == 0;
}

// Expects |actual - expected| <= atol + rtol |expected| elementwise; on failure reports the
// count of bad elements, the worst index and the max abs/rel errors.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                         double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1, max_abs = 0, max_rel = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    const double tol = atol + rtol * std::abs(expected[i]);
    max_abs = std::max(max_abs, err);
    if (expected[i] != 0) max_rel = std::max(max_rel, err / std::abs(expected[i]));
    if (!(err <= tol)) ++bad;  // also catches NaN
    if (err - tol > worst_excess || std::isnan(err)) {
      worst_excess = err - tol;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << actual.size()
                     << " elements out of tolerance (rtol " << rtol << ", atol " << atol
                     << "); worst index " << worst << " actual " << actual[worst] << " expected "
                     << expected[worst] << "; max abs err " << max_abs << ", max rel err "
                     << max_rel;
}

// Central finite differences of L(inputs) = sum(forward(inputs) * weights), in double.
//   inputs:   F64 tensors the forward reads (perturbed one element at a time);
//   forward:  runs the op and returns its output tensor (F64);
//   weights:  dL/d(output), the cotangent given to the analytic backward.
// Returns one gradient vector per input.
inline std::vector<std::vector<double>> finite_difference_grads(
    Backend& be, const std::vector<Tensor>& inputs, const std::function<Tensor()>& forward,
    const std::vector<double>& weights, double step = 1e-6) {
  auto loss = [&]() {
    const std::vector<double> out = fetch(be, forward());
    double l = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * weights[i];
    return l;
  };
  std::vector<std::vector<double>> grads;
  for (const Tensor& in : inputs) {
    std::vector<double> values = be.to_host<double>(in);
    std::vector<double> g(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double keep = values[i];
      values[i] = keep + step;
      be.upload(values.data(), in);
      const double plus = loss();
      values[i] = keep - step;
      be.upload(values.data(), in);
      const double minus = loss();
      values[i] = keep;
      be.upload(values.data(), in);
      g[i] = (plus - minus) / (2 * step);
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace carousel::testing
