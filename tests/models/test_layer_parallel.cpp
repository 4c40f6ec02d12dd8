// test_layer_parallel.cpp — tensor and context parallelism's pieces against the unsharded model:
// the parameter table's parts tile every whole tensor and start from its initial values, and a
// llama layer computed by T tensor x C context ranks on their tokens, rows and weight parts
// (threads over the in-process communicator) gives the whole layer's output, input gradient and
// weight gradients, in float64 (1e-12: only the order of the partial sums differs).
#include <gtest/gtest.h>

#include <map>

#include "collectives/local_communicator.h"
#include "compute/cpu_backend.h"
#include "models/layer.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

ModelConfig layer_config(std::int64_t kv_heads) {
  ModelConfig c;
  c.vocab_size = 11;
  c.emb_dim = 16;
  c.num_layers = 1;
  c.num_query_heads = 4;
  c.num_kv_heads = kv_heads;
  c.mlp_dim = 12;
  c.max_target_length = 12;
  c.rope_max_timescale = 100.0;
  return c;
}

std::vector<ParamSpec> layer_specs(const ModelConfig& cfg, TensorSplit split) {
  std::vector<ParamSpec> out;
  for (const auto& spec : param_table(cfg, split)) {
    if (spec.layer == 0) out.push_back(spec);
  }
  return out;
}

// Each whole element is held by exactly tensor_replicas ranks, and a part's initial values are
// the whole tensor's at its indices.
TEST(TensorParallelTable, PartsTileTheWholeTensorsAndKeepTheirInitialValues) {
  for (const std::int64_t kv : {4, 2, 1}) {
    for (const int T : {2, 4}) {
      const ModelConfig cfg = layer_config(kv);
      const auto whole = param_table(cfg);
      std::map<std::string, std::vector<int>> held;
      for (int r = 0; r < T; ++r) {
        const auto parts = param_table(cfg, {r, T});
        ASSERT_EQ(parts.size(), whole.size());
        for (std::size_t i = 0; i < parts.size(); ++i) {
          const ParamSpec& p = parts[i];
          ASSERT_EQ(p.name, whole[i].name);
          EXPECT_EQ(p.whole(), whole[i].shape) << p.name;
          auto& count = held[p.name];
          count.resize(std::size_t(numel(whole[i].shape)));
          for (std::int64_t e = 0; e < numel(p.shape); ++e) ++count[std::size_t(p.whole_index(e))];
          const auto expected = part_of_whole(p, initial_values(whole[i], 3));
          EXPECT_EQ(initial_values(p, 3), expected) << p.name;
          for (const int c : count) EXPECT_LE(c, T);
        }
      }
      for (int r = 0; r < T; ++r) {
        for (const auto& p : param_table(cfg, {r, T})) {
          for (const int c : held[p.name]) {
            ASSERT_EQ(c, p.tensor_replicas) << p.name << " T=" << T << " kv=" << kv;
          }
        }
      }
    }
  }
}

TEST(TensorParallelTable, SplitsThatCannotWorkAreNamed) {
  ModelConfig cfg = layer_config(2);
  auto msg = testing::error_of([&] { check_tensor_split(cfg, 8); });
  EXPECT_NE(msg.find("ici_tensor_parallelism=8 does not divide base_num_query_heads=4"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("valid values: 1, 2, 4"), std::string::npos) << msg;
  cfg = layer_config(4);
  cfg.num_query_heads = 12;
  cfg.num_kv_heads = 3;
  cfg.emb_dim = 24;
  msg = testing::error_of([&] { check_tensor_split(cfg, 2); });
  EXPECT_NE(msg.find("base_num_kv_heads=3"), std::string::npos) << msg;
  cfg = layer_config(2);
  cfg.mlp_dim = 10;
  msg = testing::error_of([&] { check_tensor_split(cfg, 4); });
  EXPECT_NE(msg.find("does not divide base_mlp_dim=10"), std::string::npos) << msg;
  cfg.decoder_block = "simple";
  msg = testing::error_of([&] { check_tensor_split(cfg, 2); });
  EXPECT_NE(msg.find("needs decoder_block=llama"), std::string::npos) << msg;
}

// What one layer's forward and backward produce, all on the host.
struct LayerRun {
  std::vector<double> y, dx;
  std::map<std::string, std::vector<double>> grads;  // by parameter name
};

LayerRun run_layer(Backend& be, const ModelConfig& cfg, const std::vector<ParamSpec>& specs,
                   const std::vector<double>& x, const std::vector<double>& dy, Shape act,
                   const LayerParallel& parallel) {
  const std::uint64_t seed = 9;
  ParamSet w = ParamSet::allocate(be, specs, DType::F64);
  ParamSet g = ParamSet::allocate(be, specs, DType::F64);
  be.fill(g.flat, 0.0);
  // Weights with O(1) values drawn per whole element, so every rank's parts agree.
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto v = testing::randn(std::size_t(numel(specs[i].whole())), seed + i, 0.4);
    if (specs[i].init_ones)
      for (auto& e : v) e += 1.0;
    const auto part = part_of_whole(specs[i], v);
    be.upload(part.data(), w.tensors[i]);
  }
  const auto rope = context_rope(be,
                                 make_rope_tables(be, cfg.max_target_length, cfg.head_dim(),
                                                  cfg.rope_max_timescale, DType::F64),
                                 parallel.context);
  const Tensor xt = make(be, x, act, DType::F64), yt = be.empty(act, DType::F64);
  const LayerWeights lw = LayerWeights::from(w, 0), lg = LayerWeights::from(g, 0);
  LayerSaved saved;
  layer_forward(be, cfg, lw, rope, xt, yt, &saved, parallel);
  const Tensor dyt = make(be, dy, act, DType::F64), dxt = be.empty(act, DType::F64);
  layer_backward(be, cfg, lw, lg, rope, saved, dyt, dxt, nullptr, parallel);
  LayerRun out{fetch(be, yt), fetch(be, dxt), {}};
  for (std::size_t i = 0; i < specs.size(); ++i) out.grads[specs[i].name] = fetch(be, g.tensors[i]);
  return out;
}

