// test_plan_devset.cpp — the planner's development set (issue 38): Megatron-Core's H100
// weak-scaling table (the Megatron-LM README's model table: GPT models, vocabulary 131 072,
// sequence 4 096, data parallel 48 in every row), each row evaluated with its published layout,
// and the predicted TFLOP/s per GPU printed beside the published one with the error.
//
// Assumptions, the same for every row (nothing is tuned per row):
// - the model: Megatron's GPT with an MLP of two matrices E x 4E and GeLU (the planner's
//   GPT-style MLP), full multi-head attention (KV heads = heads), untied embedding and output
//   layer (the table's parameter counts say so: 1.7B = 24 x 12 x 2048^2 + 2 x 131072 x 2048);
//   RMSNorm gains for its LayerNorms, no biases, rotary positions (carousel's block: the
//   difference is a few parameters per layer);
// - the layout as published: T = TP, S = PP, D = 48 replicas with ZeRO-1 (Megatron's
//   distributed optimizer; carousel's shards the moments only), no FSDP, no context or expert parallelism, micro-batch 1 (M = global
//   batch / 48), Megatron's interleaved 1F1B where PP > 1 with even stages, its virtual stages
//   per rank (not published) the planner's choice among those that divide the layers; PP = 1
//   runs the micro-batches as gradient accumulation;
// - no activation recomputation (Megatron's default; the README names no recompute flag, and
//   41-48% MFU with full recomputation would mean 55-64% of the peak in hardware FLOPs);
// - the cluster: the h100 preset (79.6 GiB, 989 TFLOP/s bf16, 450 GB/s NVLink, 400 Gbit/s per
//   GPU between nodes, 8 per node) and the planner's defaults (efficiency 0.6, 5 us per kernel,
//   10 us per message), as `carousel plan --gpu h100` uses them.
//
// Megatron counts TFLOP/s with its own formula (megatron/training/training.py,
// num_floating_point_operations): 12 x tokens x L x h^2 x (1 + 4 + 1 + s/h + V / (2 L h)), i.e.
// 72 L h^2 + 12 L s h + 6 V h per token: attention's score and value products over the whole
// s x s square, not the causal half the planner's tflops_per_device counts. The comparison
// converts the planner's predicted tokens per second with Megatron's formula.
//
// What is asserted is what holds today: every row evaluates as published (reported even when it
// does not fit); the planner's parameter and FLOP counts equal the arithmetic above; the seven
// rows up to 177B fit in the device (Row::fits_today says why the two largest do not); the
// table is printed (docs/performance.md shows it). The errors themselves are not asserted: the
// FLOP model's constant efficiency and the communication it leaves exposed (the replicas'
// reduction after the last backward, the tensor group's collectives between the GEMMs, both of
// which Megatron overlaps) are what issue 38's compute and communication models replace.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "host/plan/plan_gpus.h"
#include "host/plan/plan_search.h"
#include "host/plan/plan_units.h"
#include "models/params.h"

