// test_layer_ops.cpp — every model op of the CPU backend, forward and backward.
//
// For each op (RMSNorm, RoPE, attention in GQA/MHA/MQA layouts, SwiGLU, GELU, embedding,
// cross-entropy) with odd, prime-sized shapes:
//   * the float64 forward equals the naive reference (tests/support/reference.h) to 1e-12
//     relative and the float32 forward to 1e-5 relative;
//   * the float64 backward equals central finite differences of the float64 forward
//     (step 1e-6; truncation + rounding error ~1e-9, so rtol 1e-6, atol 1e-8);
//   * the float32 backward equals the float64 backward to rtol 2e-4 / atol 2e-5;
//   * running forward + backward twice gives bitwise identical float32 results.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "compute/cpu_backend.h"
#include "tests/support/reference.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;
using Tensors = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::vector<std::pair<std::vector<double>, Shape>> inputs;  // differentiable inputs
  std::function<Tensor(Backend&, const Tensors&)> forward;    // returns the output
  // Gradients of every input given d(output); may re-run the forward for saved values.
  std::function<Tensors(Backend&, const Tensors&, const Tensor& dout)> backward;
  std::function<std::vector<double>()> reference;  // forward in double, from the formulas
  bool uniform_cotangent = false;  // the backward takes one scalar d(loss) for all outputs
  // Absolute tolerance of the finite-difference check. Its noise is about
  // eps * sum|out * dout| / step, so cases with hundreds of outputs need more than 1e-8.
  double fd_atol = 1e-8;
};

// gtest prints the parameter in test names; the op name is what a reader needs.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

Tensors make_inputs(Backend& be, const OpCase& c, DType dtype) {
  Tensors t;
  for (const auto& [values, shape] : c.inputs) t.push_back(make(be, values, shape, dtype));
  return t;
}

Tensor empty_like(Backend& be, const Tensor& t) { return be.empty(t.shape(), t.dtype()); }

std::vector<double> cotangent(const OpCase& c, std::size_t n) {
  if (c.uniform_cotangent) return std::vector<double>(n, 1.0 / double(n));
  return testing::randn(n, 99);
}

// ---- the cases -------------------------------------------------------------------------------

OpCase rmsnorm_case() {
  const int rows = 7, cols = 13;
  const double eps = 1e-5;
  auto x = testing::randn(rows * cols, 1);
  auto g = testing::randn(cols, 2, 0.3);
  for (auto& v : g) v += 1.0;
  OpCase c;
  c.name = "rmsnorm";
  c.inputs = {{x, {rows, cols}}, {g, {cols}}};
  c.forward = [=](Backend& be, const Tensors& in) {
    Tensor out = empty_like(be, in[0]), rstd = be.empty({rows}, in[0].dtype());
    be.rmsnorm_forward(in[0], in[1], eps, out, rstd);
    return out;
  };
  c.backward = [=](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor out = empty_like(be, in[0]), rstd = be.empty({rows}, in[0].dtype());
    be.rmsnorm_forward(in[0], in[1], eps, out, rstd);
    Tensor dx = empty_like(be, in[0]), dg = be.zeros({cols}, in[0].dtype());
    be.rmsnorm_backward(dout, in[0], in[1], rstd, dx, dg);
    return Tensors{dx, dg};
  };
  c.reference = [=] { return reference::rmsnorm(x, g, rows, cols, eps); };
  return c;
}

