// test_plan_search.cpp — `carousel plan`'s search finds the configuration worked out by hand on
// small made-up clusters, and its inputs are refused with one clear error.
//
// The model is the tiny preset at T = 16: V 256, E 64, N 8, H 4, Hkv 2 (head dim 16), Fm 172.
// By hand, per layer: norms 2 x 64, q and o 64 x 64 each, k and v 32 x 64 each, gate, up, down
// 172 x 64 each: 45440 parameters, 45312 of them in matmuls; extras: embedding and lm_head
// 256 x 64 each plus the final norm 64 = 32832. Forward FLOPs per token and layer: 2 x 45312
// matmul + 2 T E = 2048 attention = 92672; remat=full makes forward + backward 4 forwards; the
// head costs 6 V E = 98304 per token.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/io/huggingface/hf_import.h"
#include "host/plan/plan_search.h"
#include "host/plan/plan_units.h"
#include "host/schedule/simulate.h"
#include "tests/support/plan_workload.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

constexpr double kLayerParams = 45440, kExtras = 32832, kLayers = 8;
constexpr double kForwardPerToken = 92672, kHeadPerToken = 98304;

// Two devices on two nodes (every link is the inter-node one), 1 TFLOP/s reached in full.
plan::Cluster two_nodes(double inter_bytes_per_second, double memory = 1e12) {
  return {.devices = 2,
          .devices_per_node = 1,
          .memory_bytes = memory,
          .peak_flops = 1e12,
          .intra_node_bytes_per_second = 1e12,
          .inter_node_bytes_per_second = inter_bytes_per_second,
          .compute_efficiency = 1.0,
          .measured = {}};
}

// Bytes one replica sends to reduce the gradients of D = 2 (ZeRO-1: reduce-scatter of the
// layer shard and all-gather of the updated piece, (D-1) x piece each; extras all-reduced:
// 2 (D-1)/D x the table), float32.
double replica_reduction_bytes() {
  const double piece = kLayers * kLayerParams / 2;
  return 2 * piece * 4 + 2 * 0.5 * kExtras * 4;
}

// A fast link: no pipeline (S = 1) beats the two-stage pipeline, whose fill and drain idle a
// device. The replicas' row has no bubble and the step worked out by hand: each device's half of
// the batch computed at 1 TFLOP/s, plus the reduction. (FSDP over the two devices costs about
// the same on this link: one stage's gather and reduce-scatter instead of the reduction.)
TEST(PlanSearch, FastLinkPicksNoPipelineAndReplicasTakeTheHandWorkedTime) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::SearchResult r = plan::search(w, two_nodes(1e12), {.top = 8, .schedules = {}});
  ASSERT_FALSE(r.best.empty());
  EXPECT_EQ(r.best.front().candidate.stages, 1);
  const double tokens_per_device = 16.0 * 16 / 2;
  const double compute =
      tokens_per_device * (kLayers * 4 * kForwardPerToken + kHeadPerToken) / 1e12;
  const double expected = compute + replica_reduction_bytes() / 1e12;
  const auto replicas = std::find_if(r.best.begin(), r.best.end(), [](const plan::Prediction& p) {
    return p.candidate.stages == 1 && p.candidate.data == 2;
  });
  ASSERT_NE(replicas, r.best.end());
  EXPECT_NEAR(replicas->step_seconds, expected, 1e-12 * expected);
  EXPECT_NEAR(replicas->bubble, 0.0, 1e-12);
  // Model FLOPs: 6 x the matmul parameters (layers and lm_head, not the embedding lookup) plus
  // causal attention's 6 N T E, per token.
  EXPECT_NEAR(
      replicas->mfu,
      16.0 * 16 * (6 * (kLayers * 45312 + 256 * 64) + 6 * 8 * 16 * 64) / (expected * 2 * 1e12),
      1e-9);
  for (const auto& p : r.best) {
    if (p.candidate.stages == 2) {
      EXPECT_GT(p.step_seconds, expected);
    }
  }
}

