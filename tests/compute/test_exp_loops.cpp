// test_exp_loops.cpp — the CPU backend's exp loops (compute/cpu/exp_loops.h): attention's
// softmax rows and SwiGLU.
//
// Every ISA copy this machine runs (portable always; AVX2 + FMA where present) must
// give the portable copy's bits, on rows of every length around the vector widths, masked and
// unmasked; the float exp must be within one float ulp of exp computed in double, equal to
// glibc's expf for all but a few in 10^4 inputs; SwiGLU and its gradients must be within a few
// float ulps of the same formulas evaluated in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compute/cpu/exp_loops.h"
#include "compute/elementwise.h"

namespace carousel {
namespace {

using cpu::ExpIsa;

const ExpIsa kAllCopies[] = {ExpIsa::portable, ExpIsa::avx2};

// Scores minus their row max look like this: mostly in [-20, 0], some far below, some exact
// zeros, -inf for masked positions some callers leave in.
std::vector<float> score_row(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> body(-20.f, 0.f), far(-200.f, -80.f);
  std::vector<float> row(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (gen() % 16) {
      case 0:
        row[i] = far(gen);
        break;
      case 1:
        row[i] = 0.f;
        break;
      case 2:
        row[i] = -std::numeric_limits<float>::infinity();
        break;
      default:
        row[i] = body(gen);
    }
  }
  return row;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SoftmaxExp, EveryCopyGivesThePortableBits) {
  int copies_run = 0;
  for (ExpIsa isa : kAllCopies) {
    if (!cpu::runs_on_this_cpu(isa)) continue;
    ++copies_run;
    for (std::int64_t len : {1, 7, 8, 9, 15, 16, 17, 31, 33, 128, 509, 512}) {
      for (std::int64_t n : {len, len / 2, std::int64_t(1)}) {
        const std::vector<float> scores = score_row(std::size_t(len), unsigned(len * 7 + n));
        std::vector<float> portable = scores, copy = scores;
        const double sum_portable = cpu::exp_row(portable.data(), n, len, 0.25f, ExpIsa::portable);
        const double sum_copy = cpu::exp_row(copy.data(), n, len, 0.25f, isa);
        EXPECT_TRUE(same_bits(portable, copy)) << "exp_row, copy " << int(isa) << ", len " << len;
        EXPECT_EQ(std::bit_cast<std::uint64_t>(sum_portable),
                  std::bit_cast<std::uint64_t>(sum_copy))
            << "exp_row sum, copy " << int(isa) << ", len " << len << ", n " << n;
      }
    }
    // A 37 x 45 tile inside rows of 64, diagonal (causal mask) and not, with per-row shifts.
    const std::int64_t rows = 37, cols = 45, ld = 64;
    const std::vector<float> tile = score_row(std::size_t(rows * ld), 99);
    const std::vector<float> lse = score_row(std::size_t(rows), 98);
    for (bool diagonal : {false, true}) {
      std::vector<float> portable = tile, copy = tile;
      cpu::recompute_p(portable.data(), rows, cols, ld, diagonal, lse.data(), ExpIsa::portable);
      cpu::recompute_p(copy.data(), rows, cols, ld, diagonal, lse.data(), isa);
      EXPECT_TRUE(same_bits(portable, copy)) << "recompute_p, copy " << int(isa);
    }
  }
  EXPECT_GE(copies_run, 1);
}

TEST(SoftmaxExp, RowsAreExponentialsMaskedAndSummed) {
  const std::int64_t len = 21, n = 13;
  const std::vector<float> scores = score_row(len, 5);
  std::vector<float> row = scores;
  const double sum = cpu::exp_row(row.data(), n, len, -1.5f);
  double expected_sum = 0;
  for (std::int64_t j = 0; j < len; ++j) {
    // exp of the float difference, clamped at -87 as documented.
    const double want = j < n ? std::exp(std::max(double(scores[j] + 1.5f), -87.0)) : 0.0;
    EXPECT_NEAR(row[j], want, 1.2e-7 * want) << "column " << j;
    expected_sum += want;
  }
  EXPECT_NEAR(sum, expected_sum, 1e-6 * expected_sum);
  // The causal mask of a diagonal tile: row r keeps columns 0..r.
  std::vector<float> tile(4 * 8, -1.f), lse = {0.f, 1.f, 2.f, 3.f};
  cpu::recompute_p(tile.data(), 4, 6, 8, /*diagonal=*/true, lse.data());
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      const double want = c <= r ? std::exp(-1.0 - r) : 0.0;
      EXPECT_NEAR(tile[r * 8 + c], want, 1.2e-7 * want) << "row " << r << " column " << c;
    }
    EXPECT_EQ(tile[r * 8 + 6], -1.f) << "past cols untouched";
  }
}

