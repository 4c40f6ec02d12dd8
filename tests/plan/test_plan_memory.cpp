// test_plan_memory.cpp — the planner's memory and bytes arithmetic (host/plan/plan_memory.h)
// against what the real executor does on simulated CPU devices.
//
// Each rank of a small mesh builds its ShardedParams and RankExecutor as `carousel train` does
// and runs one step, with its pipeline, FSDP and data communicators wrapped in a counter. Then:
//   - the bytes the device allocator gained while ShardedParams was built equal the planner's
//     weights + gradients + optimizer (exact);
//   - the bytes still held after the step, beyond what was held before it, equal the planner's
//     weight slots plus the step's token batches on the first and last stages' ranks and of
//     the microbatches a rank runs outside the pipeline (2 x b x T int32 each), and the losses
//     of the heads it runs, counted here from the program (exact);
//   - asking ShardedParams for every local stage's gradients, as the backwards do, allocates
//     the planner's FSDP gradient buffers (exact; nothing without FSDP);
//   - the allocator's peak lies between what is provably alive at once (state + slots + the
//     larger of the FSDP gradient buffers and the stashed activations) and the planner's total
//     (its working set is a bound);
//   - the bytes each communicator was asked to move, converted with the ring conventions below,
//     equal the planner's bytes per link category (exact).
#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "collectives/communicator.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/data/data.h"
#include "host/mesh/mesh.h"
#include "host/runtime/rank_executor.h"
#include "host/runtime/sharded_params.h"
#include "host/plan/plan_memory.h"
#include "host/reliability/flight_recorder.h"
#include "host/report/logging.h"
#include "host/schedule/simulate.h"
#include "tests/support/communicator_decorator.h"

namespace carousel {
namespace {

// Counts the bytes one member of a ring collective sends: all-gather (G-1) x its part,
// reduce-scatter (G-1) x its part, all-reduce 2 (G-1)/G x the buffer, a send its buffer.
class CountingCommunicator final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  double sent = 0;

  Event do_all_gather(const Tensor& send, const Tensor& recv) override {
    sent += double(size() - 1) * double(send.nbytes());
    return inner().all_gather(send, recv);
  }
  Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    sent += double(size() - 1) * double(recv.nbytes());
    return inner().reduce_scatter(send, recv, op);
  }
  Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    sent += 2.0 * double(size() - 1) / double(size()) * double(send.nbytes());
    return inner().all_reduce(send, recv, op);
  }
  Event do_broadcast(const Tensor& send, const Tensor& recv, int root) override {
    ADD_FAILURE() << "the step was not expected to broadcast on " << name();
    return inner().broadcast(send, recv, root);
  }
  Event do_send(const Tensor& data, int peer) override {
    sent += double(data.nbytes());
    return inner().send(data, peer);
  }
};

struct RankMeasure {
  std::int64_t state = 0;             // allocator growth while ShardedParams was built
  std::int64_t kept = 0;              // held after the step beyond what was held before it
  std::int64_t gradient_buffers = 0;  // allocated by asking for every local stage's gradients
  std::int64_t peak = 0;
  double pipe = 0, fsdp = 0, data = 0, tensor = 0, context = 0, expert = 0;
};

Config mesh_config(std::vector<std::string> keys, int global_batch) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  keys.insert(keys.begin(), {"max_target_length=16", "enable_checkpointing=false",
                             "base_output_directory=/tmp/carousel_plan_tests"});
  Config cfg = load_config("", keys).config;
  cfg.per_device_batch_size = double(global_batch) / double(cfg.num_devices());
  cfg.validate();
  return cfg;
}

