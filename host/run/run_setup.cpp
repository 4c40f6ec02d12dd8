// run_setup.cpp — the mesh checks, the lowered program, the transport, the data, and the ranks'
// agreement on them.
#include "host/run/run_setup.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <utility>

#include "compute/hash.h"
#include "host/build_info.h"
#include "host/config/schedule_config.h"
#include "host/plan/plan_model.h"

namespace carousel {

namespace {

// Mesh rules that depend on more than one key, and the process count of an mpirun job.
void check_mesh(const Config& cfg, const MeshShape& mesh, const Communicator* process_world) {
  CAROUSEL_CHECK(cfg.model.is_llama(),
                 "carousel train runs decoder_block=llama; the simple block is for pipeline "
                 "equivalence tests");
  cfg.check_microbatch_split();
  const int ranks = mesh.ranks();
  CAROUSEL_CHECK(!process_world || process_world->size() == ranks,
                 "mpirun started {} processes but the config has D x E x S x F x T x C = {} x {} x "
                 "{} x {} x {} x {} = {} devices (ici_data_parallelism x ici_expert_parallelism x "
                 "ici_pipeline_parallelism x ici_fsdp_parallelism x ici_tensor_parallelism x "
                 "ici_context_parallelism); start {} processes (mpirun -np {}) or change the mesh",
                 process_world ? process_world->size() : 0, mesh.data / mesh.expert, mesh.expert,
                 mesh.stages, mesh.fsdp, mesh.tensor, mesh.context, ranks, ranks, ranks);
}

// The address-space limit (ulimit -v) against what this process's ranks will map on CPUs: an
// mmap that fails inside OpenBLAS is retried forever (a hang with no message), so a run that
// cannot fit is refused before it starts. The estimate: the process at start-up (about 1.5 GiB
// of libraries and reservations, measured), glibc's malloc arenas (capped at 2 of 64 MiB under a
// limit: host/cli/startup_limits.cpp), an OpenBLAS buffer (128 MiB + its guard) and a thread
// stack per GEMM thread, and each rank's weights, gradients, optimizer state and the part
// of its working set no program avoids (the planner's memory_lower_bound; stashed activations
// come on top). GPUs reserve address space of their own:
// there the limit is not estimated.
void check_address_space(const Config& cfg, const MeshShape& mesh,
                         const Communicator* process_world) {
  if (runs_on_gpus(cfg)) return;
  rlim_t limit = RLIM_INFINITY;  // the smaller of the address-space and data-segment limits
  const char* which = "address-space limit (ulimit -v)";
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "address-space limit (ulimit -v)"},
                                       std::pair{RLIMIT_DATA, "data-segment limit (ulimit -d)"}}) {
    rlimit lim{};
    if (getrlimit(resource, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < limit) {
      limit = lim.rlim_cur;
      which = name;
    }
  }
  if (limit == RLIM_INFINITY) return;
  const int local_ranks = process_world ? 1 : mesh.ranks();
  const double threads = double(local_ranks) * rank_threads(mesh.ranks(), process_world);
  const double mib = 1024.0 * 1024.0;
  const double need = (1536 + 2 * 64) * mib + threads * (136 + 8) * mib +
                      double(local_ranks) * double(plan::memory_lower_bound(cfg));
  CAROUSEL_CHECK(double(limit) >= need,
                 "the {} is {:.0f} MiB but this run needs about {:.0f} MiB on this process ({} "
                 "rank(s), {:.0f} GEMM thread(s) with their OpenBLAS buffers, and the model's "
                 "state); raise the limit (to unlimited), or run fewer ranks or threads per "
                 "process",
                 which, double(limit) / mib, need / mib, local_ranks, threads);
}

