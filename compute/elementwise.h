// elementwise.h — scalar math shared by the CPU kernels and the CUDA kernels.
//
// Each function computes one element (or one pair, for RoPE) and is marked CAROUSEL_HD, which
// makes it __host__ __device__ under nvcc and plain inline elsewhere. The CPU backend loops over
// these; the CUDA backend launches one thread per element over the very same functions, so the
// two backends cannot drift apart in their formulas.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define CAROUSEL_HD __host__ __device__ __forceinline__
#else
#define CAROUSEL_HD inline
#endif

namespace carousel::math {

// SiLU (swish): x * sigmoid(x).
template <class T>
CAROUSEL_HD T sigmoid(T x) {
  using std::exp;
  return T(1) / (T(1) + exp(-x));
}
template <class T>
CAROUSEL_HD T silu(T x) {
  return x * sigmoid(x);
}

// SwiGLU (Llama MLP): out = silu(gate) * up.
template <class T>
CAROUSEL_HD T swiglu(T gate, T up) {
  return silu(gate) * up;
}
// One sigmoid for both outputs (d silu / dx = s + x s (1 - s), s = sigmoid(x); the compiler
// cannot merge two exp calls itself, as exp may set errno).
template <class T>
CAROUSEL_HD void swiglu_grad(T dout, T gate, T up, T& dgate, T& dup) {
  const T s = sigmoid(gate);
  dgate = dout * up * (s + gate * s * (T(1) - s));
  dup = dout * (gate * s);
}

// GELU, tanh approximation (PyTorch approximate='tanh', GPT-2):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T>
CAROUSEL_HD T gelu(T x) {
  using std::tanh;
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  return T(0.5) * x * (T(1) + tanh(k * (x + T(0.044715) * x * x * x)));
}
template <class T>
CAROUSEL_HD T gelu_grad(T x) {
  using std::tanh;
  const T k = T(0.7978845608028654);
  const T u = k * (x + T(0.044715) * x * x * x);
  const T th = tanh(u);
  const T du = k * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
}

// RoPE rotation of the pair (x[j], x[j + head_dim/2]) by an angle with cosine c and sine s
// (Hugging Face rotate_half convention). The backward is the rotation by -angle.
template <class T>
CAROUSEL_HD void rope_rotate(T x1, T x2, T c, T s, T& y1, T& y2) {
  y1 = x1 * c - x2 * s;
  y2 = x2 * c + x1 * s;
}
template <class T>
CAROUSEL_HD void rope_rotate_back(T dy1, T dy2, T c, T s, T& dx1, T& dx2) {
  dx1 = dy1 * c + dy2 * s;
  dx2 = dy2 * c - dy1 * s;
}

// AdamW with PyTorch semantics for one element. `grad_scale` multiplies the raw gradient
// (global-norm clipping); `bias1` = 1 - b1^step and `bias2` = 1 - b2^step are computed once on
// the host. Decoupled weight decay first: p -= lr * wd * p.
struct AdamWScalars {
  double lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2;
};
template <class T>
CAROUSEL_HD void adamw(T& p, T g, T& m, T& v, const AdamWScalars& h) {
  using std::sqrt;
  g *= T(h.grad_scale);
  p -= T(h.lr) * T(h.weight_decay) * p;
  m = T(h.beta1) * m + (T(1) - T(h.beta1)) * g;
  v = T(h.beta2) * v + (T(1) - T(h.beta2)) * g * g;
  const T m_hat = m / T(h.bias1);
  const T v_hat = v / T(h.bias2);
  p -= T(h.lr) * m_hat / (sqrt(v_hat) + T(h.eps));
}

}  // namespace carousel::math
