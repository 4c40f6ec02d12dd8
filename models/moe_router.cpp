// moe_router.cpp — top-k routing, its weights, the balancing loss, and their backward
// (moe_router.h has the formulas).
#include "models/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/error.h"

namespace carousel {

namespace {

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// The scores of one token's logits z[0..X) into s.
void token_scores(RouterScore score, const double* z, int X, double* s) {
  if (score == RouterScore::Sigmoid) {
    for (int i = 0; i < X; ++i) s[i] = sigmoid(z[i]);
    return;
  }
  const double top = *std::max_element(z, z + X);
  double sum = 0;
  for (int i = 0; i < X; ++i) sum += s[i] = std::exp(z[i] - top);
  for (int i = 0; i < X; ++i) s[i] /= sum;
}

// The gradient of the logits of one token from the gradient of its scores (in place in ds).
void token_scores_backward(RouterScore score, const double* s, int X, double* ds) {
  if (score == RouterScore::Sigmoid) {
    for (int i = 0; i < X; ++i) ds[i] *= s[i] * (1.0 - s[i]);
    return;
  }
  double dot = 0;
  for (int i = 0; i < X; ++i) dot += ds[i] * s[i];
  for (int i = 0; i < X; ++i) ds[i] = s[i] * (ds[i] - dot);
}

// The balancing loss's factors f_i (constants) of group g.
std::vector<double> load_fractions(const RouterConfig& cfg, const Routing& r, std::int64_t g) {
  std::vector<double> f(static_cast<std::size_t>(cfg.experts));
  const std::int64_t* load = r.group_load.data() + g * cfg.experts;
  for (int i = 0; i < cfg.experts; ++i)
    f[std::size_t(i)] =
        double(cfg.experts) * double(load[i]) / (double(cfg.top_k) * double(r.group_total));
  return f;
}

}  // namespace

Routing route(const RouterConfig& cfg, const std::vector<double>& logits,
              const std::vector<double>& bias, std::int64_t group_tokens) {
  const int X = cfg.experts, k = cfg.top_k;
  CAROUSEL_ASSERT(X > 0 && k >= 1 && k <= X, "router of {} experts choosing {}", X, k);
  CAROUSEL_ASSERT(logits.size() % std::size_t(X) == 0, "{} logits for {} experts", logits.size(),
                  X);
  CAROUSEL_ASSERT(bias.empty() || bias.size() == std::size_t(X), "{} biases for {} experts",
                  bias.size(), X);
  Routing r;
  r.tokens = std::int64_t(logits.size() / std::size_t(X));
  r.group_tokens = group_tokens > 0 ? group_tokens : std::max<std::int64_t>(r.tokens, 1);
  CAROUSEL_ASSERT(r.tokens % r.group_tokens == 0, "{} tokens in groups of {}", r.tokens,
                  r.group_tokens);
  r.group_total = r.group_tokens;
  const std::int64_t groups = r.tokens / r.group_tokens;
  r.group_load.assign(std::size_t(groups * X), 0);
  r.scores.resize(logits.size());
  r.expert.resize(std::size_t(r.tokens * k));
  r.weight.resize(r.expert.size());
  r.load.assign(std::size_t(X), 0);
  std::vector<int> order(static_cast<std::size_t>(X));
  r.group_scores.assign(std::size_t(groups * X), 0.0);  // P_i * G per group
  for (std::int64_t t = 0; t < r.tokens; ++t) {
    double* s = r.scores.data() + t * X;
    token_scores(cfg.score, logits.data() + t * X, X, s);
    const auto key = [&](int i) { return s[i] + (bias.empty() ? 0.0 : bias[std::size_t(i)]); };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += s[order[std::size_t(j)]];
    for (int j = 0; j < k; ++j) {
      const int e = order[std::size_t(j)];
      r.expert[std::size_t(t * k + j)] = e;
      r.weight[std::size_t(t * k + j)] =
          cfg.routed_scaling_factor * (cfg.normalize_top_k ? s[e] / chosen : s[e]);
      ++r.load[std::size_t(e)];
      ++r.group_load[std::size_t(t / r.group_tokens * X + e)];
    }
    const double all = cfg.score == RouterScore::Sigmoid ? std::accumulate(s, s + X, 0.0) : 1.0;
    double* sums = r.group_scores.data() + t / r.group_tokens * X;
    for (int i = 0; i < X; ++i) sums[i] += s[i] / all;
  }
  score_balance(cfg, r);
  return r;
}

void score_balance(const RouterConfig& cfg, Routing& r) {
  r.aux_loss = 0;
  if (cfg.aux_loss_weight == 0.0) return;
  const int X = cfg.experts;
  const std::int64_t groups = std::int64_t(r.group_load.size()) / X;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::vector<double> f = load_fractions(cfg, r, g);
    double group_loss = 0;
    for (int i = 0; i < X; ++i)
      group_loss +=
          f[std::size_t(i)] * r.group_scores[std::size_t(g * X + i)] / double(r.group_total);
    r.aux_loss += cfg.aux_loss_weight * group_loss;
  }
}