OpCase rope_case() {
  const int B = 2, T = 5, H = 3, D = 6;
  const double theta = 10.0;  // small theta: large angles, every pair really rotates
  auto x = testing::randn(B * T * H * D, 3);
  OpCase c;
  c.name = "rope";
  c.inputs = {{x, {B, T, H, D}}};
  c.forward = [=](Backend& be, const Tensors& in) {
    auto tables = make_rope_tables(be, T, D, theta, in[0].dtype());
    Tensor out = empty_like(be, in[0]);
    be.rope_forward(in[0], tables.cos, tables.sin, out);
    return out;
  };
  c.backward = [=](Backend& be, const Tensors& in, const Tensor& dout) {
    auto tables = make_rope_tables(be, T, D, theta, in[0].dtype());
    Tensor dx = empty_like(be, in[0]);
    be.rope_backward(dout, tables.cos, tables.sin, dx);
    return Tensors{dx};
  };
  c.reference = [=] { return reference::rope(x, B, T, H, D, theta); };
  return c;
}

// Attention of q [B,Tq,H,D] against k, v [B,Tk,Hkv,D] (Tk >= Tq), inputs drawn from seeds
// seed, seed + 1, seed + 2; the caller sets the reference.
OpCase attention_op_case(const std::string& name, int B, int Tq, int Tk, int H, int Hkv, int D,
                         std::uint64_t seed) {
  OpCase c;
  c.name = name;
  c.inputs = {{testing::randn(B * Tq * H * D, seed), {B, Tq, H, D}},
              {testing::randn(B * Tk * Hkv * D, seed + 1), {B, Tk, Hkv, D}},
              {testing::randn(B * Tk * Hkv * D, seed + 2), {B, Tk, Hkv, D}}};
  auto fwd = [=](Backend& be, const Tensors& in, Tensor& lse) {
    Tensor out = empty_like(be, in[0]);
    lse = be.empty({B, H, Tq}, in[0].dtype());
    be.attention_forward(in[0], in[1], in[2], out, lse);
    return out;
  };
  c.forward = [=](Backend& be, const Tensors& in) {
    Tensor lse;
    return fwd(be, in, lse);
  };
  c.backward = [=](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor lse;
    Tensor out = fwd(be, in, lse);
    Tensor dq = empty_like(be, in[0]), dk = empty_like(be, in[1]), dv = empty_like(be, in[2]);
    be.attention_backward(dout, in[0], in[1], in[2], out, lse, dq, dk, dv);
    return Tensors{dq, dk, dv};
  };
  return c;
}

// Tq queries against Tk >= Tq keys: the queries are the last Tq positions (a context-parallel
// chunk). Reference: the full causal attention of Tk queries whose last Tq are these, cut to
// those rows.
OpCase attention_prefix_case(const std::string& name, int B, int Tq, int Tk, int H, int Hkv,
                             int D) {
  OpCase c = attention_op_case(name, B, Tq, Tk, H, Hkv, D, 14);
  const auto q = c.inputs[0].first, k = c.inputs[1].first, v = c.inputs[2].first;
  c.reference = [=] {
    const std::size_t row = std::size_t(H * D);
    std::vector<double> full = testing::randn(std::size_t(B * Tk) * row, 17);
    for (int b = 0; b < B; ++b) {
      std::copy_n(q.begin() + std::ptrdiff_t(b * Tq * row), Tq * row,
                  full.begin() + std::ptrdiff_t((b * Tk + Tk - Tq) * row));
    }
    const auto all = reference::attention(full, k, v, B, Tk, H, Hkv, D);
    std::vector<double> mine;
    for (int b = 0; b < B; ++b) {
      const auto first = all.begin() + std::ptrdiff_t((b * Tk + Tk - Tq) * row);
      mine.insert(mine.end(), first, first + std::ptrdiff_t(Tq * row));
    }
    return mine;
  };
  return c;
}

OpCase attention_case(const std::string& name, int B, int T, int H, int Hkv, int D) {
  OpCase c = attention_op_case(name, B, T, T, H, Hkv, D, 4);
  const auto q = c.inputs[0].first, k = c.inputs[1].first, v = c.inputs[2].first;
  c.reference = [=] { return reference::attention(q, k, v, B, T, H, Hkv, D); };
  return c;
}

// 1200 outputs of magnitude ~1 against a random cotangent: finite-difference noise ~5e-8.
OpCase with_fd_atol(OpCase c, double atol) {
  c.fd_atol = atol;
  return c;
}

