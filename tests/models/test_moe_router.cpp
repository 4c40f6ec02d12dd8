// test_moe_router.cpp — the MoE router against hand-worked examples (choice, weights, ties,
// the auxiliary-loss-free bias, the balancing loss) and its backward against central finite
// differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/moe_router.h"

namespace carousel {
namespace {

// Softmax of ln(1, 2, 3, 4) is (0.1, 0.2, 0.3, 0.4): top-2 chooses experts 3 and 2 with weights
// 0.4 and 0.3, normalized 4/7 and 3/7.
TEST(MoeRouter, SoftmaxTopKChoosesTheLargestScores) {
  const std::vector<double> logits = {std::log(1.0), std::log(2.0), std::log(3.0), std::log(4.0)};
  RouterConfig cfg{.experts = 4, .top_k = 2};
  Routing r = route(cfg, logits);
  EXPECT_EQ(r.expert, (std::vector<int>{3, 2}));
  EXPECT_NEAR(r.weight[0], 0.4, 1e-15);
  EXPECT_NEAR(r.weight[1], 0.3, 1e-15);
  EXPECT_EQ(r.load, (std::vector<std::int64_t>{0, 0, 1, 1}));
  cfg.normalize_top_k = true;
  r = route(cfg, logits);
  EXPECT_NEAR(r.weight[0], 4.0 / 7.0, 1e-15);
  EXPECT_NEAR(r.weight[1], 3.0 / 7.0, 1e-15);
}

// Sigmoid scores of zero logits are all 0.5: equal scores go to the lower index, a bias moves
// the choice (experts 3 and 1) but not the weights, which are normalized and scaled by 2.5
// (DeepSeek-V3's routed_scaling_factor): 2.5 * 0.5 / (0.5 + 0.5) each.
TEST(MoeRouter, SigmoidTiesAndTheBalancingBias) {
  const RouterConfig cfg{.experts = 4,
                         .top_k = 2,
                         .score = RouterScore::Sigmoid,
                         .normalize_top_k = true,
                         .routed_scaling_factor = 2.5};
  const std::vector<double> logits(4, 0.0);
  EXPECT_EQ(route(cfg, logits).expert, (std::vector<int>{0, 1}));
  const Routing r = route(cfg, logits, {0.0, 0.1, 0.0, 0.2});
  EXPECT_EQ(r.expert, (std::vector<int>{3, 1}));
  EXPECT_DOUBLE_EQ(r.weight[0], 1.25);
  EXPECT_DOUBLE_EQ(r.weight[1], 1.25);
}

// Two tokens, two experts, top-1, softmax. Scores (3/4, 1/4) and (1/4, 3/4) route one token to
// each expert: f = (1, 1), P = (1/2, 1/2), L = alpha. Both tokens at (3/4, 1/4): f = (2, 0),
// P = (3/4, 1/4), L = 1.5 alpha.
TEST(MoeRouter, BalancingLossIsAlphaWhenBalancedAndMoreWhenNot) {
  const RouterConfig cfg{.experts = 2, .top_k = 1, .aux_loss_weight = 0.01};
  const double l3 = std::log(3.0);
  EXPECT_NEAR(route(cfg, {l3, 0.0, 0.0, l3}).aux_loss, 0.01, 1e-15);
  const Routing r = route(cfg, {l3, 0.0, l3, 0.0});
  EXPECT_EQ(r.load, (std::vector<std::int64_t>{2, 0}));
  EXPECT_NEAR(r.aux_loss, 0.015, 1e-15);
}

// Per-sequence balancing (groups of G tokens): the loss and its gradient are the sums of each
// group routed on its own — here one balanced sequence (alpha) and one unbalanced (1.5 alpha);
// one group of all four tokens (loads 3 and 1, mean scores 0.625 and 0.375) gives 1.125 alpha.
TEST(MoeRouter, BalancingLossIsSummedOverTheSequences) {
  const RouterConfig cfg{.experts = 2, .top_k = 1, .aux_loss_weight = 0.01};
  const double l3 = std::log(3.0);
  const std::vector<double> first = {l3, 0.0, 0.0, l3}, second = {l3, 0.0, l3, 0.0};
  std::vector<double> both = first;
  both.insert(both.end(), second.begin(), second.end());
  EXPECT_NEAR(route(cfg, both).aux_loss, 0.01125, 1e-15);

  const Routing grouped = route(cfg, both, {}, /*group_tokens=*/2);
  EXPECT_NEAR(grouped.aux_loss, 0.01 + 0.015, 1e-15);
  EXPECT_EQ(grouped.load, (std::vector<std::int64_t>{3, 1}));
  const std::vector<double> dweight = {0.3, -0.2, 0.7, 0.1};
  const auto d = route_backward(cfg, grouped, dweight, 2.0);
  auto expected = route_backward(cfg, route(cfg, first), {0.3, -0.2}, 2.0);
  const auto d2 = route_backward(cfg, route(cfg, second), {0.7, 0.1}, 2.0);
  expected.insert(expected.end(), d2.begin(), d2.end());
  ASSERT_EQ(d.size(), expected.size());
  for (std::size_t i = 0; i < d.size(); ++i) EXPECT_NEAR(d[i], expected[i], 1e-15) << i;
}

// Loads (3, 1, 2, 2), mean 2: the overloaded expert's bias falls, the underloaded one's rises.
TEST(MoeRouter, BiasUpdateFollowsTheLoadGap) {
  std::vector<double> bias = {0.0, 0.0, 0.5, 0.0};
  update_router_bias(bias, {3, 1, 2, 2}, 0.001);
  EXPECT_EQ(bias, (std::vector<double>{-0.001, 0.001, 0.5, 0.0}));
}

// d(sum_m g_m w_m + daux * L)/d logits against central differences (h = 1e-6; the choice does
// not change within h for these random logits), for every score, normalization and loss.
TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 gen(5);
  std::normal_distribution<double> normal;
  const int N = 3, X = 5, k = 2;
  std::vector<double> logits(N * X), g(N * k);
  for (auto& v : logits) v = normal(gen);
  for (auto& v : g) v = normal(gen);
  for (const RouterScore score : {RouterScore::Softmax, RouterScore::Sigmoid}) {
    for (const bool normalize : {false, true}) {
      const RouterConfig cfg{.experts = X,
                             .top_k = k,
                             .score = score,
                             .normalize_top_k = normalize,
                             .routed_scaling_factor = 1.5,
                             .aux_loss_weight = 0.3};
      const double daux = 0.7;
      const auto objective = [&](const std::vector<double>& z) {
        const Routing r = route(cfg, z);
        double o = daux * r.aux_loss;
        for (std::size_t m = 0; m < g.size(); ++m) o += g[m] * r.weight[m];
        return o;
      };
      const Routing r = route(cfg, logits);
      const std::vector<double> analytic = route_backward(cfg, r, g, daux);
      for (std::size_t i = 0; i < logits.size(); ++i) {
        std::vector<double> plus = logits, minus = logits;
        plus[i] += 1e-6;
        minus[i] -= 1e-6;
        ASSERT_EQ(route(cfg, plus).expert, r.expert);
        ASSERT_EQ(route(cfg, minus).expert, r.expert);
        const double numeric = (objective(plus) - objective(minus)) / 2e-6;
        EXPECT_NEAR(analytic[i], numeric, 1e-8 + 1e-7 * std::abs(numeric))
            << "score " << int(score) << " normalize " << normalize << " logit " << i;
      }
    }
  }
}

}  // namespace
}  // namespace carousel
