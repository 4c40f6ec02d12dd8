// rank_executor.cpp — walks one rank's actions for a step.
#include "host/runtime/rank_executor.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "host/reliability/fault_injection.h"
#include "models/packing.h"

namespace carousel {

namespace sch = schedule;

// The set's decoder layers in order (its specs are grouped by layer; the embedding, final norm
// and head of the extras are none), with their router biases.
std::vector<LayerWeights> RankExecutor::layers(const ParamSet& set, const RouterBias& bias) {
  std::vector<LayerWeights> out;
  int last = -1;
  for (const auto& spec : set.specs) {
    if (spec.layer < 0 || spec.layer == last) continue;
    out.push_back(LayerWeights::from(set, last = spec.layer));
    if (std::size_t(last) < bias.size()) out.back().router_bias = bias[std::size_t(last)];
  }
  return out;
}

Tensor RankExecutor::take(TensorMap& map, const Key& key) {
  auto it = map.find(key);
  // Lowering pairs every consumer with its producer and replay() proved the order, so a missing
  // tensor is carousel's bug, not the config's.
  CAROUSEL_ASSERT(it != map.end(), "pipeline executor: no tensor for stage {} microbatch {}",
                  key.first, key.second);
  Tensor t = it->second;
  map.erase(it);
  return t;
}

RankExecutor::RankExecutor(const Config& cfg, const sch::Program& program, const RankPlace& place,
                           Backend& be, RankCommunicators& comms, ShardedParams& params,
                           const DataLoader& data, FlightRecorder& recorder)
    : cfg_(cfg),
      layout_(program.layout),
      place_(place),
      actions_(program.ranks.at(place.stage_rank)),
      be_(be),
      comms_(comms),
      params_(params),
      recorder_(recorder),
      compute_(cfg.dtype == "bfloat16" ? DType::BF16 : DType::F32),
      data_(data),
      source_(&data),
      parallel_{TensorGroup{comms.tensor.get()}, ContextGroup{comms.context.get()},
                ExpertGroup{comms.expert.get()}},
      rope_(context_rope(be,
                         make_rope_tables(be, cfg.model.max_target_length, cfg.model.head_dim(),
                                          cfg.model.rope_max_timescale),
                         parallel_.context)),
      remat_(parse_remat_policy(cfg.remat_policy)),
      microbatch_size_(cfg.global_batch() / program.layout.microbatches /
                       (place.mesh.fsdp * place.mesh.data)),
      loss_scale_(1.0 / double(cfg.global_batch() * cfg.model.max_target_length)),
      router_bias_(initial_router_bias(cfg.model)),
      capture_(cfg.step_graphs, program, place, be, cfg.model.is_moe(), cfg.model.float8()) {
  // The microbatches whose tokens this rank reads: at the first stage and where the head runs
  // (the last stage, or the OUTSIDE actions), and with packing at every stage (attention and
  // RoPE follow the tokens' documents).
  std::set<int> with_data;
  for (const sch::Action& a : actions_) {
    const bool head =
        a.kind == sch::Kind::OUTSIDE || (a.stage == layout_.stages() - 1 && !layout_.outside);
    if (a.is_compute() && (cfg.packing || a.stage == 0 || head)) with_data.insert(a.index);
  }
  data_microbatches_.assign(with_data.begin(), with_data.end());
  if (cfg.packing) {  // the whole sequence's tables (rope_ holds this rank's positions' rows)
    const RopeTables whole = make_rope_tables(be, cfg.model.max_target_length, cfg.model.head_dim(),
                                              cfg.model.rope_max_timescale);
    rope_cos_ = be.to_host<float>(whole.cos);
    rope_sin_ = be.to_host<float>(whole.sin);
  }
}

StepOutcome RankExecutor::step(std::int64_t step, std::int64_t update, StepTrace* trace) {
  using Clock = StepTrace::Clock;
  const StepCapture::Mode mode = capture_.mode(trace != nullptr);
  const bool replay = mode == StepCapture::Mode::Replay;
  step_ = step;
  loss_sum_ = 0;
  router_ = RouterStats{};
  if (!replay) losses_.clear();  // a replay writes where the captured step's losses went
  source_ = &data_;
  // A profiled step waits on the host, so that its trace tells waiting apart from compute.
  device_queue_ = trace ? nullptr : be_.allocator().work_queue();
  if (trace) {
    trace->begin_step(step, Clock::now());
    be_.start_op_timing();
  }
  // Every microbatch's tokens now, while the device is idle: an upload waits for the device's
  // queue, and one inside the step would stall it at each first or last stage's microbatch.
  upload_batches();
  params_.begin_step();
  std::size_t i = 0;  // a replay launched every action before OPTIMIZER
  while (replay && actions_[i].kind != sch::Kind::OPTIMIZER) ++i;
  if (replay) recorder_.note(step, "launched the captured forward and backward (a CUDA graph)");
  try {
    capture_.begin(mode);
    if (replay) recorder_.complete();  // the launch, in the completed history
    return walk(i, mode, update, trace);
  } catch (const std::exception& e) {
    if (!capture_.capturing()) throw;
    clear_step_state();        // its buffers go while the capture can still book them
    capture_.failed(step, e);  // nothing of the step ran while it was recorded
    return this->step(step, update, trace);
  }
}

void RankExecutor::clear_step_state() {
  saved_.clear();
  deferred_.clear();
  in_f_.clear();
  in_b_.clear();
  out_f_.clear();
  out_b_.clear();
  recv_f_.clear();
  recv_b_.clear();
  posted_.clear();
  losses_.clear();
}

StepOutcome RankExecutor::walk(std::size_t i, StepCapture::Mode mode, std::int64_t update,
                               StepTrace* trace) {
  using Clock = StepTrace::Clock;
  const std::int64_t step = step_;
  for (; i < actions_.size();) {
    const sch::Action& a = actions_[i];
    recorder_.start(step, std::int64_t(i), a);
    maybe_stall(place_.rank(), step, std::int64_t(i));  // a test's fault
    if (a.is_compute()) await_input(a, i);  // before the clock: a wait is idle time, not compute
    const auto start = Clock::now();
    if (a.is_p2p()) {
      post_traced_p2p_group(i, trace);
      recorder_.complete();
      continue;
    }
    if (a.is_compute() && (sch::takes_turns(actions_, i) || sch::exchanges_at(actions_, i))) {
      i = compute_with_exchanges(i, trace);
      recorder_.complete();
      continue;
    }
    switch (a.kind) {
      case sch::Kind::F:
      case sch::Kind::B:
      case sch::Kind::I:
      case sch::Kind::OUTSIDE:
        compute(a, parallel_);
        break;
      case sch::Kind::A2A_F:  // a marker: the compute action after it runs the exchanges
      case sch::Kind::A2A_B:
        break;
      case sch::Kind::W: {
        const Key key{a.stage, a.index};
        apply_weight_grads(be_, deferred_.at(key));
        deferred_.erase(key);
        break;
      }
      case sch::Kind::AG_ISSUE:
      case sch::Kind::AG_WAIT:
      case sch::Kind::RELEASE:
        weight_residency(a, start, trace);
        break;
      case sch::Kind::REDUCE_SCATTER: {  // the stage's gradients are complete on this rank
        const Event reduced = params_.reduce_scatter(a.stage);
        if (trace) trace->collective(a, start, reduced, params_.fsdp_bytes(a.stage, a.kind));
        break;
      }
      case sch::Kind::OPTIMIZER: {
        capture_.end(mode);
        drain_p2p();
        for (const DeviceLosses& l : losses_) loss_sum_ += l.sum(be_);  // microbatch order
        // Every rank sends the same number of loads: dense stages zeros.
        std::vector<std::int64_t> load(
            std::size_t(cfg_.model.is_moe() ? cfg_.model.num_layers * cfg_.model.num_experts : 0));
        for (std::size_t l = 0; l < router_.load.size(); ++l) load[l] = router_.load[l];
        const StepOutcome outcome = params_.optimizer_step(
            step, update, loss_sum_ * loss_scale_, router_.aux_loss_sum * loss_scale_, load);
        if (!outcome.skipped) update_router_bias(cfg_.model, router_bias_, outcome.expert_load);
        if (trace) {
          trace->add_op_times(be_.stop_op_timing());  // waits for the device's work
          const auto end = Clock::now();
          trace->compute(a, start, end);
          trace->end_step(end);
        }
        recorder_.complete();
        return outcome;
      }
      default:
        CAROUSEL_ASSERT(false, "pipeline executor: unexpected action {}", sch::to_string(a));
    }
    if (trace && (a.is_compute() || a.kind == sch::Kind::AG_WAIT)) {
      be_.synchronize();  // device time, not launch time, on GPUs
      trace->compute(a, start, Clock::now());
    }
    recorder_.complete();
    ++i;
  }
  CAROUSEL_ASSERT(false, "pipeline executor: stage rank {}'s program has no OPTIMIZER action",
                  place_.stage_rank);
}

void RankExecutor::post_traced_p2p_group(std::size_t& i, StepTrace* trace) {
  const std::size_t first = i;
  const auto start = StepTrace::Clock::now();
  const Event done = post_p2p_group(i);  // the group's first action stands for it
  if (!trace) return;
  // Every send and receive moves one activation: [b_local, T / C, E] of the compute dtype
  // (with tensor parallelism this rank's rows of it).
  const std::int64_t activation_bytes =
      microbatch_size_ * cfg_.model.max_target_length / parallel_.context.size() *
      cfg_.model.emb_dim / parallel_.tensor.size() * std::int64_t(dtype_size(compute_));
  trace->p2p_group(
      {actions_.begin() + std::ptrdiff_t(first), actions_.begin() + std::ptrdiff_t(i)}, start,
      done, std::int64_t(i - first) * activation_bytes);
}

std::size_t RankExecutor::compute_with_exchanges(std::size_t i, StepTrace* trace) {
  std::vector<std::size_t> run = {i};
  if (sch::takes_turns(actions_, i)) {
    const std::size_t j = sch::overlap_partner(actions_, i);
    await_input(actions_[j], j);  // lowering posted its receive before the pair
    run.push_back(j);
    recorder_.note(step_, fmt::format("{} taking turns with {}",  // a failure report names both
                                      sch::to_string(actions_[i]), sch::to_string(actions_[j])));
  }
  std::vector<TurnHalf> halves;
  for (const std::size_t k : run) {
    halves.push_back({actions_[k], [this, &a = actions_[k]](ExchangeWaiter& waiter) {
                        LayerParallel parallel = parallel_;
                        parallel.expert.waiter = &waiter;
                        compute(a, parallel);
                      }});
  }
  if (run.size() == 2 && !pair_thread_) pair_thread_ = std::make_unique<PairThread>();
  take_turns(halves, trace, [this] { be_.synchronize(); }, pair_thread_.get());
  if (run.size() == 1) return i + 1;
  for (std::size_t k = i + 1; k < run[1];) {  // between the halves: p2p groups and the B's A2A
    if (actions_[k].is_p2p()) post_traced_p2p_group(k, trace);
    else ++k;
  }
  return run[1] + 1;
}

void RankExecutor::compute(const sch::Action& a, const LayerParallel& parallel) {
  CAROUSEL_ASSERT(a.kind == sch::Kind::F || a.kind == sch::Kind::B || a.kind == sch::Kind::I ||
                      a.kind == sch::Kind::OUTSIDE,
                  "{} is not a forward or backward", sch::to_string(a));
  // An I computes the input gradient now, the weight gradients at its W.
  if (a.kind == sch::Kind::F) {
    forward(a.stage, a.index, parallel);
  } else if (a.kind == sch::Kind::OUTSIDE) {
    outside(a.index, parallel);
  } else {
    backward(a.stage, a.index, /*defer_weight_grads=*/a.kind == sch::Kind::I, parallel);
  }
}

Event RankExecutor::post_p2p_group(std::size_t& i, bool forward_only) {
  bool started = false;
  PostedGroup group;
  std::vector<std::pair<std::map<Key, Event>*, Key>> receives;
  for (; i < actions_.size() && actions_[i].is_p2p(); ++i) {
    const sch::Action& p = actions_[i];
    const bool forward = p.kind == sch::Kind::SEND_F || p.kind == sch::Kind::RECV_F;
    if (forward_only && !forward) continue;
    if (!started) comms_.pipe->group_start();
    started = true;
    const Key key{p.stage, p.index};
    switch (p.kind) {
      case sch::Kind::SEND_F:
        comms_.pipe->send(out_f_.at(key), p.peer);
        group.sent_f.push_back(key);
        break;
      case sch::Kind::SEND_B:
        comms_.pipe->send(out_b_.at(key), p.peer);
        group.sent_b.push_back(key);
        break;
      case sch::Kind::RECV_F:
        comms_.pipe->recv(in_f_[key] = activation(), p.peer);
        receives.emplace_back(&recv_f_, key);
        break;
      case sch::Kind::RECV_B:
        comms_.pipe->recv(in_b_[key] = activation(), p.peer);
        receives.emplace_back(&recv_b_, key);
        break;
      default:
        CAROUSEL_ASSERT(false, "pipeline executor: {} is not a p2p action", sch::to_string(p));
    }
  }
  if (!started) {
    Event none;
    none.complete();
    return none;
  }
  group.done = comms_.pipe->group_end();
  for (const auto& [pending, key] : receives) (*pending)[key] = group.done;
  const Event done = group.done;
  posted_.push_back(std::move(group));
  free_sent(/*wait=*/false);
  return done;
}

// Groups complete in the order they were posted (one worker per communicator), so the sent
// buffers go front first: those of completed groups, or of all of them with `wait`.
void RankExecutor::free_sent(bool wait) {
  while (!posted_.empty() && (wait || posted_.front().done.ready())) {
    const PostedGroup& group = posted_.front();
    group.done.wait();
    for (const auto& key : group.sent_f) out_f_.erase(key);  // sent: the buffers may go
    for (const auto& key : group.sent_b) out_b_.erase(key);
    posted_.pop_front();
  }
}

void RankExecutor::await_input(const sch::Action& action, std::size_t index) {
  // F and OUTSIDE take an activation, B and I a gradient.
  const bool forward = action.kind == sch::Kind::F || action.kind == sch::Kind::OUTSIDE;
  std::map<Key, Event>& pending = forward ? recv_f_ : recv_b_;
  if (action.kind == sch::Kind::W) return;  // W's input is this rank's own I
  const auto it = pending.find({action.stage, action.index});
  if (it == pending.end()) return;
  // A failure report then shows what this rank waits for (evaluation notes itself as a whole).
  const bool noted = !it->second.ready() && !evaluating_;
  if (noted) {
    recorder_.note(step_,
                   fmt::format("{} waiting for its input ({}RECV_{}{})", sch::to_string(action),
                               action.stage, forward ? 'F' : 'B', action.index));
  }
  it->second.order_before(device_queue_);  // the group's own wait() at step end reports errors
  if (noted) recorder_.start(step_, std::int64_t(index), action);
  pending.erase(it);
  free_sent(/*wait=*/false);
}

void RankExecutor::drain_p2p() {
  free_sent(/*wait=*/true);
  recv_f_.clear();  // every receive of the step was consumed (and so waited for) by now
  recv_b_.clear();
}

// AG_ISSUE gathers the stage's weights into slot `index`, AG_WAIT makes them the stage's,
// RELEASE frees the slot: the same in a step and in an evaluation.
void RankExecutor::weight_residency(const sch::Action& a, StepTrace::Clock::time_point start,
                                    StepTrace* trace) {
  switch (a.kind) {
    case sch::Kind::AG_ISSUE: {
      const Event gathered = params_.issue_gather(a.stage, a.index);
      if (trace) trace->collective(a, start, gathered, params_.fsdp_bytes(a.stage, a.kind));
      break;
    }
    case sch::Kind::AG_WAIT:
      params_.wait_gather(a.stage, a.index, device_queue_);
      break;
    case sch::Kind::RELEASE:
      params_.release(a.stage);
      break;
    default:
      CAROUSEL_ASSERT(false, "pipeline executor: {} is not a weight-residency action",
                      sch::to_string(a));
  }
}

void RankExecutor::set_router_bias(RouterBias bias) {
  check_router_bias(cfg_.model, bias, "the checkpoint's training state");
  router_bias_ = std::move(bias);
}

void RankExecutor::forward(int stage, int microbatch, const LayerParallel& parallel) {
  const Key key{stage, microbatch};
  // With tensor parallelism every activation here is this rank's rows; the embedding and the head
  // hold this rank's part of the vocabulary (models/embed_head.h).
  const Tensor x = stage == 0 ? embed_forward(be_, params_.extras_weights(),
                                              batch(microbatch).inputs, parallel_.tensor)
                              : take(in_f_, key);
  const Tensor y = stage_forward(be_, cfg_.model, layers(params_.weights(stage), router_bias_),
                                 rope_of(microbatch), x, remat_, saved_[key], parallel);
  // Every tensor rank routes the same tokens alike: the step's balancing loss and loads once.
  if (!evaluating_ && parallel.tensor.rank() == 0) router_.merge(saved_[key].router);
  if (stage == layout_.stages() - 1 && !layout_.outside) {
    const Tensor dy = head(microbatch, y);
    if (!evaluating_) in_b_[key] = dy;
  } else {
    pass_on(stage, microbatch, y);
  }
}

void RankExecutor::pass_on(int stage, int microbatch, const Tensor& y) {
  if (layout_.rank_of(stage + 1, microbatch) == place_.stage_rank) {
    in_f_[{stage + 1, microbatch}] = y;  // the next stage is local: no send
  } else {
    out_f_[{stage, microbatch}] = y;
  }
}

void RankExecutor::pass_back(int stage, int microbatch, const Tensor& dx) {
  if (layout_.rank_of(stage - 1) == place_.stage_rank) {
    in_b_[{stage - 1, microbatch}] = dx;
  } else {
    out_b_[{stage, microbatch}] = dx;
  }
}

void RankExecutor::backward(int stage, int microbatch, bool defer_weight_grads,
                            const LayerParallel& parallel) {
  const Key key{stage, microbatch};
  std::vector<DeferredWeightGrad>* defer = defer_weight_grads ? &deferred_[key] : nullptr;
  const Tensor dx = stage_backward(be_, cfg_.model, layers(params_.weights(stage), router_bias_),
                                   layers(params_.gradients(stage), {}), rope_of(microbatch),
                                   saved_.at(key), take(in_b_, key), loss_scale_, defer, parallel);
  saved_.erase(key);
  if (stage == 0) {
    embed_backward(be_, params_.extras_grads(), batch(microbatch).inputs, dx, parallel_.tensor);
  } else {
    pass_back(stage, microbatch, dx);
  }
}

// This rank's share of microbatch m of step_ (or evaluation batch step_): sequences [m * b + part *
// b_local, ... + b_local) of the step's global batch, into the token buffers kept from step to
// step.
void RankExecutor::upload_batches() {
  const std::int64_t global = cfg_.global_batch(), T = cfg_.model.max_target_length;
  const std::int64_t b = global / layout_.microbatches;
  const ContextGroup& context = parallel_.context;
  for (int m : data_microbatches_) {
    TokenBatch tokens = source_->batch(
        step_, global, m * b + place_.batch_part() * microbatch_size_, microbatch_size_);
    Microbatch& kept = batches_[m];
    if (!kept.inputs.defined()) {
      const Shape shape = {microbatch_size_, T / context.size()};  // this rank's chunks (context)
      kept = {be_.empty(shape, DType::I32), be_.empty(shape, DType::I32)};
    }
    const auto upload = [&](std::vector<std::int32_t> sequence, const Tensor& to) {
      const std::vector<std::int32_t> mine =
          context.my_tokens(std::move(sequence), microbatch_size_, T);
      CAROUSEL_ASSERT(std::int64_t(mine.size()) == to.numel(), "{} tokens for a buffer of {}",
                      mine.size(), to.numel());
      be_.upload(mine.data(), to);
    };
    if (cfg_.packing) {  // document starts over whole sequences, then this rank's tokens' rows
      upload_packed_rope(be_, rope_cos_, rope_sin_, cfg_.model.head_dim() / 2,
                         document_starts(tokens.inputs, T, cfg_.eos_id), T, packed_rope_[m],
                         context.size() > 1 ? context.positions(T) : std::vector<std::int64_t>{});
    }
    upload(std::move(tokens.inputs), kept.inputs);
    upload(std::move(tokens.targets), kept.targets);
  }
}

Tensor RankExecutor::activation() const {
  const std::int64_t T = cfg_.model.max_target_length / parallel_.context.size();
  const std::int64_t E = cfg_.model.emb_dim;
  if (parallel_.tensor.size() == 1) return be_.empty({microbatch_size_, T, E}, compute_);
  return be_.empty({microbatch_size_ * T / parallel_.tensor.size(), E}, compute_);
}

}  // namespace carousel