OpCase swiglu_case() {
  const int n = 5, f = 11;
  auto gate = testing::randn(n * f, 7, 2.0), up = testing::randn(n * f, 8);
  OpCase c;
  c.name = "swiglu";
  c.inputs = {{gate, {n, f}}, {up, {n, f}}};
  c.forward = [](Backend& be, const Tensors& in) {
    Tensor out = empty_like(be, in[0]);
    be.swiglu_forward(in[0], in[1], out);
    return out;
  };
  c.backward = [](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor dg = empty_like(be, in[0]), du = empty_like(be, in[1]);
    be.swiglu_backward(dout, in[0], in[1], dg, du);
    return Tensors{dg, du};
  };
  c.reference = [=] { return reference::swiglu(gate, up); };
  return c;
}

OpCase gelu_case() {
  auto x = testing::randn(3 * 17, 9, 2.0);
  OpCase c;
  c.name = "gelu";
  c.inputs = {{x, {3, 17}}};
  c.forward = [](Backend& be, const Tensors& in) {
    Tensor out = empty_like(be, in[0]);
    be.gelu_forward(in[0], out);
    return out;
  };
  c.backward = [](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor dx = empty_like(be, in[0]);
    be.gelu_backward(dout, in[0], dx);
    return Tensors{dx};
  };
  c.reference = [=] { return reference::gelu(x); };
  return c;
}

// scale_rows' backward is scale_rows and row_dots: dx = scale_rows(dout, s), ds = row_dots(dout,
// x); the finite differences check both ops.
OpCase scale_rows_case() {
  const int M = 5, E = 7;
  auto x = testing::randn(M * E, 14);
  auto s = testing::randn(M, 15);
  OpCase c;
  c.name = "scale_rows";
  c.inputs = {{x, {M, E}}, {s, {M}}};
  c.forward = [](Backend& be, const Tensors& in) {
    Tensor out = empty_like(be, in[0]);
    be.scale_rows(in[0], in[1], out);
    return out;
  };
  c.backward = [](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor dx = empty_like(be, in[0]), ds = empty_like(be, in[1]);
    be.scale_rows(dout, in[1], dx);
    be.row_dots(dout, in[0], ds);
    return Tensors{dx, ds};
  };
  c.reference = [=] { return reference::scale_rows(x, s); };
  return c;
}

OpCase embedding_case() {
  const int V = 11, E = 7;
  auto table = testing::randn(V * E, 10);
  auto tokens = testing::randint(15, V, 11);  // 15 tokens over 11 ids: repeats are certain
  OpCase c;
  c.name = "embedding";
  c.inputs = {{table, {V, E}}};
  c.forward = [=](Backend& be, const Tensors& in) {
    Tensor tok = be.from_host(tokens, {3, 5});
    Tensor out = be.empty({3, 5, E}, in[0].dtype());
    be.embedding_forward(in[0], tok, out);
    return out;
  };
  c.backward = [=](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor tok = be.from_host(tokens, {3, 5});
    Tensor dtable = be.zeros({V, E}, in[0].dtype());
    be.embedding_backward(dout, tok, dtable);
    return Tensors{dtable};
  };
  c.reference = [=] { return reference::embedding(table, tokens, E); };
  return c;
}

OpCase cross_entropy_case() {
  const int N = 7, V = 13;
  auto logits = testing::randn(N * V, 12, 3.0);
  auto targets = testing::randint(N, V, 13);
  OpCase c;
  c.name = "cross_entropy";
  c.inputs = {{logits, {N, V}}};
  c.uniform_cotangent = true;  // d(mean loss)/d(loss_i) = 1/N
  c.forward = [=](Backend& be, const Tensors& in) {
    Tensor tgt = be.from_host(targets, {N});
    Tensor losses = be.empty({N}, in[0].dtype());
    be.cross_entropy_forward(in[0], tgt, losses);
    return losses;
  };
  c.backward = [=](Backend& be, const Tensors& in, const Tensor& dout) {
    Tensor tgt = be.from_host(targets, {N});
    Tensor dlogits = empty_like(be, in[0]);
    be.cross_entropy_backward(in[0], tgt, fetch(be, dout)[0], dlogits);
    return Tensors{dlogits};
  };
  c.reference = [=] { return reference::cross_entropy(logits, targets, V); };
  return c;
}