// A slow link between the nodes (100 MB/s): the replicas' gradient reduction alone takes
// 15.9 ms, while the pipeline sends only 4 KiB activations per microbatch and computes for
// under 2 ms; so the planner puts the stages, not the replicas, across the nodes.
TEST(PlanSearch, SlowInterNodeLinkPutsStagesNotReplicasAcrossNodes) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const double bandwidth = 1e8;
  const plan::SearchResult r = plan::search(w, two_nodes(bandwidth), {.top = 3, .schedules = {}});
  ASSERT_FALSE(r.best.empty());
  const plan::Prediction& best = r.best.front();
  EXPECT_EQ(best.candidate.stages, 2);
  EXPECT_EQ(best.candidate.data, 1);
  const double reduction = replica_reduction_bytes() / bandwidth;  // 15.85 ms
  EXPECT_LT(best.step_seconds, reduction);
  const double compute_per_device =
      16.0 * 16 / 2 * (kLayers * 4 * kForwardPerToken) / 1e12;  // the layers, split in two
  EXPECT_GT(best.step_seconds, compute_per_device);
  for (const auto& p : r.best) {
    if (p.candidate.data == 2) {
      EXPECT_GE(p.step_seconds, reduction);
    }
  }
}

// The latency floor: on one device every microbatch's layer launches 12 kernels forward and
// 36 backward (remat: the forward again, the backward twice over), 5 us each at least, on top
// of the FLOP time; without it a tiny model was predicted at a billion tokens/s on 8 GPUs.
TEST(PlanSearch, KernelLatencyFloorsATinyModelsStep) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  plan::Cluster one = two_nodes(1e12);
  one.devices = 1;
  const plan::Prediction flops = plan::search(w, one, {.top = 1, .schedules = {}}).best.at(0);
  one.kernel_seconds = 5e-6;
  one.message_seconds = 10e-6;
  const plan::Prediction floored = plan::search(w, one, {.top = 1, .schedules = {}}).best.at(0);
  const double launches = double(floored.candidate.microbatches) * kLayers * (12 + 36) * 5e-6;
  EXPECT_GE(floored.step_seconds, flops.step_seconds + launches);
  EXPECT_LE(floored.step_seconds, flops.step_seconds + 1.3 * launches);  // + the head's share
}

// Device memory one byte short of a ZeRO-1 replica's parameters, gradients and moments (by
// hand: 4 (8 x 45440 + 32832) twice, plus 8 (8 x 45440 / 2 + 32832)); FSDP on one stage holds
// more (a gathered slot and an unsharded gradient buffer of the whole stage); so only the
// two-stage pipeline fits, and the planner says how many candidates it refused.
TEST(PlanSearch, AModelThatFitsOnlyAsTwoStagesIsPlannedAsTwoStages) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const double replica =
      2 * 4 * (kLayers * kLayerParams + kExtras) + 8 * (kLayers * kLayerParams / 2 + kExtras);
  const plan::SearchResult r =
      plan::search(w, two_nodes(1e12, replica - 1), {.top = 5, .schedules = {}});
  ASSERT_FALSE(r.best.empty());
  EXPECT_GT(r.refused_memory, 0);
  for (const auto& p : r.best) {
    EXPECT_EQ(p.candidate.stages, 2) << "S=" << p.candidate.stages << " F=" << p.candidate.fsdp;
    EXPECT_LE(double(p.memory.total()), replica - 1);
  }
}

TEST(PlanSearch, NothingFitsIsReportedWithTheSmallestNeed) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  const plan::SearchResult r = plan::search(w, two_nodes(1e12, 1e5), {.top = 5, .schedules = {}});
  EXPECT_TRUE(r.best.empty());
  EXPECT_EQ(r.refused_memory, r.candidates);
  EXPECT_GT(double(r.smallest_memory), 1e5);
}