TEST(SoftmaxExp, FloatExpIsWithinAnUlpAndMostlyEqualsExpf) {
  int differ_from_expf = 0, count = 0;
  for (float x = -87.f; x <= 0.5f; x += 0.000731f, ++count) {
    const float ours = cpu::exp_nonpositive(x);
    const double exact = std::exp(double(x));
    const double ulp = std::nextafter(float(exact), INFINITY) - float(exact);
    ASSERT_LE(std::abs(double(ours) - exact), ulp) << "x = " << x;
    differ_from_expf += ours != std::exp(x);
  }
  EXPECT_LT(differ_from_expf, count / 1000) << differ_from_expf << " of " << count;
  // Below the clamp, -inf included: exp(-87) instead of something smaller (never NaN).
  EXPECT_EQ(cpu::exp_nonpositive(-1000.f), cpu::exp_nonpositive(-87.f));
  EXPECT_EQ(cpu::exp_nonpositive(-std::numeric_limits<float>::infinity()),
            cpu::exp_nonpositive(-87.f));
  EXPECT_GT(cpu::exp_nonpositive(-87.f), 0.f);
}

// x86 makes NaNs with the sign bit set (inf - inf, 0 * inf): their bits lie above -inf's, where
// the exp's clamp on the bits would have turned them into exp(-87), a finite probability.
TEST(SoftmaxExp, NaNsOfEitherSignStayNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float x : {nan, -nan}) {
    EXPECT_TRUE(std::isnan(cpu::exp_nonpositive(x))) << std::bit_cast<std::uint32_t>(x);
    for (ExpIsa isa : kAllCopies) {
      if (!cpu::runs_on_this_cpu(isa)) continue;
      std::vector<float> row = score_row(19, 3);
      row[11] = x;
      const double sum = cpu::exp_row(row.data(), 19, 19, 0.f, isa);
      EXPECT_TRUE(std::isnan(row[11]) && std::isnan(sum)) << "exp_row, copy " << int(isa);
      EXPECT_FALSE(std::isnan(row[10]) || std::isnan(row[12]));
      std::vector<float> tile = score_row(3 * 16, 4), lse = {0.f, 0.f, 0.f};
      tile[16 + 5] = x;
      cpu::recompute_p(tile.data(), 3, 9, 16, /*diagonal=*/false, lse.data(), isa);
      EXPECT_TRUE(std::isnan(tile[16 + 5])) << "recompute_p, copy " << int(isa);
    }
  }
}

// SwiGLU inputs: gates across the sigmoid's whole range (both signs, tiny, beyond +-87 where
// the exp clamps, signed zeros), ups and incoming gradients of both signs.
struct SwigluInputs {
  std::vector<float> gate, up, dout;
};
SwigluInputs swiglu_inputs(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> body(-12.f, 12.f), wide(-120.f, 120.f), other(-3.f, 3.f);
  SwigluInputs in;
  const float specials[] = {0.f, -0.f, 1e-30f, -1e-30f, 87.f, -87.f, 100.f, -100.f};
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned pick = gen() % 16;
    in.gate.push_back(pick == 0 ? specials[gen() % 8] : pick == 1 ? wide(gen) : body(gen));
    in.up.push_back(other(gen));
    in.dout.push_back(other(gen));
  }
  return in;
}

TEST(SwigluExp, EveryCopyGivesThePortableBits) {
  int copies_run = 0;
  for (ExpIsa isa : kAllCopies) {
    if (!cpu::runs_on_this_cpu(isa)) continue;
    ++copies_run;
    for (std::size_t n : {1, 3, 4, 7, 8, 9, 15, 16, 17, 33, 1000, 4096}) {
      const SwigluInputs in = swiglu_inputs(n, unsigned(n));
      std::vector<float> out_p(n), out_c(n), dg_p(n), dg_c(n), du_p(n), du_c(n);
      const auto size = std::int64_t(n);
      cpu::swiglu_forward(in.gate.data(), in.up.data(), out_p.data(), size, ExpIsa::portable);
      cpu::swiglu_forward(in.gate.data(), in.up.data(), out_c.data(), size, isa);
      cpu::swiglu_backward(in.dout.data(), in.gate.data(), in.up.data(), dg_p.data(), du_p.data(),
                           size, ExpIsa::portable);
      cpu::swiglu_backward(in.dout.data(), in.gate.data(), in.up.data(), dg_c.data(), du_c.data(),
                           size, isa);
      EXPECT_TRUE(same_bits(out_p, out_c)) << "forward, copy " << int(isa) << ", n " << n;
      EXPECT_TRUE(same_bits(dg_p, dg_c)) << "dgate, copy " << int(isa) << ", n " << n;
      EXPECT_TRUE(same_bits(du_p, du_c)) << "dup, copy " << int(isa) << ", n " << n;
    }
  }
  EXPECT_GE(copies_run, 1);
}