std::vector<OpCase> all_cases() {
  return {rmsnorm_case(), rope_case(), attention_case("attention_gqa", 2, 7, 4, 2, 6),
          attention_case("attention_mha", 1, 5, 3, 3, 4),
          attention_case("attention_mqa", 2, 3, 3, 1, 2),
          attention_case("attention_one_token", 3, 1, 2, 1, 4),
          attention_prefix_case("attention_key_prefix_gqa", 2, 3, 7, 4, 2, 4),
          attention_prefix_case("attention_key_prefix_one_query", 1, 1, 5, 2, 1, 2),
          // Several 128-token tiles (compute/cpu/attention.cpp): a partial last tile (300 =
          // 2 x 128 + 44) and one row past a tile (129), so the masked-tile skipping, the
          // diagonal mask and the online softmax across tiles are all checked.
          with_fd_atol(attention_case("attention_tiles", 1, 300, 2, 1, 2), 1e-7),
          with_fd_atol(attention_case("attention_tile_plus_one", 1, 129, 2, 2, 2), 1e-7),
          swiglu_case(), gelu_case(), scale_rows_case(), embedding_case(), cross_entropy_case()};
}

class LayerOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(LayerOp, ForwardMatchesNaiveReference) {
  const OpCase& c = GetParam();
  CpuBackend be;
  const auto expected = c.reference();
  testing::expect_close(fetch(be, c.forward(be, make_inputs(be, c, DType::F64))), expected, 1e-12,
                        1e-13, c.name + " float64 forward");
  testing::expect_close(fetch(be, c.forward(be, make_inputs(be, c, DType::F32))), expected, 1e-5,
                        1e-6, c.name + " float32 forward");
}

TEST_P(LayerOp, Float64BackwardMatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  CpuBackend be;
  Tensors in = make_inputs(be, c, DType::F64);
  const Tensor out = c.forward(be, in);
  const auto w = cotangent(c, out.numel());
  const Tensors grads = c.backward(be, in, make(be, w, out.shape(), DType::F64));
  const auto numeric = testing::finite_difference_grads(
      be, in, [&] { return c.forward(be, in); }, w);
  ASSERT_EQ(grads.size(), numeric.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    testing::expect_close(fetch(be, grads[i]), numeric[i], 1e-6, c.fd_atol,
                          c.name + " d(input " + std::to_string(i) + ")");
  }
}

TEST_P(LayerOp, Float32BackwardMatchesFloat64Backward) {
  const OpCase& c = GetParam();
  CpuBackend be;
  Tensors in64 = make_inputs(be, c, DType::F64), in32 = make_inputs(be, c, DType::F32);
  const auto w = cotangent(c, c.forward(be, in64).numel());
  const Shape out_shape = c.forward(be, in64).shape();
  const Tensors g64 = c.backward(be, in64, make(be, w, out_shape, DType::F64));
  const Tensors g32 = c.backward(be, in32, make(be, w, out_shape, DType::F32));
  for (std::size_t i = 0; i < g64.size(); ++i) {
    testing::expect_close(fetch(be, g32[i]), fetch(be, g64[i]), 2e-4, 2e-5,
                          c.name + " float32 d(input " + std::to_string(i) + ")");
  }
}

