// reference.h — naive double-precision reference implementations of the forward ops, written
// straight from the formulas in docs/model.md, with no code shared with the backends: plain
// loops, no BLAS, no tables, no shared elementwise helpers.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace carousel::reference {

using Vec = std::vector<double>;

// C[m,n] = alpha op(A) op(B) + beta C, row-major.
inline Vec gemm(bool ta, bool tb, int m, int n, int k, double alpha, const Vec& a, const Vec& b,
                double beta, Vec c) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        acc += av * bv;
      }
      c[i * n + j] = alpha * acc + beta * c[i * n + j];
    }
  }
  return c;
}

inline Vec rmsnorm(const Vec& x, const Vec& g, int rows, int cols, double eps) {
  Vec y(x.size());
  for (int i = 0; i < rows; ++i) {
    double ms = 0;
    for (int e = 0; e < cols; ++e) ms += x[i * cols + e] * x[i * cols + e];
    ms /= cols;
    for (int e = 0; e < cols; ++e) y[i * cols + e] = x[i * cols + e] / std::sqrt(ms + eps) * g[e];
  }
  return y;
}

// x [B,T,H,D]; position of row t is t.
inline Vec rope(const Vec& x, int B, int T, int H, int D, double theta) {
  Vec y(x.size());
  const int half = D / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const double* xi = &x[((b * T + t) * H + h) * D];
        double* yi = &y[((b * T + t) * H + h) * D];
        for (int j = 0; j < half; ++j) {
          const double angle = t / std::pow(theta, 2.0 * j / D);
          yi[j] = xi[j] * std::cos(angle) - xi[j + half] * std::sin(angle);
          yi[j + half] = xi[j + half] * std::cos(angle) + xi[j] * std::sin(angle);
        }
      }
  return y;
}

// Causal GQA attention: q [B,T,H,D], k,v [B,T,Hkv,D].
inline Vec attention(const Vec& q, const Vec& k, const Vec& v, int B, int T, int H, int Hkv,
                     int D) {
  Vec out(q.size(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / Hkv);
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int e = 0; e < D; ++e)
            dot += q[((b * T + i) * H + h) * D + e] * k[((b * T + j) * Hkv + kvh) * D + e];
          s[j] = dot / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(s[j] - mx);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - mx) / z;
          for (int e = 0; e < D; ++e)
            out[((b * T + i) * H + h) * D + e] += p * v[((b * T + j) * Hkv + kvh) * D + e];
        }
      }
    }
  return out;
}

inline Vec swiglu(const Vec& gate, const Vec& up) {
  Vec y(gate.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  return y;
}

// x [M,E] with row m scaled by s[m].
inline Vec scale_rows(const Vec& x, const Vec& s) {
  Vec y(x.size());
  const std::size_t cols = x.size() / s.size();
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] * s[i / cols];
  return y;
}

inline Vec gelu(const Vec& x) {
  Vec y(x.size());
  const double pi = 3.14159265358979323846;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double u = std::sqrt(2 / pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    y[i] = 0.5 * x[i] * (1 + std::tanh(u));
  }
  return y;
}

inline Vec embedding(const Vec& table, const std::vector<std::int32_t>& tokens, int E) {
  Vec y;
  for (auto t : tokens)
    for (int e = 0; e < E; ++e) y.push_back(table[t * E + e]);
  return y;
}

inline Vec cross_entropy(const Vec& logits, const std::vector<std::int32_t>& targets, int V) {
  Vec loss;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    double z = 0;
    for (int j = 0; j < V; ++j) z += std::exp(logits[i * V + j]);
    loss.push_back(std::log(z) - logits[i * V + targets[i]]);
  }
  return loss;
}

}  // namespace carousel::reference