TEST(SwigluExp, MatchesTheFormulasInDouble) {
  const std::size_t n = 20000;
  const SwigluInputs in = swiglu_inputs(n, 7);
  std::vector<float> out(n), dgate(n), dup(n);
  cpu::swiglu_forward(in.gate.data(), in.up.data(), out.data(), std::int64_t(n));
  cpu::swiglu_backward(in.dout.data(), in.gate.data(), in.up.data(), dgate.data(), dup.data(),
                       std::int64_t(n));
  const double eps = std::numeric_limits<float>::epsilon();
  for (std::size_t i = 0; i < n; ++i) {
    const double g = in.gate[i], u = in.up[i], dy = in.dout[i];
    const double s = math::sigmoid(g);
    const double want_out = math::swiglu(g, u);
    double want_dg = 0, want_du = 0;
    math::swiglu_grad(dy, g, u, want_dg, want_du);
    // A few roundings of float operations on each term: the bound scales with the terms' sizes
    // (dgate's s + g s (1 - s) cancels for negative gates, so its terms, not its sum, set it;
    // and 1 - s in float is off by up to an ulp of s, which g multiplies).
    // Below -87 the sigmoid is 0 (the exact one is under exp(-87) ~ 1.6e-38): the terms it
    // multiplies are off by at most |g| exp(g) <= 87 exp(-87) ~ 1.4e-36.
    const double clamped = g < -87 ? 1.5e-36 : 0.0;
    ASSERT_NEAR(out[i], want_out, 4 * eps * std::abs(want_out) + clamped * std::abs(u) + 1e-44)
        << "gate " << g;
    ASSERT_NEAR(dup[i], want_du, 4 * eps * std::abs(want_du) + clamped * std::abs(dy) + 1e-44)
        << "gate " << g;
    const double dg_terms = s + std::abs(g) * s * (1 - s), one_minus_s = 2 * eps * std::abs(g);
    ASSERT_NEAR(dgate[i], want_dg, std::abs(dy * u) * (6 * eps * dg_terms + one_minus_s + clamped))
        << "gate " << g;
  }
  // A NaN gate gives NaN outputs (the sigmoid of NaN is a number, multiplied by the NaN gate).
  const float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.f;
  float o = 0, dg = 0, du = 0;
  cpu::swiglu_forward(&nan, &one, &o, 1);
  cpu::swiglu_backward(&one, &nan, &one, &dg, &du, 1);
  EXPECT_TRUE(std::isnan(o) && std::isnan(dg) && std::isnan(du));
}

TEST(SwigluExp, VeryNegativeGatesGiveAboutZero) {
  // exp(-|x|) is clamped at exp(-87) (exp_loops.h); the sigmoid must not be, or silu(x) =
  // x sigmoid(x) becomes 1.6e-38 x: -1.6e-18 at x = -1e20, -5.6 at -FLT_MAX, where the exact
  // value (and glibc's expf formula, math::swiglu) is 0. Gradients the same.
  const float lowest = std::numeric_limits<float>::lowest();
  const std::vector<float> gates = {-87.5f, -88.f, -100.f, -1e4f, -1e20f, -1e30f, lowest};
  const std::vector<float> ups = {1.f, -3.f, 1e30f};
  std::vector<float> gate, up, dout;
  for (float g : gates) {
    for (float u : ups) {
      gate.push_back(g);
      up.push_back(u);
      dout.push_back(1.f);
    }
  }
  const std::size_t n = gate.size();
  for (ExpIsa isa : kAllCopies) {
    if (!cpu::runs_on_this_cpu(isa)) continue;
    std::vector<float> out(n), dgate(n), dup(n);
    cpu::swiglu_forward(gate.data(), up.data(), out.data(), std::int64_t(n), isa);
    cpu::swiglu_backward(dout.data(), gate.data(), up.data(), dgate.data(), dup.data(),
                         std::int64_t(n), isa);
    for (std::size_t i = 0; i < n; ++i) {
      const double g = gate[i], u = up[i], s = math::sigmoid(g);
      const double tol = 1.5e-36 * std::abs(u);  // |g| sigmoid(g) <= 87 exp(-87) below -87
      EXPECT_NEAR(out[i], g * s * u, tol) << "copy " << int(isa) << " gate " << g << " up " << u;
      EXPECT_NEAR(dup[i], g * s, 1.5e-36) << "copy " << int(isa) << " gate " << g;
      EXPECT_NEAR(dgate[i], u * (s + g * s * (1 - s)), tol)
          << "copy " << int(isa) << " gate " << g << " up " << u;
    }
  }
  // A -inf gate gives NaN (-inf * 0), as math::swiglu does.
  const float minus_inf = -std::numeric_limits<float>::infinity(), one = 1.f;
  float o = 0;
  cpu::swiglu_forward(&minus_inf, &one, &o, 1);
  EXPECT_TRUE(std::isnan(o) && std::isnan(math::swiglu(minus_inf, one))) << o;
}

}  // namespace
}  // namespace carousel