TEST_P(LayerOp, RepeatedRunsAreBitwiseIdentical) {
  const OpCase& c = GetParam();
  CpuBackend be;
  Tensors in = make_inputs(be, c, DType::F32);
  const Tensor out1 = c.forward(be, in), out2 = c.forward(be, in);
  EXPECT_TRUE(testing::bitwise_equal(be, out1, out2)) << c.name << " forward";
  const Tensor dout = make(be, cotangent(c, out1.numel()), out1.shape(), DType::F32);
  const Tensors g1 = c.backward(be, in, dout), g2 = c.backward(be, in, dout);
  for (std::size_t i = 0; i < g1.size(); ++i) {
    EXPECT_TRUE(testing::bitwise_equal(be, g1[i], g2[i])) << c.name << " grad " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, LayerOp, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Attention, LargerShapesMatchReferenceInFloat32) {
  // Long enough rows (T=67, prime) that softmax and the P v product are exercised at scale.
  const int B = 1, T = 67, H = 4, Hkv = 2, D = 16;
  CpuBackend be;
  auto q = testing::randn(B * T * H * D, 20), k = testing::randn(B * T * Hkv * D, 21),
       v = testing::randn(B * T * Hkv * D, 22);
  Tensor out = be.empty({B, T, H, D}), lse = be.empty({B, H, T});
  be.attention_forward(make(be, q, {B, T, H, D}, DType::F32),
                       make(be, k, {B, T, Hkv, D}, DType::F32),
                       make(be, v, {B, T, Hkv, D}, DType::F32), out, lse);
  testing::expect_close(fetch(be, out), reference::attention(q, k, v, B, T, H, Hkv, D), 1e-5, 1e-5,
                        "attention T=67");
}

TEST(Attention, ForwardAcrossKeyBlocksMatchesReference) {
  // T = 1100: queries past 512 and 1024 see their keys in two and three blocks of the forward's
  // online softmax (compute/cpu/attention.cpp, kKeyBlock = 512), the last one partial. The output
  // and lse are checked against the naive reference, the float32 gradients (which recompute P
  // from that lse) against the float64 backend's.
  const int B = 1, T = 1100, H = 2, Hkv = 1, D = 8;
  CpuBackend be;
  const auto q = testing::randn(B * T * H * D, 40), k = testing::randn(B * T * Hkv * D, 41),
             v = testing::randn(B * T * Hkv * D, 42), dout = testing::randn(B * T * H * D, 43);
  auto run = [&](DType dt) {
    Tensor qt = make(be, q, {B, T, H, D}, dt), kt = make(be, k, {B, T, Hkv, D}, dt),
           vt = make(be, v, {B, T, Hkv, D}, dt);
    Tensor out = be.empty({B, T, H, D}, dt), lse = be.empty({B, H, T}, dt);
    Tensor dq = be.empty(qt.shape(), dt), dk = be.empty(kt.shape(), dt),
           dv = be.empty(vt.shape(), dt);
    be.attention_forward(qt, kt, vt, out, lse);
    be.attention_backward(make(be, dout, {B, T, H, D}, dt), qt, kt, vt, out, lse, dq, dk, dv);
    return std::vector<std::vector<double>>{fetch(be, out), fetch(be, lse), fetch(be, dq),
                                            fetch(be, dk), fetch(be, dv)};
  };
  const auto f32 = run(DType::F32), f64 = run(DType::F64);
  testing::expect_close(f32[0], reference::attention(q, k, v, B, T, H, Hkv, D), 1e-5, 1e-5,
                        "attention output T=1100");
  std::vector<double> lse(std::size_t(H) * T);
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) {
      std::vector<double> scores(std::size_t(t) + 1);
      for (int s = 0; s <= t; ++s) {
        double dot = 0;
        for (int e = 0; e < D; ++e) dot += q[(t * H + h) * D + e] * k[s * Hkv * D + e];
        scores[s] = dot / std::sqrt(double(D));
      }
      const double mx = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double x : scores) sum += std::exp(x - mx);
      lse[std::size_t(h) * T + t] = mx + std::log(sum);
    }
  }
  testing::expect_close(f32[1], lse, 1e-5, 1e-5, "lse T=1100");
  const char* grads[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    testing::expect_close(f32[2 + i], f64[2 + i], 1e-4, 1e-4, grads[i]);
  }
}

