// test_moe_mlp.cpp — the dropless MoE MLP: its forward against a loop over each token's chosen
// experts in double (no dispatch, no sorting: tests/support formulas only), its backward against
// central finite differences in double, both router kinds; the expert-parallel exchange; the MoE
// layers' parameter table and config checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "collectives/local_communicator.h"
#include "compute/cpu_backend.h"
#include "models/moe_mlp.h"
#include "models/params.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

constexpr int N = 6, E = 5, X = 4, K = 2, Fm = 3;

struct Problem {
  std::vector<double> x = testing::randn(N * E, 50), router = testing::randn(X * E, 51),
                      gate = testing::randn(X * Fm * E, 52, 0.5),
                      up = testing::randn(X * Fm * E, 53, 0.5),
                      down = testing::randn(X * E * Fm, 54, 0.5), dy = testing::randn(N * E, 55);
  std::vector<std::vector<double>*> all() { return {&x, &router, &gate, &up, &down}; }
};

const RouterConfig kRouters[] = {
    {.experts = X, .top_k = K, .normalize_top_k = true, .aux_loss_weight = 0.05},
    {.experts = X,
     .top_k = K,
     .score = RouterScore::Sigmoid,
     .normalize_top_k = true,
     .routed_scaling_factor = 2.5,
     .aux_loss_weight = 0.05}};

struct MoeRun {
  std::vector<double> y, dx, d_router, d_gate, d_up, d_down;
  double aux = 0;
  std::vector<int> experts;
};

MoeRun run(CpuBackend& be, const RouterConfig& rc, const Problem& p, DType dt, bool backward) {
  const MoeWeights w{make(be, p.router, {X, E}, dt), make(be, p.gate, {X, Fm, E}, dt),
                     make(be, p.up, {X, Fm, E}, dt), make(be, p.down, {X, E, Fm}, dt)};
  const Tensor x = make(be, p.x, {N, E}, dt), y = be.empty({N, E}, dt);
  MoeSaved saved;
  moe_mlp_forward(be, rc, w, x, y, saved);
  MoeRun r{fetch(be, y), {}, {}, {}, {}, {}, saved.routing.aux_loss, saved.routing.expert};
  if (!backward) return r;
  const MoeWeights g{be.zeros({X, E}, dt), be.zeros({X, Fm, E}, dt), be.zeros({X, Fm, E}, dt),
                     be.zeros({X, E, Fm}, dt)};
  const Tensor dx = be.empty({N, E}, dt);
  moe_mlp_backward(be, rc, w, g, saved, make(be, p.dy, {N, E}, dt), 1.0, dx);
  r.dx = fetch(be, dx);
  r.d_router = fetch(be, g.router);
  r.d_gate = fetch(be, g.gate);
  r.d_up = fetch(be, g.up);
  r.d_down = fetch(be, g.down);
  return r;
}

// y_t = sum_j w_tj down_e(silu(gate_e x_t) * up_e x_t), token by token.
std::vector<double> per_token_loop(const RouterConfig& rc, const Problem& p) {
  std::vector<double> logits(N * X, 0.0);
  for (int t = 0; t < N; ++t)
    for (int e = 0; e < X; ++e)
      for (int i = 0; i < E; ++i) logits[t * X + e] += p.router[e * E + i] * p.x[t * E + i];
  const Routing r = route(rc, logits);
  std::vector<double> y(N * E, 0.0);
  for (int t = 0; t < N; ++t) {
    for (int j = 0; j < K; ++j) {
      const int e = r.expert[t * K + j];
      std::vector<double> act(Fm);
      for (int f = 0; f < Fm; ++f) {
        double g = 0, u = 0;
        for (int i = 0; i < E; ++i) {
          g += p.gate[(e * Fm + f) * E + i] * p.x[t * E + i];
          u += p.up[(e * Fm + f) * E + i] * p.x[t * E + i];
        }
        act[f] = g / (1 + std::exp(-g)) * u;
      }
      for (int o = 0; o < E; ++o) {
        double out = 0;
        for (int f = 0; f < Fm; ++f) out += p.down[(e * E + o) * Fm + f] * act[f];
        y[t * E + o] += r.weight[t * K + j] * out;
      }
    }
  }
  return y;
}

