// pipeline_trainer.cpp — the executor of lowered schedules on threads with LocalCommunicators.
#include "host/pipeline_trainer.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <mutex>

#include "collectives/local_communicator.h"
#include "cuda/cpu_backend.h"
#include "host/checkpoint.h"
#include "host/data.h"
#include "host/optimizer.h"
#include "host/schedule/generators.h"
#include "host/schedule/passes.h"
#include "host/schedule_config.h"
#include "host/step_report.h"
#include "models/model.h"

namespace carousel {

namespace sch = schedule;

namespace {

// Parameters a rank owns: the layers of its stages, plus the embedding on the first stage's
// rank and the final norm and head on the last stage's rank.
std::vector<ParamSpec> local_specs(const Config& cfg, const sch::Layout& l, int rank) {
  const int L = int(cfg.num_layers_per_pipeline_stage), V = l.stages();
  std::vector<ParamSpec> out;
  for (const auto& spec : param_table(cfg.model)) {
    const bool mine = spec.layer >= 0 ? l.rank_of(spec.layer / L) == rank
                      : spec.role == ParamRole::Embedding ? l.rank_of(0) == rank
                                                          : l.rank_of(V - 1) == rank;
    if (mine) out.push_back(spec);
  }
  return out;
}

std::vector<LayerWeights> stage_layers(const ParamSet& set, int stage, int L) {
  std::vector<LayerWeights> w;
  for (int l = 0; l < L; ++l) w.push_back(LayerWeights::from(set, stage * L + l));
  return w;
}

// One rank's part of a step: walks its instruction list.
class RankExecutor {
 public:
  RankExecutor(const Config& cfg, const sch::Program& program, int rank)
      : cfg_(cfg), layout_(program.layout), rank_(rank), actions_(program.ranks[rank]),
        be_(rank), specs_(local_specs(cfg, layout_, rank)),
        params_(ParamSet::allocate(be_, specs_, DType::F32)),
        grads_(ParamSet::allocate(be_, specs_, DType::F32)), opt_(AdamW::create(be_, specs_)),
        data_(make_data_loader(cfg)),
        rope_(make_rope_tables(be_, cfg.model.max_target_length, cfg.model.head_dim(),
                               cfg.model.rope_max_timescale)),
        remat_(parse_remat_policy(cfg.remat_policy)) {
    init_params(be_, params_, std::uint64_t(cfg.init_weights_seed));
  }

  // Returns (loss, grad norm) of the step, identical on every rank.
  std::pair<double, double> step(Communicator& comm, std::int64_t step) {
    be_.fill(grads_.flat, 0.0);
    const std::int64_t B = cfg_.global_batch(), M = layout_.microbatches, b = B / M;
    const std::int64_t T = cfg_.model.max_target_length;
    const double scale = 1.0 / double(B * T);
    double loss_sum = 0;
    std::map<std::int64_t, Microbatch> batches;
    auto batch = [&](int m) -> const Microbatch& {
      auto it = batches.find(m);
      if (it == batches.end()) {
        const TokenBatch tb = data_->batch(step, B, m * b, b);
        it = batches.emplace(m, Microbatch{be_.from_host(tb.inputs, {b, T}),
                                           be_.from_host(tb.targets, {b, T})}).first;
      }
      return it->second;
    };
    const int L = int(cfg_.num_layers_per_pipeline_stage), V = layout_.stages();
    for (std::size_t i = 0; i < actions_.size();) {
      const sch::Action& a = actions_[i];
      if (a.is_p2p()) {  // one group: the run of consecutive p2p actions
        comm.group_start();
        std::vector<std::pair<int, int>> sent_f, sent_b;
        for (; i < actions_.size() && actions_[i].is_p2p(); ++i) {
          const sch::Action& p = actions_[i];
          const Key k{p.stage, p.index};
          switch (p.kind) {
            case sch::Kind::SEND_F: comm.send(out_f_.at(k), p.peer), sent_f.push_back(k); break;
            case sch::Kind::SEND_B: comm.send(out_b_.at(k), p.peer), sent_b.push_back(k); break;
            case sch::Kind::RECV_F: comm.recv(in_f_[k] = activation(b, T), p.peer); break;
            default: comm.recv(in_b_[k] = activation(b, T), p.peer); break;  // RECV_B
          }
        }
        comm.group_end().wait();
        for (const auto& k : sent_f) out_f_.erase(k);
        for (const auto& k : sent_b) out_b_.erase(k);
        continue;
      }
      const int v = a.stage, m = a.index;
      const Key k{v, m};
      if (a.kind == sch::Kind::F) {
        Tensor x = v == 0 ? embed_forward(be_, params_, batch(m).inputs) : take(in_f_, k);
        Tensor y = stage_forward(be_, cfg_.model, stage_layers(params_, v, L), rope_, x, remat_,
                                 saved_[k]);
        if (v == V - 1) {
          HeadResult head = head_loss(be_, cfg_.model, params_, grads_, y, batch(m).targets, scale);
          loss_sum += head.loss_sum;
          in_b_[k] = head.dx;
        } else if (layout_.rank_of(v + 1) == rank_) {
          in_f_[{v + 1, m}] = y;  // local hand-off (no send)
        } else {
          out_f_[k] = y;
        }
      } else if (a.kind == sch::Kind::B) {
        Tensor dx = stage_backward(be_, cfg_.model, stage_layers(params_, v, L),
                                   stage_layers(grads_, v, L), rope_, saved_.at(k), take(in_b_, k));
        saved_.erase(k);
        if (v == 0) {
          embed_backward(be_, grads_, batch(m).inputs, dx);
        } else if (layout_.rank_of(v - 1) == rank_) {
          in_b_[{v - 1, m}] = dx;
        } else {
          out_b_[k] = dx;
        }
      } else if (a.kind == sch::Kind::OPTIMIZER) {
        return optimizer_step(comm, step, loss_sum * scale);
      } else {
        fail("pipeline executor: {} is not supported yet (FSDP and the zero-bubble I/W split "
             "run in the schedule simulator only)", sch::to_string(a));
      }
      ++i;
    }
    fail("pipeline executor: rank {}'s program has no OPTIMIZER action", rank_);
  }