// A long context: llama3-8b at 128k tokens per sequence on one node of 8 H100-like devices. A
// layer's activations for one sequence (about 18 GB in bf16) do not fit with T = C = 1 on any
// mesh; the search finds meshes that split the sequence (C) or the layer (T) within the node,
// and their printed keys say so.
TEST(PlanSearch, ALongContextIsPlannedWithContextOrTensorParallelism) {
  plan::Workload w;
  w.model = model_preset("llama3-8b");
  w.model.max_target_length = 131072;
  w.global_batch = 8;
  const plan::Cluster node{.devices = 8,
                           .devices_per_node = 8,
                           .memory_bytes = 80.0 * (1 << 30),
                           .peak_flops = 989e12,
                           .intra_node_bytes_per_second = 450e9,
                           .inter_node_bytes_per_second = 50e9,
                           .compute_efficiency = 0.6,
                           .measured = {}};
  plan::SearchOptions fixed;
  fixed.top = 3;
  fixed.tensor = fixed.context = 1;
  const plan::SearchResult none = plan::search(w, node, fixed);
  EXPECT_TRUE(none.best.empty());
  EXPECT_GT(double(none.smallest_memory), node.memory_bytes);  // what the closest one needs
  plan::SearchOptions open;
  open.top = 3;
  const plan::SearchResult r = plan::search(w, node, open);
  ASSERT_FALSE(r.best.empty());
  for (const auto& p : r.best) {
    const plan::Candidate& c = p.candidate;
    EXPECT_GT(c.tensor * c.context, 1);
    EXPECT_LE(double(p.memory.total()), node.memory_bytes);
    if (c.context > 1) {
      EXPECT_NE(p.keys.find(fmt::format("ici_context_parallelism={}", c.context)),
                std::string::npos);
    }
    if (c.tensor > 1) {
      EXPECT_NE(p.keys.find(fmt::format("ici_tensor_parallelism={}", c.tensor)), std::string::npos);
    }
  }
}

// An MoE model: the search also tries expert ranks carved from the data ranks. With E = 2 each
// device holds half the routed experts — on 4 devices as 2 replicas x 2 expert ranks, exactly
// half of 8 x 3 x 172 x 64 x 8 float32 parameters fewer than as 4 replicas — and sends each MoE
// layer's rows (the exchange's bytes); the keys name E. A dense model is never given experts.
TEST(PlanSearch, MixtureOfExpertsCandidatesSplitTheExpertsOverExpertRanks) {
  plan::Workload w = testing::tiny_plan_workload(16);
  w.model.num_experts = 8;
  w.model.num_experts_per_tok = 2;
  plan::Cluster node = two_nodes(1e12);
  node.devices = 4;
  node.devices_per_node = 4;
  const plan::Candidate replicas{
      .data = 4, .microbatches = 1, .layers_per_stage = 8, .schedule = "1f1b"};
  plan::Candidate experts = replicas;
  experts.data = 2;
  experts.expert = 2;
  const Config a = plan::candidate_config(w, replicas), b = plan::candidate_config(w, experts);
  const double saved = double(plan::state_memory(a, lowered_program(a).layout, 0).weights -
                              plan::state_memory(b, lowered_program(b).layout, 0).weights);
  EXPECT_EQ(saved, 8.0 / 2 * 3 * 172 * 64 * 8 * 4);
  EXPECT_NE(plan::candidate_keys(b).find("ici_expert_parallelism=2"), std::string::npos);

  plan::SearchOptions fixed{.top = 1, .schedules = {}};
  fixed.expert = 2;
  const plan::Prediction two = plan::search(w, node, fixed).best.at(0);
  EXPECT_EQ(two.candidate.expert, 2);
  EXPECT_GT(two.bytes.expert, 0.0);
  bool tried = false;
  const plan::SearchOptions open{.top = 1000, .schedules = {}};
  for (const plan::Prediction& p : plan::search(w, node, open).best)
    tried |= p.candidate.expert > 1;
  EXPECT_TRUE(tried) << "the open search considers expert ranks";
  for (const plan::Prediction& p : plan::search(testing::tiny_plan_workload(16), node, open).best)
    EXPECT_EQ(p.candidate.expert, 1);
}