TEST(Attention, ANaNKeyMakesTheRowsThatSeeItNaN) {
  // Of either sign: x86 makes NaNs with the sign bit set (inf - inf, 0 * inf), and those once
  // slipped through the softmax's exp as a finite probability. Rows before the key (causal) do
  // not see it and stay finite.
  const int B = 1, T = 300, H = 2, Hkv = 1, D = 8, poisoned = 150;
  CpuBackend be;
  const auto q = testing::randn(B * T * H * D, 50), v = testing::randn(B * T * Hkv * D, 52);
  for (const double nan :
       {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN()}) {
    auto k = testing::randn(B * T * Hkv * D, 51);
    k[std::size_t(poisoned) * Hkv * D + 3] = nan;
    const Tensor qt = make(be, q, {B, T, H, D}, DType::F32);
    const Tensor kt = make(be, k, {B, T, Hkv, D}, DType::F32);
    const Tensor vt = make(be, v, {B, T, Hkv, D}, DType::F32);
    Tensor out = be.empty({B, T, H, D}, DType::F32), lse = be.empty({B, H, T}, DType::F32);
    be.attention_forward(qt, kt, vt, out, lse);
    const std::vector<double> got = fetch(be, out);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const bool is_nan = std::isnan(got[std::size_t((t * H + h) * D)]);
        ASSERT_EQ(is_nan, t >= poisoned) << "query " << t << " head " << h << ", key NaN sign "
                                         << (std::signbit(nan) ? '-' : '+');
      }
    }
  }
}

TEST(Attention, ResultsDoNotDependOnTheThreadCount) {
  // Three query/key tiles (T = 300), GQA: forward and backward tasks are split over threads.
  const int B = 2, T = 300, H = 4, Hkv = 2, D = 16;
  CpuBackend be;
  const Tensor q = make(be, testing::randn(B * T * H * D, 30), {B, T, H, D}, DType::F32),
               k = make(be, testing::randn(B * T * Hkv * D, 31), {B, T, Hkv, D}, DType::F32),
               v = make(be, testing::randn(B * T * Hkv * D, 32), {B, T, Hkv, D}, DType::F32),
               dout = make(be, testing::randn(B * T * H * D, 33), {B, T, H, D}, DType::F32);
  std::vector<Tensors> runs;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    Tensor out = be.empty(q.shape()), lse = be.empty({B, H, T});
    Tensor dq = be.empty(q.shape()), dk = be.empty(k.shape()), dv = be.empty(v.shape());
    be.attention_forward(q, k, v, out, lse);
    be.attention_backward(dout, q, k, v, out, lse, dq, dk, dv);
    runs.push_back({out, lse, dq, dk, dv});
  }
  omp_set_num_threads(saved);
  for (std::size_t r = 1; r < runs.size(); ++r) {
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      EXPECT_TRUE(testing::bitwise_equal(be, runs[0][i], runs[r][i]))
          << "output " << i << " (out, lse, dq, dk, dv), run " << r;
    }
  }
}

TEST(Rope, OutputMayAliasInput) {
  CpuBackend be;
  auto x = testing::randn(2 * 3 * 2 * 4, 30);
  Tensor t = make(be, x, {2, 3, 2, 4}, DType::F64);
  auto tables = make_rope_tables(be, 3, 4, 10000.0, DType::F64);
  be.rope_forward(t, tables.cos, tables.sin, t);
  testing::expect_close(fetch(be, t), reference::rope(x, 2, 3, 2, 4, 10000.0), 1e-12, 1e-13,
                        "in-place rope");
}

}  // namespace
}  // namespace carousel