std::vector<RankMeasure> run_one_step(const Config& cfg, const schedule::Program& program) {
  const MeshShape mesh = MeshShape::of(cfg);
  const auto data = make_data_loader(cfg);
  std::vector<RankMeasure> out(mesh.ranks());
  auto rank_main = [&](int rank, Backend& be, Communicator& world, Communicator&) {
    const RankPlace place = RankPlace::of(rank, mesh);
    RankCommunicators comms = split_communicators(world, place, program.layout, cfg.model);
    auto* pipe = testing::decorate<CountingCommunicator>(comms.pipe);
    CountingCommunicator* tie =
        comms.tie ? testing::decorate<CountingCommunicator>(comms.tie) : nullptr;
    auto* fsdp = testing::decorate<CountingCommunicator>(comms.fsdp);
    auto* replicas = testing::decorate<CountingCommunicator>(comms.data);
    auto* tensor = testing::decorate<CountingCommunicator>(comms.tensor);
    auto* context = testing::decorate<CountingCommunicator>(comms.context);
    CountingCommunicator* expert =
        comms.expert ? testing::decorate<CountingCommunicator>(comms.expert) : nullptr;
    CountingCommunicator* expert_data =
        comms.expert_data ? testing::decorate<CountingCommunicator>(comms.expert_data) : nullptr;
    CountingCommunicator* kv_share =
        comms.kv_share ? testing::decorate<CountingCommunicator>(comms.kv_share) : nullptr;
    auto held = [&] { return std::int64_t(be.allocator().stats().current_bytes); };
    const std::int64_t before = held();
    ShardedParams params(cfg, program.layout, place, be, comms);
    RankMeasure& m = out[rank];
    m.state = held() - before;
    FlightRecorder recorder;
    RankExecutor executor(cfg, program, place, be, comms, params, *data, recorder);
    const std::int64_t ready = held();
    executor.step(0, 0);
    be.synchronize();
    world.barrier().wait();  // every collective of the step has completed everywhere
    m.kept = held() - ready;
    m.peak = std::int64_t(be.allocator().stats().peak_bytes);
    // A backward asks for its stage's gradients; with FSDP that allocates the unsharded buffer
    // the step keeps until the optimizer. Asking for every local stage's allocates all of them.
    const std::int64_t before_buffers = held();
    std::vector<ParamSet> buffers;
    for (int v = 0; v < program.layout.stages(); ++v) {
      if (program.layout.rank_of(v) == place.stage_rank) buffers.push_back(params.gradients(v));
    }
    m.gradient_buffers = held() - before_buffers;
    m.pipe = pipe->sent + (tie ? tie->sent : 0.0);  // both sum over the stage ranks
    m.fsdp = fsdp->sent;
    // Each expert's replicas sum its gradients: replica traffic too.
    m.data = replicas->sent + (expert_data ? expert_data->sent : 0.0);
    m.expert = expert ? expert->sent : 0.0;
    m.tensor = tensor->sent + (kv_share ? kv_share->sent : 0.0);
    m.context = context->sent;
  };
  launch_ranks(cfg, mesh.ranks(), Transport::Local, nullptr, rank_main);
  return out;
}

struct MeshCase {
  const char* name;
  std::vector<std::string> keys;
  int global_batch = 8;  // sequences
};
void PrintTo(const MeshCase& c, std::ostream* os) { *os << c.name; }

class PlanMemory : public ::testing::TestWithParam<MeshCase> {};