TEST(PlanSearch, InconsistentInputsAreOneClearError) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  EXPECT_NE(testing::error_of([&] {
              plan::search(w, two_nodes(1e12), {.schedules = {"zigzag"}});
            }).find("pipeline_schedule='zigzag' is not valid; use circular"),
            std::string::npos);
  plan::Cluster odd = two_nodes(1e12);
  odd.devices = 12;
  odd.devices_per_node = 8;
  EXPECT_NE(testing::error_of([&] {
              plan::search(w, odd, {});
            }).find("--devices=12 must be a multiple of --devices-per-node=8"),
            std::string::npos);
  plan::Cluster three = two_nodes(1e12);
  three.devices = 3;  // 2 layers: no 3-stage pipeline; F x D = 3 does not divide 4 sequences
  plan::Workload two_layers = testing::tiny_plan_workload(4);
  two_layers.model.num_layers = 2;
  EXPECT_NE(testing::error_of([&] { plan::search(two_layers, three, {}); })
                .find("no mesh of 3 devices splits a global batch of 4 sequences into whole "
                      "microbatches with 2 layers"),
            std::string::npos);
}

TEST(PlanUnits, ParsesUnitsAndRefusesOthers) {
  EXPECT_EQ(plan::parse_bytes("--device-memory", "80GiB"), 80.0 * (1 << 30));
  EXPECT_EQ(plan::parse_bytes("--device-memory", "141GB"), 141e9);
  EXPECT_EQ(plan::parse_bandwidth("--inter-node-bandwidth", "400Gbit/s"), 50e9);
  EXPECT_EQ(plan::parse_bandwidth("--intra-node-bandwidth", "450"), 450e9);
  EXPECT_EQ(plan::parse_count("--global-batch-tokens", "4M"), 4194304.0);
  EXPECT_EQ(testing::error_of([] { plan::parse_bytes("--device-memory", "80XB"); }),
            "--device-memory='80XB' has an unknown unit 'XB'; it must be a positive number "
            "(bytes, with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  EXPECT_NE(testing::error_of([] {
              plan::parse_bandwidth("--intra-node-bandwidth", "-5");
            }).find("--intra-node-bandwidth='-5' is not valid; it must be a positive number"),
            std::string::npos);
}

// The keys printed with a candidate are a run: loaded as a config they give the candidate's mesh
// and, simulated as `carousel schedule` does, the planner's pipeline time (to the 6 significant
// digits the costs are printed with).
TEST(PlanSearch, PrintedKeysReproduceTheScheduleThePlannerRanked) {
  plan::Workload w = testing::tiny_plan_workload(16);
  w.model_keys = "model_name=tiny max_target_length=16";
  plan::Cluster cluster = two_nodes(1e9);
  cluster.devices = 8;
  cluster.devices_per_node = 4;
  const plan::SearchResult r = plan::search(w, cluster, {.top = 5, .schedules = {}});
  ASSERT_FALSE(r.best.empty());
  for (const auto& p : r.best) {
    std::vector<std::string> keys;
    std::istringstream in(p.keys);
    for (std::string k; in >> k;) keys.push_back(k);
    const Config cfg = load_config("", keys).config;
    EXPECT_EQ(cfg.ici_pipeline_parallelism, p.candidate.stages);
    EXPECT_EQ(cfg.ici_fsdp_parallelism, p.candidate.fsdp);
    EXPECT_EQ(cfg.ici_data_parallelism, p.candidate.data);
    EXPECT_EQ(cfg.global_batch(), 16);
    const double simulated =
        schedule::simulate(lowered_program(cfg), schedule_costs(cfg)).step_time;
    EXPECT_NEAR(simulated, p.pipeline_seconds, 1e-5 * p.pipeline_seconds) << p.keys;
  }
}

// `carousel plan --model path/config.json`: the shape of Meta's published Llama-3-8B config.json
// (values typed in from it, not from our preset) reads as the llama3-8b preset; an architecture
// carousel does not implement is refused with check_hf_config's message.
TEST(PlanModelSource, HuggingFaceConfigReadsAsTheModelItDescribes) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("carousel_plan_hf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
    "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false})";
  const ModelConfig m = model_from_hf_config((dir / "config.json").string());
  const ModelConfig preset = model_preset("llama3-8b");
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.emb_dim, 4096);
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.num_query_heads, 32);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.mlp_dim, 14336);
  EXPECT_EQ(m.max_target_length, 8192);
  EXPECT_EQ(m.rope_max_timescale, 500000.0);
  EXPECT_EQ(parameter_count(m), parameter_count(preset));
  EXPECT_EQ(model_from_hf_config(dir.string()).emb_dim, 4096);  // the directory works too

  std::ofstream(dir / "config.json") << R"({"model_type": "mistral", "hidden_size": 64,
    "intermediate_size": 172, "num_attention_heads": 4, "num_hidden_layers": 2,
    "vocab_size": 256})";
  EXPECT_NE(testing::error_of([&] {
              model_from_hf_config(dir.string());
            }).find("not supported: model_type=\"mistral\""),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              model_from_hf_config((dir / "absent.json").string());
            }).find("is not a Hugging Face config.json"),
            std::string::npos);
  fs::remove_all(dir);
}