  std::size_t peak_bytes() const { return be_.allocator().stats().peak_bytes; }

  // Copies this rank's parameters and AdamW moments into (to_full) or out of (!to_full) the
  // whole-model sets on `host`, by parameter name. Ranks own disjoint names, so they may run
  // concurrently.
  void exchange(Backend& host, const ParamSet* full_params, const ParamSet* full_m,
                const ParamSet* full_v, bool to_full) {
    const std::pair<const ParamSet*, ParamSet*> pairs[] = {
        {full_params, &params_}, {full_m, &opt_.m}, {full_v, &opt_.v}};
    for (const auto& [full, mine] : pairs) {
      if (!full) continue;
      for (std::size_t i = 0; i < mine->specs.size(); ++i) {
        const Tensor& f = full->tensors[full->index_of(mine->specs[i].name)];
        if (to_full) {
          host.upload(be_.to_host<float>(mine->tensors[i]).data(), f);
        } else {
          be_.upload(host.to_host<float>(f).data(), mine->tensors[i]);
        }
      }
    }
  }

 private:
  using Key = std::pair<int, int>;  // (stage, microbatch)

  Tensor activation(std::int64_t b, std::int64_t T) {
    return be_.empty({b, T, cfg_.model.emb_dim});
  }
  static Tensor take(std::map<Key, Tensor>& map, const Key& k) {
    auto it = map.find(k);
    CAROUSEL_CHECK(it != map.end(), "pipeline executor: no tensor for stage {} microbatch {}",
                   k.first, k.second);
    Tensor t = it->second;
    map.erase(it);
    return t;
  }

  // Loss (only the last stage's rank contributes) and the squared gradient norm are summed over
  // ranks in rank order; then every rank clips and steps its own parameters.
  std::pair<double, double> optimizer_step(Communicator& comm, std::int64_t step, double loss) {
    std::vector<double> sums = {loss, be_.sum_squares(grads_.flat)};
    Tensor t = be_.from_host(sums, {2});
    comm.all_reduce(t, t, ReduceOp::Sum).wait();
    sums = be_.to_host<double>(t);
    const double norm = std::sqrt(sums[1]);
    opt_.update(be_, cfg_, params_, grads_, step, learning_rate_at(cfg_, step),
                clip_scale(norm, cfg_.gradient_clipping_threshold));
    return {sums[0], norm};
  }