void log_plan(const Config& cfg, const RunSetup& plan, const Communicator* process_world) {
  const char* devices = runs_on_gpus(cfg) ? "GPU" : "CPU";
  const MeshShape& mesh = plan.mesh;
  const schedule::Layout& layout = plan.program.layout;
  if (mesh.ranks() == 1) {
    spdlog::info("one {} device: the whole model as one stage, {} microbatch(es) in turn{}",
                 devices, layout.microbatches,
                 cfg.pipelined_layers() < cfg.model.num_layers
                     ? " (pipeline_parallel_layers changes nothing without a pipeline)"
                     : "");
  } else {
    spdlog::info(
        "pipeline: {} schedule, D={} replicas{} x S={} stages x F={} FSDP x T={} tensor x C={} "
        "context = {} logical {} devices ({}), R={} repeats, M={} microbatches{}{}; program "
        "validated and deadlock-free",
        cfg.pipeline_schedule, mesh.data / mesh.expert,
        mesh.expert > 1 ? fmt::format(" x E={} expert ranks", mesh.expert) : std::string(),
        mesh.stages, mesh.fsdp, mesh.tensor, mesh.context, mesh.ranks(), devices,
        process_world ? "one process each" : "threads of this process", layout.repeats,
        layout.microbatches,
        mesh.fsdp > 1 ? fmt::format(", weight slots {}", cfg.weight_slots()) : std::string(),
        layout.outside ? fmt::format(", layers {}-{} after the pipeline on every stage rank",
                                     cfg.pipelined_layers(), cfg.model.num_layers - 1)
                       : std::string());
  }
  spdlog::info("model: {} parameters; data: {}; batch {} x {} tokens", parameter_count(cfg.model),
               plan.data->describe(), cfg.global_batch(), cfg.model.max_target_length);
  spdlog::info("communication: {}", plan.transport.reason);
  if (cfg.rehearse_gpu_kernels) {
    spdlog::info("rehearse_gpu_kernels: CPU devices take bfloat16 where the GPU's fast tier does, "
                 "under its dtype rules");
  }
}

}  // namespace

RunSetup set_up_run(const Config& cfg, Communicator* process_world) {
  RunSetup plan;
  plan.mesh = MeshShape::of(cfg);
  check_mesh(cfg, plan.mesh, process_world);
  check_address_space(cfg, plan.mesh, process_world);
  plan.program = lowered_program(cfg);
  const MachineView machine = this_machine(process_world);
  plan.transport = process_world
                       ? agree_on_transport(cfg, plan.mesh.ranks(), machine, *process_world)
                       : choose_transport(cfg, plan.mesh.ranks(), machine);
  plan.tokenizer = read_run_tokenizer(cfg);
  plan.data = make_data_loader(cfg);
  if (!process_world || process_world->rank() == 0) check_packing_separators(cfg, *plan.data);
  if (cfg.eval_interval > 0) {
    plan.eval_data = make_eval_data_loader(cfg);
    plan.eval_batches = eval_batches(cfg, *plan.eval_data);
  }
  log_plan(cfg, plan, process_world);
  return plan;
}

void check_ranks_agree(Communicator& world, Backend& be, const Config& cfg,
                       const schedule::Program& program) {
  std::string identity = schedule::to_text(program) + "\n" + build_info::build_identity() + "\n";
  for (const auto& key : config_keys()) identity += key.name + "=" + key.get(cfg) + "\n";
  const std::uint64_t hash = fnv1a64(identity);
  const std::vector<std::int32_t> mine = {std::int32_t(hash >> 32), std::int32_t(hash)};
  Tensor all = be.empty({2 * world.size()}, DType::I32);
  world.all_gather(be.from_host(mine, {2}), all).wait();
  const auto hashes = be.to_host<std::int32_t>(all);
  std::vector<int> differ;
  for (int r = 1; r < world.size(); ++r) {
    if (hashes[2 * r] != hashes[0] || hashes[2 * r + 1] != hashes[1]) differ.push_back(r);
  }
  CAROUSEL_CHECK(differ.empty(),
                 "rank(s) {} run a different config, schedule or build than rank 0 (hashes of "
                 "config keys, program and build identity differ); start every process of the "
                 "job with the same carousel binary and the same arguments",
                 fmt::join(differ, ", "));
}

}  // namespace carousel