struct Split {
  int tensor, context;
  std::int64_t kv_heads;
};

class LayerParallelism : public ::testing::TestWithParam<Split> {};

// The rows of [b, S, E] values that rank (tensor t, context c) holds: its context chunks of each
// sequence, then its tensor block of those rows.
std::vector<double> rows_of(const std::vector<double>& whole, std::int64_t b, std::int64_t S,
                            std::int64_t E, const ContextGroup& context, int t, int T) {
  std::vector<double> tokens;
  for (std::int64_t s = 0; s < b; ++s) {
    for (const std::int64_t p : context.positions(S)) {
      const auto first = whole.begin() + (s * S + p) * E;
      tokens.insert(tokens.end(), first, first + E);
    }
  }
  const std::int64_t n = std::int64_t(tokens.size()) / T;
  return {tokens.begin() + t * n, tokens.begin() + (t + 1) * n};
}

TEST_P(LayerParallelism, EqualsTheWholeLayer) {
  const auto [T, C, kv] = GetParam();
  const ModelConfig cfg = layer_config(kv);
  const std::int64_t b = 2, S = cfg.max_target_length, E = cfg.emb_dim;
  const std::int64_t n = b * S / C / T;  // rows per rank
  const auto x = testing::randn(std::size_t(b * S * E), 1),
             dy = testing::randn(std::size_t(b * S * E), 2);
  CpuBackend whole_be;
  const LayerRun whole = run_layer(whole_be, cfg, layer_specs(cfg, {}), x, dy, {b, S, E}, {});

  const int ranks = T * C;  // rank = context * T + tensor
  LocalWorld world(ranks, 30.0);
  std::vector<LayerRun> runs(static_cast<std::size_t>(ranks));
  std::vector<std::vector<ParamSpec>> specs(static_cast<std::size_t>(ranks));
  std::vector<std::vector<double>> expected_y(runs.size()), expected_dx(runs.size());
  run_ranks(
      ranks,
      [&](int r) {
        CpuBackend be;
        auto comm = world.communicator(r);
        const int t = r % T, c = r / T;
        auto tensor = comm->split(c, t);
        auto context = comm->split(t, c);
        const LayerParallel parallel{TensorGroup{tensor.get()}, ContextGroup{context.get()}};
        specs[r] = layer_specs(cfg, {t, T});
        const Shape act = T == 1 ? Shape{b, S / C, E} : Shape{n, E};
        runs[r] = run_layer(be, cfg, specs[r], rows_of(x, b, S, E, parallel.context, t, T),
                            rows_of(dy, b, S, E, parallel.context, t, T), act, parallel);
        expected_y[r] = rows_of(whole.y, b, S, E, parallel.context, t, T);
        expected_dx[r] = rows_of(whole.dx, b, S, E, parallel.context, t, T);
      },
      &world);

  for (int r = 0; r < ranks; ++r) {
    const std::string who = "rank " + std::to_string(r);
    testing::expect_close(runs[r].y, expected_y[r], 1e-12, 1e-12, "y of " + who);
    testing::expect_close(runs[r].dx, expected_dx[r], 1e-12, 1e-12, "dx of " + who);
    for (const ParamSpec& p : specs[r]) {
      // Every context rank and the tensor ranks sharing a part hold partial gradients: their sum
      // is the whole's part.
      std::vector<double> sum(std::size_t(numel(p.shape)), 0.0);
      const int first = r % T / p.tensor_replicas * p.tensor_replicas;
      for (int c = 0; c < C; ++c) {
        for (int t = first; t < first + p.tensor_replicas; ++t) {
          const auto& theirs = runs[c * T + t].grads.at(p.name);
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += theirs[i];
        }
      }
      testing::expect_close(sum, part_of_whole(p, whole.grads.at(p.name)), 1e-12, 1e-12,
                            p.name + " gradient part of " + who);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, LayerParallelism,
                         ::testing::Values(Split{2, 1, 4}, Split{4, 1, 4}, Split{2, 1, 2},
                                           Split{4, 1, 2}, Split{4, 1, 1}, Split{1, 1, 2},
                                           Split{1, 2, 2}, Split{1, 3, 2}, Split{2, 2, 2},
                                           Split{4, 2, 1}),
                         [](const auto& info) {
                           return "T" + std::to_string(info.param.tensor) + "_C" +
                                  std::to_string(info.param.context) + "_kv" +
                                  std::to_string(info.param.kv_heads);
                         });

}  // namespace
}  // namespace carousel