// SearchOptions::stop (carousel plan's Ctrl-C) is polled once per candidate listed and once per
// candidate about to be simulated. Stopped after the listing and two simulations, the search
// returns those two (interrupted), never better than the full search's best; stopped at the
// first poll, it returns nothing, interrupted, without the "no mesh splits the batch" error.
TEST(PlanSearch, AStoppedSearchReturnsTheBestSimulatedSoFar) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  plan::Cluster cluster = two_nodes(1e12);
  cluster.devices = 8;
  cluster.devices_per_node = 4;
  std::int64_t polls = 0;
  plan::SearchOptions options{.top = 5, .schedules = {}};
  options.stop = [&] { return ++polls < 0; };  // counts, never stops
  const plan::SearchResult full = plan::search(w, cluster, options);
  ASSERT_FALSE(full.interrupted);
  ASSERT_GE(full.simulated, 3);
  const std::int64_t listed = polls - full.simulated - full.pruned;
  ASSERT_GT(listed, 0);

  std::int64_t left = listed + 2;  // the listing, then two simulations
  options.stop = [&] { return left-- <= 0; };
  const plan::SearchResult part = plan::search(w, cluster, options);
  EXPECT_TRUE(part.interrupted);
  EXPECT_EQ(part.candidates, full.candidates);
  EXPECT_EQ(part.simulated, 2);
  ASSERT_FALSE(part.best.empty());
  EXPECT_LE(part.best.size(), 2u);
  // (the ranking compares times in steps of 0.2 %, then bytes sent)
  EXPECT_GE(part.best.front().step_seconds, full.best.front().step_seconds * (1 - 0.002));

  options.stop = [] { return true; };
  const plan::SearchResult none = plan::search(w, cluster, options);
  EXPECT_TRUE(none.interrupted);
  EXPECT_TRUE(none.best.empty());
  EXPECT_EQ(none.candidates, 0);
  EXPECT_EQ(none.simulated, 0);
}

// The search prunes with step_time_lower_bound: it must not pass the simulated step of any
// candidate, pipelined or not, of every schedule (a bound above it would drop a better layout).
// 8 devices in two nodes and a slow link, so pipelines, FSDP and the bound's start-up term
// (ranks waiting for the first microbatch's forward) all occur.
TEST(PlanSearch, TheStepTimeBoundNeverPassesTheSimulatedStep) {
  const plan::Workload w = testing::tiny_plan_workload(16);
  plan::Cluster cluster = two_nodes(1e9);
  cluster.devices = 8;
  cluster.devices_per_node = 4;
  cluster.kernel_seconds = 1e-6;
  cluster.message_seconds = 1e-6;
  std::int64_t checked = 0, pipelined = 0;
  plan::for_each_layout(w, cluster, {.top = 5, .schedules = {}},
                        [&](const plan::Candidate& c, const plan::MeshLinks& links) {
    Config cfg;
    try {
      cfg = plan::candidate_config(w, c);
    } catch (const Error&) {
      return;
    }
    const plan::CostedCandidate costed = plan::cost_candidate(cluster, c, std::move(cfg), &links);
    const double bound = plan::step_time_lower_bound(costed, cluster);
    const plan::Prediction p = plan::predict(w, cluster, costed);
    EXPECT_LE(bound, p.step_seconds * (1 + 1e-12))
        << "S=" << c.stages << " F=" << c.fsdp << " D=" << c.data << " M=" << c.microbatches
        << " R=" << c.repeats << " " << c.schedule;
    ++checked;
    if (c.stages > 1) ++pipelined;
  });
  EXPECT_GT(checked, 100);
  EXPECT_GT(pipelined, 50);
}

}  // namespace
}  // namespace carousel
