// test_layer_parallel.cpp — tensor and context parallelism's pieces against the unsharded model:
// the parameter table's parts tile every whole tensor and start from its initial values, and a
// llama layer computed by T tensor x C context ranks on their tokens, rows and weight parts
// (threads over the in-process communicator) gives the whole layer's output, input gradient and
// weight gradients, in float64 (1e-12: only the order of the partial sums differs); and the
// vocabulary-parallel embedding and head by T ranks give the whole ones' rows, losses and
// gradients the same way. With quantization=fp8 (docs/float8.md) the layer by T x C ranks equals
// the whole float8 layer as closely (every operand's amax reduced over the ranks holding its
// parts), and a shard-local amax would not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>

#include "collectives/local_communicator.h"
#include "compute/cpu_backend.h"
#include "models/embed_head.h"
#include "models/layer.h"
#include "models/parallel/float8_gemm.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

ModelConfig layer_config(std::int64_t kv_heads) {
  ModelConfig c;
  c.vocab_size = 12;
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

// Each whole element is held by exactly as many ranks as its tensor placement says, and a part's
// initial values are the whole tensor's at its indices.
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
            ASSERT_EQ(c, p.tensor.holders_of(T)) << p.name << " T=" << T << " kv=" << kv;
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
  cfg.mlp_dim = 12;
  cfg.vocab_size = 10;
  msg = testing::error_of([&] { check_tensor_split(cfg, 4); });
  EXPECT_NE(msg.find("does not divide vocab_size=10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("valid values: 1, 2, 5, 10"), std::string::npos) << msg;
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
  layer_backward(be, cfg, lw, lg, rope, saved, dyt, dxt, 1.0, nullptr, parallel);
  LayerRun out{fetch(be, yt), fetch(be, dxt), {}};
  for (std::size_t i = 0; i < specs.size(); ++i) out.grads[specs[i].name] = fetch(be, g.tensors[i]);
  return out;
}

struct Split {
  int tensor, context;
  std::int64_t kv_heads;
  bool fp8 = false;  // quantization=fp8: the projections' operands quantised (float8_gemm.h)
};
std::string split_name(const Split& s) {
  return "T" + std::to_string(s.tensor) + "_C" + std::to_string(s.context) + "_kv" +
         std::to_string(s.kv_heads) + (s.fp8 ? "_fp8" : "");
}
void PrintTo(const Split& s, std::ostream* os) { *os << split_name(s); }

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

// One layer by T x C ranks and by one: each rank's output rows, input gradient rows and gradient
// parts (summed over the ranks holding partial gradients: every context rank, and the tensor
// ranks sharing a part), beside the whole layer's.
struct ParallelLayer {
  struct Compared {
    std::string what;
    std::vector<double> got, expected;
  };
  std::vector<Compared> compared;
};

ParallelLayer run_parallel_layer(const Split& split) {
  const auto [T, C, kv, fp8] = split;
  ModelConfig cfg = layer_config(kv);
  if (fp8) cfg.quantization = "fp8";
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

  ParallelLayer out;
  for (int r = 0; r < ranks; ++r) {
    const std::string who = "rank " + std::to_string(r);
    out.compared.push_back({"y of " + who, runs[r].y, expected_y[r]});
    out.compared.push_back({"dx of " + who, runs[r].dx, expected_dx[r]});
    for (const ParamSpec& p : specs[r]) {
      std::vector<double> sum(std::size_t(numel(p.shape)), 0.0);
      const int holders = p.tensor.holders_of(T), first = r % T / holders * holders;
      for (int c = 0; c < C; ++c) {
        for (int t = first; t < first + holders; ++t) {
          const auto& theirs = runs[c * T + t].grads.at(p.name);
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += theirs[i];
        }
      }
      out.compared.push_back(
          {p.name + " gradient part of " + who, sum, part_of_whole(p, whole.grads.at(p.name))});
    }
  }
  return out;
}

// In float64 the only difference is the order of the partial sums (1e-12). With float8 the
// operands' scales come from the whole tensors' amax (reduced over the tensor and context ranks),
// so every rank quantises exactly as the whole layer does: 1e-12 too. (With tensor ranks sharing
// a KV head, T=4 at kv=2 or 1, each holder's key and value gradients are partial sums that float8
// quantises apart, which one device does not: not compared with float8.)
TEST_P(LayerParallelism, EqualsTheWholeLayer) {
  for (const auto& c : run_parallel_layer(GetParam()).compared)
    testing::expect_close(c.got, c.expected, 1e-12, 1e-12, c.what);
}

INSTANTIATE_TEST_SUITE_P(Splits, LayerParallelism,
                         ::testing::Values(Split{2, 1, 4}, Split{4, 1, 4}, Split{2, 1, 2},
                                           Split{4, 1, 2}, Split{4, 1, 1}, Split{1, 1, 2},
                                           Split{1, 2, 2}, Split{1, 3, 2}, Split{2, 2, 2},
                                           Split{4, 2, 1}, Split{2, 1, 2, true},
                                           Split{4, 1, 4, true}, Split{1, 2, 2, true},
                                           Split{2, 2, 2, true}),
                         [](const auto& info) { return split_name(info.param); });

// Why the float8 amax is reduced over the ranks: with each rank's scale from its own part's amax
// (the test switch), the same T=2 x C=2 layer misses the whole layer by far more than rounding —
// every quantised operand that is split over ranks lands on another float8 grid.
TEST(LayerParallelismFloat8, AShardLocalAmaxWouldMissTheWholeLayer) {
  set_float8_shard_local_amax_for_tests(true);
  const ParallelLayer local = run_parallel_layer({2, 2, 2, true});
  set_float8_shard_local_amax_for_tests(false);
  double worst = 0;
  for (const auto& c : local.compared) {
    double scale = 0, diff = 0;
    for (std::size_t i = 0; i < c.expected.size(); ++i) {
      scale = std::max(scale, std::abs(c.expected[i]));
      diff = std::max(diff, std::abs(c.got[i] - c.expected[i]));
    }
    worst = std::max(worst, diff / scale);
  }
  std::printf("T=2 x C=2 float8 layer with shard-local amax: %.2e from the whole layer\n", worst);
  EXPECT_GT(worst, 1e-3) << "a shard-local amax should change the quantised operands";
}

// The embedding's rows and the head's losses, input gradient and weight gradients on one rank;
// the extras' weights drawn per whole element (every rank's parts agree), gradients from zero.
struct ExtrasRun {
  std::vector<double> embedded, losses, dh;
  std::map<std::string, std::vector<double>> grads;
};

ExtrasRun run_extras(Backend& be, const ModelConfig& cfg, const std::vector<ParamSpec>& specs,
                     const Tensor& tokens, const std::vector<double>& h,
                     const std::vector<double>& dembed, Shape act, const TensorGroup& tensor) {
  ParamSet w = ParamSet::allocate(be, specs, DType::F64);
  ParamSet g = ParamSet::allocate(be, specs, DType::F64);
  be.fill(g.flat, 0.0);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto v = testing::randn(std::size_t(numel(specs[i].whole())), 20 + i, 0.5);
    if (specs[i].init_ones)
      for (auto& e : v) e += 1.0;
    be.upload(part_of_whole(specs[i], v).data(), w.tensors[i]);
  }
  ExtrasRun out;
  out.embedded = fetch(be, embed_forward(be, w, tokens, tensor));
  const HeadResult head =
      head_loss(be, cfg, w, g, make(be, h, act, DType::F64), tokens, 0.25, tensor);
  out.losses = fetch(be, head.losses.values);
  out.dh = fetch(be, head.dx);
  embed_backward(be, g, tokens, make(be, dembed, act, DType::F64), tensor);
  for (std::size_t i = 0; i < specs.size(); ++i) out.grads[specs[i].name] = fetch(be, g.tensors[i]);
  return out;
}

std::vector<ParamSpec> extras_specs(const ModelConfig& cfg, TensorSplit split) {
  std::vector<ParamSpec> out;
  for (const auto& spec : param_table(cfg, split)) {
    if (spec.layer < 0) out.push_back(spec);
  }
  return out;
}

class VocabularyParallelism : public ::testing::TestWithParam<std::pair<int, bool>> {};

// The tokens are their own targets (any ids in [0, V) will do); tied: the head is the embedding.
TEST_P(VocabularyParallelism, EmbeddingAndHeadEqualTheWholeOnes) {
  const auto [T, tied] = GetParam();
  ModelConfig cfg = layer_config(4);
  cfg.logits_via_embedding = tied;
  const std::int64_t b = 2, S = cfg.max_target_length, E = cfg.emb_dim, n = b * S / T;
  const auto ids = testing::randint(std::size_t(b * S), std::int32_t(cfg.vocab_size), 5);
  const auto h = testing::randn(std::size_t(b * S * E), 6),
             dembed = testing::randn(std::size_t(b * S * E), 7);
  CpuBackend whole_be;
  const ExtrasRun whole = run_extras(whole_be, cfg, extras_specs(cfg, {}),
                                     whole_be.from_host(ids, {b, S}), h, dembed, {b, S, E}, {});

  LocalWorld world(T, 30.0);
  std::vector<ExtrasRun> runs(static_cast<std::size_t>(T));
  run_ranks(
      T,
      [&](int t) {
        CpuBackend be;
        auto comm = world.communicator(t);
        const TensorGroup tensor{comm.get()};
        runs[t] = run_extras(be, cfg, extras_specs(cfg, {t, T}), be.from_host(ids, {b, S}),
                             rows_of(h, b, S, E, {}, t, T), rows_of(dembed, b, S, E, {}, t, T),
                             {n, E}, tensor);
      },
      &world);
  for (int t = 0; t < T; ++t) {
    const std::string who = "tensor rank " + std::to_string(t);
    testing::expect_close(runs[t].embedded, rows_of(whole.embedded, b, S, E, {}, t, T), 1e-12,
                          1e-12, "embedding rows of " + who);
    testing::expect_close(runs[t].losses, whole.losses, 1e-12, 1e-12, "losses on " + who);
    testing::expect_close(runs[t].dh, rows_of(whole.dh, b, S, E, {}, t, T), 1e-12, 1e-12,
                          "head input gradient rows of " + who);
    for (const ParamSpec& p : extras_specs(cfg, {t, T})) {
      std::vector<double> sum(std::size_t(numel(p.shape)), 0.0);  // the final norm: partials
      const int holders = p.tensor.holders_of(T), first = t / holders * holders;
      for (int u = first; u < first + holders; ++u) {
        const auto& theirs = runs[u].grads.at(p.name);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += theirs[i];
      }
      testing::expect_close(sum, part_of_whole(p, whole.grads.at(p.name)), 1e-12, 1e-12,
                            p.name + " gradient part of " + who);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, VocabularyParallelism,
                         ::testing::Values(std::pair{2, false}, std::pair{4, false},
                                           std::pair{2, true}, std::pair{4, true}),
                         [](const auto& info) {
                           return "T" + std::to_string(info.param.first) +
                                  (info.param.second ? "_tied" : "");
                         });

}  // namespace
}  // namespace carousel