  const Config& cfg_;
  sch::Layout layout_;
  int rank_;
  std::vector<sch::Action> actions_;
  CpuBackend be_;
  std::vector<ParamSpec> specs_;
  ParamSet params_, grads_;
  AdamW opt_;
  std::unique_ptr<DataLoader> data_;
  RopeTables rope_;
  RematPolicy remat_;
  std::map<Key, StageSaved> saved_;       // forward state kept for the backward
  std::map<Key, Tensor> in_f_, in_b_;     // received / handed-over inputs of F and B
  std::map<Key, Tensor> out_f_, out_b_;   // outputs waiting for their SEND
};

}  // namespace

TrainResult train_pipeline(const Config& cfg) {
  const int S = int(cfg.ici_pipeline_parallelism);
  CAROUSEL_CHECK(cfg.model.is_llama(), "pipeline training runs decoder_block=llama");
  CAROUSEL_CHECK(!cfg.model.logits_via_embedding,
                 "logits_via_embedding=true ties the first and last stage's weights, which the "
                 "pipeline executor does not synchronise yet; use logits_via_embedding=false");
  CAROUSEL_CHECK(cfg.ici_fsdp_parallelism == 1,
                 "ici_fsdp_parallelism={}: FSDP inside stages is not executed yet (`carousel "
                 "schedule` simulates it); use 1",
                 cfg.ici_fsdp_parallelism);
  CAROUSEL_CHECK(cfg.pipeline_schedule != "zb_h1",
                 "pipeline_schedule=zb_h1 needs the I/W split of the backward, which the executor "
                 "does not run yet; use circular, gpipe, 1f1b or interleaved_1f1b");
  const sch::Program program =
      sch::lower(sch::generate(schedule_spec(cfg)), {0, 0, /*fsdp=*/false});
  sch::replay(program);
  spdlog::info("pipeline: {} schedule, S={} ranks (simulated CPU devices), R={} repeats, M={} "
               "microbatches; program validated and deadlock-free",
               cfg.pipeline_schedule, S, program.layout.repeats, program.layout.microbatches);

  // Whole-model parameters and moments on a host device: checkpoints are written from and read
  // into these, so a pipeline checkpoint is the same file a single-device run writes (global
  // names, unsharded) and either can resume the other.
  CpuBackend host(S);
  const auto specs = param_table(cfg.model);
  ParamSet full_params = ParamSet::allocate(host, specs, DType::F32);
  ParamSet full_m = ParamSet::allocate(host, specs, DType::F32);
  ParamSet full_v = ParamSet::allocate(host, specs, DType::F32);
  TrainResult result;
  const auto resume_from = cfg.enable_checkpointing ? latest_checkpoint(cfg) : std::nullopt;
  bool load_params = false, load_moments = false;
  if (resume_from) {
    result.start_step = load_checkpoint(host, *resume_from, {&full_params, &full_m, &full_v}).step;
    load_params = load_moments = true;
    spdlog::info("resuming from {} at step {}", *resume_from, result.start_step);
  } else if (!cfg.load_parameters_path.empty()) {
    load_checkpoint(host, cfg.load_parameters_path, {&full_params, nullptr, nullptr});
    load_params = true;
    spdlog::info("parameters loaded from {}", cfg.load_parameters_path);
  }
  CAROUSEL_CHECK(result.start_step <= cfg.steps,
                 "the run directory's checkpoint is at step {} but steps={}; raise steps to "
                 "continue training",
                 result.start_step, cfg.steps);

  StepReporter reporter(cfg);
  LocalWorld world(S);
  std::vector<std::size_t> peaks(S, 0);
  run_ranks(S, [&](int rank) {
    // The ranks share the machine's cores: each rank's OpenMP loops (and OpenBLAS, which uses
    // the same pool) get cores / S threads, at least one, so S ranks do not oversubscribe.
    omp_set_num_threads(std::max(1, omp_get_num_procs() / S));
    auto comm = world.communicator(rank);
    RankExecutor exec(cfg, program, rank);
    if (load_params) {
      exec.exchange(host, &full_params, load_moments ? &full_m : nullptr,
                    load_moments ? &full_v : nullptr, /*to_full=*/false);
    }
    for (std::int64_t step = result.start_step; step < cfg.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto [loss, norm] = exec.step(*comm, step);
      comm->barrier().wait();
      if (reporter.checkpoint_due(step)) {
        exec.exchange(host, &full_params, &full_m, &full_v, /*to_full=*/true);
        comm->barrier().wait();
        if (rank == 0) {
          spdlog::info("checkpoint saved: {}",
                       save_checkpoint(host, cfg, {&full_params, &full_m, &full_v}, {step + 1}));
        }
        comm->barrier().wait();
      }
      if (rank == 0) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        result.steps.push_back(reporter.report(step, loss, norm, seconds));
      }
    }
    peaks[rank] = exec.peak_bytes();
  });
  for (int r = 0; r < S; ++r) {
    spdlog::info("peak memory on cpu:{}: {}", r, format_bytes(peaks[r]));
    result.peak_device_bytes = std::max(result.peak_device_bytes, peaks[r]);
  }
  return result;
}

}  // namespace carousel