TEST_P(PlanMemory, EqualsTheExecutorsAllocationsAndTraffic) {
  const Config cfg = mesh_config(GetParam().keys, GetParam().global_batch);
  const schedule::Program program = lowered_program(cfg);
  const schedule::SimResult sim = schedule::simulate(program, schedule_costs(cfg));
  const std::vector<RankMeasure> measured = run_one_step(cfg, program);
  const MeshShape mesh = MeshShape::of(cfg);
  const plan::MeshLinks links =
      plan::mesh_links(mesh.stages, mesh.fsdp, mesh.data, 1, mesh.tensor, mesh.context);
  const std::int64_t rows = cfg.global_batch() / cfg.microbatches() / (mesh.fsdp * mesh.data);
  const std::int64_t T = cfg.model.max_target_length / mesh.context;  // a context rank's tokens
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    const RankPlace place = RankPlace::of(rank, mesh);
    const int s = place.stage_rank;
    const RankMeasure& m = measured[rank];
    const plan::MemoryBreakdown p = plan::device_memory(cfg, program, s, sim.peak_activations[s]);
    SCOPED_TRACE(fmt::format("rank {} (stage rank {})", rank, s));
    EXPECT_EQ(m.state, p.weights + p.gradients + p.optimizer);
    // The microbatches whose tokens the rank reads (at the first stage and where the head
    // runs) and whose heads it runs (the last stage's, or its OUTSIDE actions').
    const int V = program.layout.stages();
    std::set<int> read, heads;
    for (const schedule::Action& a : program.ranks[std::size_t(s)]) {
      if (!a.is_compute()) continue;
      const bool last_forward = a.kind == schedule::Kind::F && a.stage == V - 1;
      if (a.kind == schedule::Kind::OUTSIDE || (last_forward && !program.layout.outside))
        heads.insert(a.index);
      if (a.stage == 0) read.insert(a.index);
    }
    read.insert(heads.begin(), heads.end());
    const std::int64_t token_batches = 2 * std::int64_t(read.size()) * rows * T * 4;
    // The heads' per-token losses, kept on the tensor rank that counts them.
    const std::int64_t losses =
        place.tensor_rank == 0 ? std::int64_t(heads.size()) * rows * T * 4 : 0;
    EXPECT_EQ(m.kept, p.weight_slots + token_batches + losses);
    EXPECT_EQ(m.gradient_buffers, p.gradient_buffers);
    const std::int64_t alive_together = p.weights + p.gradients + p.optimizer + p.weight_slots +
                                        std::max(p.gradient_buffers, p.activations);
    EXPECT_LE(alive_together, m.peak);
    EXPECT_LE(m.peak, p.total()) << "w " << p.weights << " g " << p.gradients << " o "
                                 << p.optimizer << " slots " << p.weight_slots << " gb "
                                 << p.gradient_buffers << " act " << p.activations << " ws "
                                 << p.working_set << " state " << m.state;
    const plan::LinkBytes b =
        plan::device_link_bytes(cfg, program, s, links, place.fsdp_rank, place.replica_rank());
    EXPECT_DOUBLE_EQ(m.pipe, b.pipeline + b.stage_sum);
    EXPECT_DOUBLE_EQ(m.fsdp, b.fsdp_gather + b.fsdp_scatter + b.extras);
    EXPECT_DOUBLE_EQ(m.data, b.data);
    EXPECT_DOUBLE_EQ(m.tensor, b.tensor);
    EXPECT_DOUBLE_EQ(m.context, b.context);
    EXPECT_DOUBLE_EQ(m.expert, b.expert);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, PlanMemory,
    ::testing::Values(
        // Tensor and context parallelism: each rank's parts, rows and tokens; the groups'
        // row gathers and scatters, key/value exchanges and shared parts' gradient sums.
        MeshCase{
            "T2_S2_F2_bsw",
            {"ici_tensor_parallelism=2", "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
             "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"}},
        MeshCase{"T4_kv_shared_zb_h1_remat_none",
                 {"ici_tensor_parallelism=4", "ici_pipeline_parallelism=2",
                  "base_num_decoder_layers=4", "num_layers_per_pipeline_stage=2",
                  "pipeline_schedule=zb_h1", "num_pipeline_microbatches=4", "remat_policy=none"}},
        // Selective remat: each layer's input and the policy's tensors kept; the backward's
        // recompute of one layer at a time, its tensor and context collectives.
        MeshCase{
            "T2_C2_S2_remat_minimal",
            {"ici_tensor_parallelism=2", "ici_context_parallelism=2", "ici_pipeline_parallelism=2",
             "num_pipeline_microbatches=2", "remat_policy=minimal"}},
        MeshCase{
            "T2_C2_S2_remat_save_dot_with_context_except_mlp",
            {"ici_tensor_parallelism=2", "ici_context_parallelism=2", "ici_pipeline_parallelism=2",
             "num_pipeline_microbatches=2", "remat_policy=save_dot_with_context_except_mlp"}},
        MeshCase{"S2_F2_remat_save_qkv_proj",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_pipeline_microbatches=4", "remat_policy=save_qkv_proj"}},
        MeshCase{"C2_T2_D2_zero1_F2",
                 {"ici_context_parallelism=2", "ici_tensor_parallelism=2", "ici_data_parallelism=2",
                  "ici_fsdp_parallelism=2", "num_pipeline_microbatches=2",
                  "shard_optimizer_over_data=true"},
                 16},
        MeshCase{"C4_S2_bf16",
                 {"ici_context_parallelism=4", "ici_pipeline_parallelism=2",
                  "num_pipeline_microbatches=4", "dtype=bfloat16"}},
        MeshCase{"one_device", {}},
        // Mixture of experts: a dense first layer makes stages of different sizes; routed
        // experts' activations and the router's buffers.
        MeshCase{
            "moe_S2_F2_bsw",
            {"num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=32", "shared_experts=1",
             "first_num_dense_layers=1", "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
             "num_pipeline_microbatches=4", "pipeline_fsdp_ag_per_repeat=true"}},
        // Expert parallelism: each rank's experts, the per-kind gradient sums, and with top-k = X
        // (every token to every expert: balanced by construction) the exchange exactly.
        MeshCase{"moe_E2_S2_F2_bsw_all_experts",
                 {"num_experts=4", "num_experts_per_tok=4", "base_moe_mlp_dim=32",
                  "first_num_dense_layers=1", "ici_expert_parallelism=2",
                  "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_pipeline_microbatches=2", "pipeline_fsdp_ag_per_repeat=true"}},
        MeshCase{"moe_E2_D2_S2_zero1",
                 {"num_experts=4", "num_experts_per_tok=4", "base_moe_mlp_dim=32",
                  "first_num_dense_layers=1", "ici_expert_parallelism=2", "ici_data_parallelism=2",
                  "ici_pipeline_parallelism=2", "num_pipeline_microbatches=2",
                  "shard_optimizer_over_data=true"}},
        MeshCase{"moe_E4_D2_remat_none",
                 {"num_experts=8", "num_experts_per_tok=8", "shared_experts=1",
                  "base_moe_mlp_dim=16", "ici_expert_parallelism=4", "ici_data_parallelism=2",
                  "num_pipeline_microbatches=1", "remat_policy=none"}},
        // Context parallelism with the balancing loss: each MoE layer pools its sequences'
        // counts and score sums over the context group.
        MeshCase{"moe_C2_S2_balancing",
                 {"num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=32",
                  "load_balance_loss_weight=0.01", "ici_context_parallelism=2",
                  "ici_pipeline_parallelism=2", "num_pipeline_microbatches=2"}},
        // Tensor parallelism: every expert's columns split, the routed rows whole on each rank.
        MeshCase{"moe_T2_S2_shared",
                 {"num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=32",
                  "shared_experts=1", "ici_tensor_parallelism=2", "ici_pipeline_parallelism=2",
                  "num_pipeline_microbatches=2"}},
        MeshCase{
            "moe_T2_E2_dense_first_F2",
            {"num_experts=4", "num_experts_per_tok=4", "base_moe_mlp_dim=32",
             "first_num_dense_layers=1", "ici_tensor_parallelism=2", "ici_expert_parallelism=2",
             "ici_fsdp_parallelism=2", "num_pipeline_microbatches=1"}},
        MeshCase{"moe_1f1b_remat_none_top1",
                 {"num_experts=8", "num_experts_per_tok=1", "first_num_dense_layers=3",
                  "ici_pipeline_parallelism=2", "num_layers_per_pipeline_stage=4",
                  "pipeline_schedule=1f1b", "num_pipeline_microbatches=4", "remat_policy=none"}},
        // With an I/W split the planner holds each microbatch's activations until its W, while
        // an MoE layer's routed rows go at I (only the dense GEMMs wait): an upper bound.
        MeshCase{"moe_zb_h1_sigmoid_shared",
                 {"num_experts=4", "num_experts_per_tok=2", "routed_score_func=sigmoid",
                  "shared_experts=2", "base_moe_mlp_dim=48", "ici_pipeline_parallelism=2",
                  "num_layers_per_pipeline_stage=4", "pipeline_schedule=zb_h1",
                  "num_pipeline_microbatches=4"}},
        MeshCase{"S2_F2_circular",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_pipeline_microbatches=4"}},
        MeshCase{
            "S2_F2_bsw_bf16",
            {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "num_pipeline_microbatches=4",
             "pipeline_fsdp_ag_per_repeat=true", "dtype=bfloat16"}},
        MeshCase{"D2_S2_F2_zero1_once",
                 {"ici_data_parallelism=2", "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_pipeline_microbatches=2", "shard_optimizer_over_data=true",
                  "pipeline_fsdp_ag_once=true"}},
        MeshCase{"S1_F2_D2_plain_dp",
                 {"ici_data_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_layers_per_pipeline_stage=8", "num_pipeline_microbatches=2"}},
        MeshCase{"S1_F2_R8_bsw",
                 {"ici_fsdp_parallelism=2", "num_pipeline_microbatches=2",
                  "pipeline_fsdp_ag_per_repeat=true"}},
        MeshCase{"S4_interleaved_zb_remat_none",
                 {"ici_pipeline_parallelism=4", "pipeline_schedule=interleaved_zb",
                  "num_pipeline_microbatches=4", "remat_policy=none"}},
        MeshCase{"S2_F2_zbv_tied",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_layers_per_pipeline_stage=2", "pipeline_schedule=zbv",
                  "num_pipeline_microbatches=4", "logits_via_embedding=true"}},
        // F = 3 does not divide a stage's 4 x 45440 elements nor the extras: padded shards.
        MeshCase{"S2_F3_gpipe_padded",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=3", "pipeline_schedule=gpipe",
                  "num_layers_per_pipeline_stage=4", "num_pipeline_microbatches=2"},
                 6},
        // Uneven stages (what the planner searches): each stage padded to F on its own, a weight
        // slot the size of the rank's largest stage, gradient buffers per stage.
        MeshCase{"S2_F2_uneven_circular",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                  "num_pipeline_microbatches=4", "pipeline_stage_layers=1,3,3,1"}},
        MeshCase{
            "S4_uneven_1f1b_bf16",
            {"ici_pipeline_parallelism=4", "pipeline_schedule=1f1b", "num_pipeline_microbatches=4",
             "pipeline_stage_layers=1,3,3,1", "dtype=bfloat16"}},
        MeshCase{
            "D2_S2_F2_uneven_zero1_bsw",
            {"ici_data_parallelism=2", "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
             "num_pipeline_microbatches=2", "pipeline_schedule=1f1b", "pipeline_stage_layers=3,5",
             "shard_optimizer_over_data=true", "pipeline_fsdp_ag_per_repeat=true"}},
        // Layers outside the pipeline: every stage rank holds them with the final norm and the
        // head, reads the tokens and keeps the losses of its microbatches, and sums their
        // gradients over the stage ranks.
        MeshCase{"outside_S2_F2_gpipe",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2", "pipeline_schedule=gpipe",
                  "pipeline_parallel_layers=4", "num_pipeline_microbatches=4"}},
        MeshCase{
            "outside_S4_T2_M2_tied",
            {"ici_pipeline_parallelism=4", "ici_tensor_parallelism=2", "pipeline_parallel_layers=4",
             "num_pipeline_microbatches=2", "logits_via_embedding=true"}},
        // Every token to every expert: the exchanges in the OUTSIDE actions balanced exactly.
        MeshCase{"outside_S2_E2_F2_moe_all_experts",
                 {"ici_pipeline_parallelism=2", "ici_expert_parallelism=2",
                  "ici_fsdp_parallelism=2", "pipeline_parallel_layers=4",
                  "num_pipeline_microbatches=2", "num_experts=4", "num_experts_per_tok=4",
                  "base_moe_mlp_dim=32", "first_num_dense_layers=1", "shared_experts=1"}},
        MeshCase{"outside_S2_C2_D2_moe_zero1",
                 {"ici_pipeline_parallelism=2", "ici_context_parallelism=2",
                  "ici_data_parallelism=2", "pipeline_parallel_layers=6",
                  "num_pipeline_microbatches=2", "shard_optimizer_over_data=true", "num_experts=4",
                  "num_experts_per_tok=2", "base_moe_mlp_dim=32", "first_num_dense_layers=1"},
                 16},
        // F = 3 pads stages of 5 and 3 layers differently.
        MeshCase{"S2_F3_uneven_zb_remat_none",
                 {"ici_pipeline_parallelism=2", "ici_fsdp_parallelism=3", "pipeline_schedule=zb_h1",
                  "num_pipeline_microbatches=2", "pipeline_stage_layers=5,3", "remat_policy=none"},
                 6}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace carousel
