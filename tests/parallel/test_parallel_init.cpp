// test_parallel_init.cpp — initial weights generated on OpenMP threads (host/runtime/
// sharded_params.cpp, models/params.h initial_values_into) are bitwise those of the
// single-threaded code they replaced, whatever the thread count: checked against an independent
// re-derivation of the generator, against values recorded from the old code, and between thread
// counts, for the flat generator and for whole ShardedParams of a sharded, tensor-split mesh.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <numbers>
#include <string>
#include <vector>

#include "collectives/local_communicator.h"
#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/mesh/mesh.h"
#include "host/runtime/sharded_params.h"
#include "models/params.h"

namespace carousel {
namespace {

// docs/model.md#initialisation written out again from its description, sharing no code with
// models/params.cpp: FNV-1a of the name, SplitMix64 as a counter-based generator keyed by
// (seed, name), Box-Muller on the counters 2i and 2i + 1 of whole-tensor element i, std 0.02.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double reference_value(const std::string& name, std::uint64_t seed, std::int64_t whole_index) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  const std::uint64_t key = mix(seed ^ mix(h));
  const auto uniform = [](std::uint64_t bits) { return (double(bits >> 11) + 0.5) * 0x1.0p-53; };
  const double u1 = uniform(mix(key + 2 * std::uint64_t(whole_index)));
  const double u2 = uniform(mix(key + 2 * std::uint64_t(whole_index) + 1));
  return 0.02 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> flat_values(const std::vector<ParamSpec>& specs, std::uint64_t seed,
                               std::int64_t begin, std::int64_t count, int threads) {
  omp_set_num_threads(threads);
  std::vector<float> out(std::size_t(count), -1.0f);  // every element must be written
  initial_flat_values(specs, seed, begin, count, out.data());
  return out;
}

Config small_llama(std::vector<std::string> keys) {
  keys.insert(keys.end(),
              {"base_output_directory=/tmp/carousel_parallel_init_tests", "init_weights_seed=11"});
  return load_config("", keys).config;
}

struct RestoreThreads : ::testing::Test {
  int before = omp_get_max_threads();
  void TearDown() override { omp_set_num_threads(before); }
};
using ParallelInit = RestoreThreads;

// Values recorded with the single-threaded initial_values at 61bc696 (before this generator),
// printed with %a: a change to the arithmetic (fused, vectorised or reordered math, float
// instead of double) would move some of them.
TEST_F(ParallelInit, ValuesRecordedFromTheSingleThreadedCodeAreKept) {
  struct Recorded {
    const char* name;
    std::uint64_t seed;
    std::int64_t index;
    double value;
    float as_float;
  };
  const Recorded recorded[] = {
      {"model.embed_tokens.weight", 0, 0, -0x1.f62e55248a07p-8, -0x1.f62e56p-8f},
      {"model.embed_tokens.weight", 0, 65535999, -0x1.e01160c687452p-6, -0x1.e0116p-6f},
      {"model.layers.7.mlp.down_proj.weight", 0, 12345, 0x1.55237b8413a0ap-9, 0x1.55237cp-9f},
      {"model.layers.19.self_attn.k_proj.weight", 1234, 4194303, 0x1.2f93206214409p-6,
       0x1.2f932p-6f},
      {"lm_head.weight", 1234, 65533959, -0x1.08f1cb37a1da5p-6, -0x1.08f1ccp-6f},
      {"model.layers.0.self_attn.q_proj.weight", 7, 999, -0x1.bc37c90d0485dp-7, -0x1.bc37cap-7f}};
  for (const Recorded& r : recorded) {
    ParamSpec spec{r.name, {r.index + 1}, ParamRole::Wq};  // element `index` of a 1-D tensor
    double d = 0;
    float f = 0;
    initial_values_into(spec, r.seed, r.index, r.index + 1, &d);
    initial_values_into(spec, r.seed, r.index, r.index + 1, &f);
    EXPECT_EQ(d, r.value) << r.name << "[" << r.index << "]";
    EXPECT_EQ(f, r.as_float) << r.name << "[" << r.index << "]";
    EXPECT_EQ(reference_value(r.name, r.seed, r.index), r.value) << r.name;
    EXPECT_EQ(flat_values({spec}, r.seed, r.index, 1, 2).at(0), r.as_float) << r.name;
  }
}

// The flat generator over a tensor rank's table (row slices, column slices of o_proj and
// down_proj, norm gains of ones) with FSDP padding past the end: the same bits at 1, 2, 3 and 4
// threads, any sub-range equal to the same elements of the whole, and sampled elements equal to
// the independent derivation at their whole-tensor index (rounded to float once).
TEST_F(ParallelInit, FlatValuesAreTheSameAtAnyThreadCountAndEqualTheReference) {
  const Config cfg = small_llama({"ici_tensor_parallelism=2"});
  const std::vector<ParamSpec> specs = param_table(cfg.model, TensorSplit{1, 2});
  const std::int64_t total = ParamSet::total_numel(specs), padded = total + 37;
  const std::uint64_t seed = 11;
  const std::vector<float> one = flat_values(specs, seed, 0, padded, 1);
  for (int threads : {2, 3, 4}) {
    EXPECT_TRUE(same_bits(flat_values(specs, seed, 0, padded, threads), one)) << threads;
  }
  // A range starting inside one tensor and ending in the padding, as an FSDP shard does.
  const std::int64_t begin = total - 70001;
  const std::vector<float> tail = flat_values(specs, seed, begin, padded - begin, 3);
  EXPECT_TRUE(same_bits(tail, std::vector<float>(one.begin() + begin, one.end())));
  for (std::int64_t i = total; i < padded; ++i) EXPECT_EQ(one[std::size_t(i)], 0.0f) << i;
  // Every tensor's first, middle and last element against the reference.
  std::int64_t offset = 0;
  int checked = 0;
  for (const ParamSpec& spec : specs) {
    const std::int64_t n = numel(spec.shape);
    for (const std::int64_t local : {std::int64_t(0), n / 2 + 1, n - 1}) {
      const float expected =
          spec.init_ones ? 1.0f : float(reference_value(spec.name, seed, spec.whole_index(local)));
      ASSERT_EQ(one[std::size_t(offset + local)], expected) << spec.name << "[" << local << "]";
      ++checked;
    }
    offset += n;
  }
  EXPECT_GT(checked, 30);
  // A column slice's element maps to its whole-tensor index: (row, begin + column).
  const ParamSpec* o_proj = nullptr;
  for (const ParamSpec& s : specs) {
    if (s.role == ParamRole::Wo && s.layer == 0) o_proj = &s;
  }
  ASSERT_NE(o_proj, nullptr);
  ASSERT_EQ(o_proj->tensor.dim, 1);
  const std::int64_t cols = o_proj->shape[1], whole_cols = o_proj->whole()[1];
  EXPECT_EQ(o_proj->whole_index(cols + 3), whole_cols + o_proj->tensor.begin + 3);
}

// The whole tensors of a run's ShardedParams (the masters gathered from every shard and part, as
// a checkpoint holds them), each rank thread computing with `threads` OpenMP threads.
std::map<std::string, std::vector<float>> initial_whole_tensors(const Config& cfg, int threads) {
  const MeshShape mesh = MeshShape::of(cfg);
  const schedule::Layout layout = lowered_program(cfg).layout;
  std::map<std::string, std::vector<float>> out;
  std::mutex mutex;
  const LocalWorld world(mesh.ranks());
  run_ranks(
      mesh.ranks(),
      [&](int rank) {
        omp_set_num_threads(threads);  // this rank thread's OpenMP team
        const auto comm = world.communicator(rank);
        CpuBackend be(rank);
        const RankPlace place = RankPlace::of(rank, mesh);
        RankCommunicators comms = split_communicators(*comm, place, layout, cfg.model);
        ShardedParams params(cfg, layout, place, be, comms);
        CheckpointPart part = params.checkpoint_part(/*moments=*/false);
        std::lock_guard lock(mutex);
        for (auto& t : part.params) out[t.name] = std::move(t.values);
      },
      &world);
  return out;
}

// ShardedParams at 1 and 3 OpenMP threads per rank: bitwise the same whole tensors, each equal to
// the single-threaded initial_values of the whole tensor rounded to float (what the stage's
// std::vector<double> held before). Two layouts: 4 ranks, FSDP 2 x tensor 2 (padded shards, split
// tensors); one rank whose embedding and lm_head (2 x 40000 x 64 elements) are staged in two
// uploads of ShardedParams::kInitChunk.
TEST_F(ParallelInit, ShardedParamsAreTheSameAtAnyThreadCount) {
  const std::vector<std::vector<std::string>> layouts = {
      {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}, {"vocab_size=40000"}};
  for (const auto& keys : layouts) {
    const Config cfg = small_llama(keys);
    const auto one = initial_whole_tensors(cfg, 1), three = initial_whole_tensors(cfg, 3);
    const std::vector<ParamSpec> whole = param_table(cfg.model);
    ASSERT_EQ(one.size(), whole.size()) << keys.front();
    for (const ParamSpec& spec : whole) {
      ASSERT_TRUE(one.count(spec.name) && three.count(spec.name)) << spec.name;
      EXPECT_TRUE(same_bits(one.at(spec.name), three.at(spec.name))) << spec.name;
      const std::vector<double> values = initial_values(spec, 11);
      EXPECT_TRUE(same_bits(one.at(spec.name), std::vector<float>(values.begin(), values.end())))
          << spec.name;
    }
  }
  EXPECT_GT(2 * 40000 * 64, ShardedParams::kInitChunk);
}

}  // namespace
}  // namespace carousel