TEST(MoeMlp, ForwardEqualsEachTokensChosenExperts) {
  CpuBackend be;
  const Problem p;
  for (const RouterConfig& rc : kRouters) {
    const std::vector<double> want = per_token_loop(rc, p);
    const MoeRun f64 = run(be, rc, p, DType::F64, false), f32 = run(be, rc, p, DType::F32, false);
    ASSERT_EQ(f64.y.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(f64.y[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;
      EXPECT_NEAR(f32.y[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
    }
    EXPECT_GT(f64.aux, 0);
  }
}

// d(sum dy * y + balancing loss) against central differences (step 1e-6) of every element of x
// and of every weight; the router's choice does not change within the step for these values.
TEST(MoeMlp, BackwardMatchesFiniteDifferences) {
  CpuBackend be;
  for (const RouterConfig& rc : kRouters) {
    Problem p;
    const MoeRun base = run(be, rc, p, DType::F64, true);
    const std::vector<const std::vector<double>*> analytic = {
        &base.dx, &base.d_router, &base.d_gate, &base.d_up, &base.d_down};
    const auto objective = [&](const MoeRun& r) {
      double o = r.aux;
      for (std::size_t i = 0; i < r.y.size(); ++i) o += p.dy[i] * r.y[i];
      return o;
    };
    const auto inputs = p.all();
    for (std::size_t a = 0; a < inputs.size(); ++a) {
      std::vector<double>& v = *inputs[a];
      for (std::size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i];
        v[i] = keep + 1e-6;
        const MoeRun plus = run(be, rc, p, DType::F64, false);
        v[i] = keep - 1e-6;
        const MoeRun minus = run(be, rc, p, DType::F64, false);
        v[i] = keep;
        ASSERT_EQ(plus.experts, base.experts);
        ASSERT_EQ(minus.experts, base.experts);
        const double numeric = (objective(plus) - objective(minus)) / 2e-6;
        EXPECT_NEAR((*analytic[a])[i], numeric, 1e-8 + 1e-6 * std::abs(numeric))
            << "input " << a << " element " << i << " score " << int(rc.score);
      }
    }
  }
}

// Expert parallelism's exchange (models/parallel/expert_parallel.h) on P ranks of 4 experts:
// each rank's rows, sorted by expert, arrive at their experts' rank expert by expert and source
// by source, each row intact, and come back to where they were. Counts with zeros, and every row
// to expert 0 (ranks that receive nothing, a rank that sends only to itself).
TEST(ExpertParallel, RowsReachTheirExpertsAndComeBack) {
  constexpr int X = 4;
  constexpr std::int64_t C = 3;  // row width
  const auto value = [](int source, std::int64_t row, std::int64_t col) {
    return 1000.0 * source + 10.0 * double(row) + double(col);
  };
  for (const int P : {2, 4}) {
    for (const bool all_to_zero : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "P " << P << (all_to_zero ? " all rows to expert 0" : ""));
      // counts[s][g]: rows rank s routes to expert g.
      std::vector<std::vector<std::int64_t>> counts(static_cast<std::size_t>(P),
                                                    std::vector<std::int64_t>(X));
      for (int src = 0; src < P; ++src)
        for (int g = 0; g < X; ++g)
          counts[std::size_t(src)][std::size_t(g)] =
              all_to_zero ? (g == 0 ? 3 : 0) : (src * 7 + g * 3) % 4;  // zeros included
      LocalWorld world(P, 30.0);
      std::vector<std::vector<double>> received(static_cast<std::size_t>(P)),
          back(static_cast<std::size_t>(P)), sent(static_cast<std::size_t>(P));
      run_ranks(
          P,
          [&](int r) {
            CpuBackend be;
            auto comm = world.communicator(r);
            const ExpertGroup group{comm.get()};
            std::vector<std::int64_t> first{0};
            for (int g = 0; g < X; ++g)
              first.push_back(first.back() + counts[std::size_t(r)][std::size_t(g)]);
            std::vector<double>& rows = sent[std::size_t(r)];
            for (std::int64_t i = 0; i < first.back(); ++i)
              for (std::int64_t c = 0; c < C; ++c) rows.push_back(value(r, i, c));
            const ExpertDispatch d = plan_dispatch(be, group, first);
            const Tensor local = to_experts(be, group, d, be.from_host(rows, {first.back(), C}));
            received[std::size_t(r)] = be.to_host<double>(local);
            back[std::size_t(r)] = be.to_host<double>(from_experts(be, group, d, local));
          },
          &world);
      for (int p = 0; p < P; ++p) {
        std::vector<double> expected;  // local expert by expert, each source's rows in order
        for (int g = p * X / P; g < (p + 1) * X / P; ++g) {
          for (int src = 0; src < P; ++src) {
            std::int64_t row = 0;  // source's first row for expert g
            for (int e = 0; e < g; ++e) row += counts[std::size_t(src)][std::size_t(e)];
            for (std::int64_t i = 0; i < counts[std::size_t(src)][std::size_t(g)]; ++i)
              for (std::int64_t c = 0; c < C; ++c) expected.push_back(value(src, row + i, c));
          }
        }
        EXPECT_EQ(received[std::size_t(p)], expected) << "rank " << p << " received";
        EXPECT_EQ(back[std::size_t(p)], sent[std::size_t(p)]) << "rank " << p << " back";
      }
    }
  }
}

// MoE layers hold the DeepSeek-V3 / Qwen-MoE names; each kind of routed-expert matrix is one
// consecutive block that ParamSet::stacked views as [X, ., .]; the FLOPs count k of X experts.
TEST(ParamTable, MoeLayersHoldRouterSharedAndStackedExperts) {
  ModelConfig cfg = model_preset("tiny");  // E 64, N 8, Fm 172
  cfg.num_experts = 4;
  cfg.num_experts_per_tok = 2;
  cfg.moe_mlp_dim = 32;
  cfg.shared_experts = 2;
  cfg.first_num_dense_layers = 1;
  cfg.validate();
  const auto specs = param_table(cfg);
  const auto index = [&](const std::string& name) {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == name) return int(i);
    return -1;
  };
  EXPECT_GE(index("model.layers.0.mlp.gate_proj.weight"), 0);  // the dense first layer
  EXPECT_EQ(index("model.layers.0.mlp.gate.weight"), -1);
  const int router = index("model.layers.1.mlp.gate.weight");
  ASSERT_GE(router, 0);
  EXPECT_EQ(specs[std::size_t(router)].shape, (Shape{4, 64}));
  EXPECT_EQ(specs[std::size_t(index("model.layers.1.mlp.shared_experts.down_proj.weight"))].shape,
            (Shape{64, 64}));  // 2 shared experts x 32 fused
  const int up0 = index("model.layers.1.mlp.experts.0.up_proj.weight");
  EXPECT_EQ(index("model.layers.1.mlp.experts.3.up_proj.weight"), up0 + 3);  // consecutive
  EXPECT_EQ(specs[std::size_t(index("model.layers.7.mlp.experts.2.down_proj.weight"))].shape,
            (Shape{64, 32}));
  // Per MoE layer: router 4x64, shared 3 x 64x64, experts 4 x 3 x 32x64.
  const std::int64_t dense = parameter_count(model_preset("tiny"));
  const std::int64_t moe_mlp = 4 * 64 + 3 * 64 * 64 + 4 * 3 * 32 * 64, dense_mlp = 3 * 172 * 64;
  EXPECT_EQ(parameter_count(cfg), dense + 7 * (moe_mlp - dense_mlp));
  // Active: 2 of the 4 experts per token.
  const double active_mlp = 4 * 64 + 3 * 64 * 64 + 2 * 3 * 32 * 64;
  EXPECT_DOUBLE_EQ(train_flops_per_token(cfg), train_flops_per_token(model_preset("tiny")) +
                                                   6.0 * 7 * (active_mlp - dense_mlp));
  CpuBackend be;
  const ParamSet set = ParamSet::allocate(be, specs, DType::F32);
  init_params(be, set, 3);
  const Tensor up = set.stacked(ParamRole::ExpertUp, 1);
  EXPECT_EQ(up.shape(), (Shape{4, 32, 64}));
  const auto whole = be.to_host<float>(up);
  const auto third = be.to_host<float>(set.tensors[std::size_t(up0 + 2)]);
  EXPECT_TRUE(std::equal(third.begin(), third.end(), whole.begin() + 2 * 32 * 64));
}

// Each MoE key's bad value is refused naming the key and what would be valid.
TEST(ModelConfig, MoeKeysAreCheckedByName) {
  const auto error = [](auto&& change) {
    ModelConfig c = model_preset("tiny");
    c.num_experts = 4;
    change(c);
    return testing::error_of([&] { c.validate(); });
  };
  EXPECT_NE(error([](ModelConfig& c) {
              c.num_experts_per_tok = 5;
            }).find("num_experts_per_tok=5 is not valid; it must be in [1, 4]"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) { c.capacity_factor = 1.25; }).find("use capacity_factor=-1"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) {
              c.routed_score_func = "relu";
            }).find("routed_score_func='relu' is not valid; use softmax"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) {
              c.first_num_dense_layers = 9;
            }).find("first_num_dense_layers=9 is not valid; it must be in [0, 8]"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) {
              c.load_balance_loss_weight = -1;
            }).find("load_balance_loss_weight=-1 is not valid"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) {
              c.decoder_block = "simple";
            }).find("num_experts=4 needs decoder_block=llama"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) {
              c.moe_mlp_dim = 1 << 20, c.num_experts = 4096;
            }).find("the experts have more than"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              ModelConfig c = model_preset("tiny");
              c.num_experts = 4, c.moe_mlp_dim = 33;  // T ranks hold Fe / T columns each
              check_tensor_split(c, 2);
            }).find("ici_tensor_parallelism=2 does not divide base_moe_mlp_dim=33"),
            std::string::npos);
}

}  // namespace
}  // namespace carousel