std::vector<double> route_backward(const RouterConfig& cfg, const Routing& r,
                                   const std::vector<double>& dweight, double daux) {
  const int X = cfg.experts, k = cfg.top_k;
  CAROUSEL_ASSERT(dweight.size() == r.weight.size(), "{} weight gradients for {} slots",
                  dweight.size(), r.weight.size());
  std::vector<double> dlogits(r.scores.size(), 0.0);
  const bool balance = cfg.aux_loss_weight != 0.0 && daux != 0.0;
  std::vector<double> f;  // the factors of token t's group
  for (std::int64_t t = 0; t < r.tokens; ++t) {
    if (balance && t % r.group_tokens == 0) f = load_fractions(cfg, r, t / r.group_tokens);
    const double* s = r.scores.data() + t * X;
    double* ds = dlogits.data() + t * X;  // d scores first, then d logits in place
    // Combine weights: w_j = c * s_j (/ S, S = sum of the chosen s).
    double chosen = 0, dot = 0;
    for (int j = 0; j < k; ++j) {
      const std::size_t m = std::size_t(t * k + j);
      chosen += s[r.expert[m]];
      dot += dweight[m] * s[r.expert[m]];
    }
    for (int j = 0; j < k; ++j) {
      const std::size_t m = std::size_t(t * k + j);
      const double dw = cfg.routed_scaling_factor * dweight[m];
      ds[r.expert[m]] += cfg.normalize_top_k
                             ? dw / chosen - cfg.routed_scaling_factor * dot / (chosen * chosen)
                             : dw;
    }
    // Balancing loss: dL/ds'_i = alpha * f_i / G; s' = s / sum(s) for sigmoid scores.
    if (balance) {
      const double all = cfg.score == RouterScore::Sigmoid ? std::accumulate(s, s + X, 0.0) : 1.0;
      double g_dot = 0;
      for (int i = 0; i < X; ++i) g_dot += f[std::size_t(i)] * s[i] / all;
      const double scale = daux * cfg.aux_loss_weight / double(r.group_total);
      for (int i = 0; i < X; ++i) {
        ds[i] += cfg.score == RouterScore::Sigmoid ? scale * (f[std::size_t(i)] - g_dot) / all
                                                   : scale * f[std::size_t(i)];
      }
    }
    token_scores_backward(cfg.score, s, X, ds);
  }
  return dlogits;
}

void update_router_bias(std::vector<double>& bias, const std::vector<std::int64_t>& load,
                        double rate) {
  CAROUSEL_ASSERT(bias.size() == load.size(), "{} biases for {} experts", bias.size(), load.size());
  const double mean =
      double(std::accumulate(load.begin(), load.end(), std::int64_t(0))) / double(load.size());
  for (std::size_t i = 0; i < bias.size(); ++i) {
    const double gap = mean - double(load[i]);
    bias[i] += rate * double((gap > 0) - (gap < 0));
  }
}

}  // namespace carousel