namespace carousel {
namespace {

struct Row {
  const char* params;
  std::int64_t heads, hidden, layers, tp, pp, gpus, batch;
  double tflops;  // published TFLOP/s per GPU
  // Whether carousel's memory holds the published layout today (asserted only when true): the
  // two largest need more than 80 GB with no recomputation, because carousel's tensor-parallel
  // layer keeps its gathered normalised inputs ([N, E] twice, where Megatron keeps the
  // sequence-parallel shards and gathers again in the backward) and ZeRO-1 shards only the
  // moments (Megatron's distributed optimizer shards the float32 master weights too).
  bool fits_today;
};
// The Megatron-LM README's weak-scaling table (H100), as issue 38 lists it.
constexpr Row kRows[] = {
    {"1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8, true},
    {"7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9, true},
    {"16B", 48, 6144, 32, 4, 1, 192, 192, 489.1, true},
    {"32B", 56, 7168, 48, 8, 1, 384, 192, 459.6, true},
    {"70B", 64, 8192, 84, 8, 2, 768, 384, 419.7, true},
    {"119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5, true},
    {"177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8, true},
    {"314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4, false},
    {"462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9, false},
};
constexpr std::int64_t kVocab = 131072, kSeq = 4096, kReplicas = 48;

ModelConfig gpt(const Row& r) {
  ModelConfig m;
  m.vocab_size = kVocab;
  m.emb_dim = r.hidden;
  m.num_layers = r.layers;
  m.num_query_heads = m.num_kv_heads = r.heads;
  m.mlp_dim = 4 * r.hidden;
  m.max_target_length = kSeq;
  m.logits_via_embedding = false;
  m.decoder_block = plan::kGptBlock;
  return m;
}

plan::Cluster h100(std::int64_t devices) {
  const plan::GpuPreset& g = plan::gpu_preset("h100");
  return {.devices = int(devices),
          .devices_per_node = 8,
          .memory_bytes = plan::parse_bytes("--device-memory", g.memory),
          .peak_flops = g.bf16_tflops * 1e12,
          .intra_node_bytes_per_second = plan::parse_bandwidth("--intra-node-bandwidth", g.nvlink),
          .inter_node_bytes_per_second = plan::parse_bandwidth("--inter-node-bandwidth", g.network),
          .compute_efficiency = 0.6,
          .kernel_seconds = 5e-6,
          .message_seconds = 10e-6,
          .measured = {}};
}

// The published layout, pinned.
plan::SearchOptions published(const Row& r) {
  plan::SearchOptions o{.top = 1, .schedules = {r.pp > 1 ? "interleaved_1f1b" : "1f1b"}};
  o.tensor = r.tp;
  o.context = 1;
  o.pins.stages = r.pp;
  o.pins.fsdp = 1;
  o.pins.data = kReplicas;
  o.pins.microbatches = r.batch / kReplicas;
  o.pins.even_stages = true;
  if (r.pp == 1) o.pins.repeats = 1;
  o.report_unfit = true;
  return o;
}

double h2(const Row& r) { return double(r.hidden) * double(r.hidden); }

TEST(PlanDevSet, MegatronWeakScalingTableRowsEvaluateAsPublished) {
  fmt::print("\n| params | TP | PP | GPUs | batch | R | step s | published TF/GPU | predicted TF/GPU "
             "| error | fits (GiB of {:.1f}) |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
             h100(8).memory_bytes / double(1 << 30));
  int within10 = 0;
  for (const Row& r : kRows) {
    SCOPED_TRACE(r.params);
    plan::Workload w;
    w.model = gpt(r);
    w.global_batch = r.batch;
    w.dtype = "bfloat16";
    w.remat_policy = "none";
    // The planner's counts against the arithmetic: per layer 4 h^2 attention + 8 h^2 MLP and
    // two norm gains, the embedding and output layer V h each, the final norm.
    double params = 0;
    for (const ParamSpec& s : plan::table_of(w.model)) params += double(numel(s.shape));
    const double L = double(r.layers), V = double(kVocab), h = double(r.hidden);
    EXPECT_EQ(params, L * (12 * h2(r) + 2 * h) + 2 * V * h + h);
    const double ours = 72 * L * h2(r) + 6 * L * kSeq * h + 6 * V * h;  // causal attention
    EXPECT_NEAR(plan::model_flops_per_token(w.model), ours, 1e-12 * ours);
    const double megatron = 72 * L * h2(r) + 12 * L * kSeq * h + 6 * V * h;

    const plan::Cluster cluster = h100(r.gpus);
    ASSERT_EQ(r.tp * r.pp * kReplicas, r.gpus);
    const plan::SearchResult res = plan::search(w, cluster, published(r));
    ASSERT_EQ(res.best.size(), 1u);
    const plan::Prediction& p = res.best.front();
    const plan::Candidate& c = p.candidate;
    EXPECT_EQ(c.stages, r.pp);
    EXPECT_EQ(c.fsdp, 1);
    EXPECT_EQ(c.data, kReplicas);
    EXPECT_EQ(c.tensor, r.tp);
    EXPECT_EQ(c.context, 1);
    EXPECT_EQ(c.microbatches, r.batch / kReplicas);
    EXPECT_TRUE(c.stage_layers.empty());
    EXPECT_TRUE(c.zero1);
    // tflops_per_device is the planner's convention: its tokens per second x its FLOPs.
    const double tokens_per_gpu = double(r.batch * kSeq) / p.step_seconds / double(r.gpus);
    EXPECT_NEAR(p.tflops_per_device, tokens_per_gpu * ours / 1e12, 1e-9 * p.tflops_per_device);
    const double predicted = tokens_per_gpu * megatron / 1e12;
    const double error = predicted / r.tflops - 1;
    within10 += std::abs(error) <= 0.10;
    fmt::print("| {} | {} | {} | {} | {} | {} | {:.3f} | {:.1f} | {:.1f} | {:+.1f}% | {} ({:.1f}) "
               "|\n",
               r.params, r.tp, r.pp, r.gpus, r.batch, c.repeats, p.step_seconds, r.tflops,
               predicted, 100 * error, p.fits ? "yes" : "NO",
               double(p.memory.total()) / double(1 << 30));
    // Evaluated and reported either way (report_unfit), with by how much it does not fit.
    EXPECT_EQ(p.fits, p.memory_over_bytes() <= 0);
    if (r.fits_today) {
      EXPECT_TRUE(p.fits) << "needs " << double(p.memory.total()) / double(1 << 30) << " GiB";
    }
  }
  fmt::print("\n{} of 9 rows within 10% of the published TFLOP/s per GPU (issue 38 asks 8)\n",
             within10);
}

}  // namespace
}  // namespace carousel
