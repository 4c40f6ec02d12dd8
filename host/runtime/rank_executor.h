// rank_executor.h — the interpreter of one rank's lowered program: what the rank does in a step.
//
// A step walks the rank's actions in order (host/schedule/ir.h): F and B / I / W run the
// forward and backward of a (virtual stage, microbatch) through models/stage.h, with the
// embedding before stage 0 and the fused head + loss after the last stage; runs of consecutive
// SEND/RECV actions are one p2p group on the stage ring, posted without waiting: the F or B that
// consumes a received tensor waits for its group then (so a receive posted early never delays
// the compute before its consumer; with NCCL the GPU's compute stream waits, not the host:
// Event::order_before), and a sent buffer lives until its group completes; AG_ISSUE,
// AG_WAIT, RELEASE and REDUCE_SCATTER move weights and gradients through the rank's ShardedParams;
// OPTIMIZER ends the step. Activations travel between actions in maps keyed by (stage, microbatch).
// OUTSIDE (layers after the pipeline, pipeline_parallel_layers) runs those layers, the head and
// their backward on the microbatches the stage axis gives this rank (executor_head.cpp);
// evaluate() is in executor_evaluate.cpp.
// An overlapped F&B pair (schedule::Action::overlap, dualpipev) runs as its two actions, back
// to back, or, when they exchange MoE rows with their expert ranks (A2A actions), taking turns
// at those exchanges so each one's all-to-all is in flight while the other computes
// (overlapped_pair.h): lowering has received both inputs before the pair, the halves share no
// tensor, so the numerics are those of the unpaired order. A second compute stream on GPUs
// would go there.
// Everything before OPTIMIZER may run from a captured graph (step_capture.h): the step's tokens
// and head losses live in buffers kept from step to step, so a replay reads and writes them.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "host/data/data.h"
#include "host/runtime/overlapped_pair.h"
#include "host/runtime/sharded_params.h"
#include "host/runtime/step_capture.h"
#include "host/reliability/flight_recorder.h"
#include "host/report/step_trace.h"
#include "host/schedule/ir.h"
#include "models/embed_head.h"
#include "models/model.h"

namespace carousel {

class RankExecutor {
 public:
  // Walks the program's action list of the rank's pipeline rank; notes each action in
  // `recorder` for failure reports. `data` (the training data, shared by the ranks of a
  // process: reading it is const) and `recorder` must outlive the executor.
  RankExecutor(const Config& cfg, const schedule::Program& program, const RankPlace& place,
               Backend& be, RankCommunicators& comms, ShardedParams& params, const DataLoader& data,
               FlightRecorder& recorder);

  // `update`: the optimizer updates applied before this step (ShardedParams::optimizer_step).
  // With `trace` (a profiled step) every action's timing is recorded into it.
  StepOutcome step(std::int64_t step, std::int64_t update, StepTrace* trace = nullptr);

  // The losses of batches 0 .. batches - 1 of `data` (global batch and microbatches as in
  // training) with the current weights, forward only: this rank's share of the sum of their
  // mean token losses (sum it over the ranks). No gradient, optimizer or weight change.
  double evaluate(const DataLoader& data, std::int64_t batches);

  std::int64_t graph_replays() const { return capture_.replays(); }

  // The auxiliary-loss-free balancing's biases (routed_bias; models/layer.h RouterBias): the
  // same on every rank, moved after each update by the step's global loads; checkpoints keep
  // them, a resume sets them (Checkpointer::restore; throws unless they have the model's shape).
  const RouterBias& router_bias() const { return router_bias_; }
  void set_router_bias(RouterBias bias);

 private:
  using Key = std::pair<int, int>;  // (virtual stage, microbatch)

  // The step's actions from `i` on (a replay starts at OPTIMIZER).
  StepOutcome walk(std::size_t i, StepCapture::Mode mode, std::int64_t update, StepTrace* trace);
  // Forgets the step's tensors in flight (after a failed capture, whose work never ran).
  void clear_step_state();
  // Posts actions i.. while p2p as one group (only the forward ones with forward_only); leaves i
  // past the group. Returns the group's completion (a completed Event when nothing was posted).
  Event post_p2p_group(std::size_t& i, bool forward_only = false);
  // The same for a step, noting the group in `trace` (when profiled).
  void post_traced_p2p_group(std::size_t& i, StepTrace* trace);
  // The compute action at i with expert exchanges (an A2A before it), alone or with its partner
  // when an overlapped pair takes turns (schedule::takes_turns; overlapped_pair.h), then the
  // p2p groups between the halves. Returns the index after what it ran.
  std::size_t compute_with_exchanges(std::size_t i, StepTrace* trace);
  // F, B or I with the layers' groups `parallel` (the expert group's waiter: its pair's turns).
  void compute(const schedule::Action& a, const LayerParallel& parallel);
  // Waits for the group that receives `action`'s input, if that input comes by a receive not yet
  // waited for (F: its activation, B and I: its gradient).
  // A wait is noted in the flight recorder; `index` is the action's place in the program.
  void await_input(const schedule::Action& action, std::size_t index);
  // Waits for every posted group and frees the sent buffers: at the step's end, so no transfer
  // outlives the step that posted it.
  void drain_p2p();
  // Frees the sent buffers of completed groups (of every posted group, waiting, with `wait`).
  void free_sent(bool wait);
  void weight_residency(const schedule::Action& a, StepTrace::Clock::time_point start,
                        StepTrace* trace);
  void forward(int stage, int microbatch, const LayerParallel& parallel);
  void backward(int stage, int microbatch, bool defer_weight_grads, const LayerParallel& parallel);
  // A stage's output to the next stage's input (here, or its SEND_F); an input gradient to the
  // stage before (here, or its SEND_B).
  void pass_on(int stage, int microbatch, const Tensor& y);
  void pass_back(int stage, int microbatch, const Tensor& dx);
  // The fused head + loss on the decoder's output y of `microbatch`: the losses kept for the
  // step's sum and d(loss)/dy returned, or evaluating, the loss sum only (an undefined tensor
  // returned). In executor_head.cpp.
  Tensor head(int microbatch, const Tensor& y);
  // OUTSIDE of `microbatch`: the layers after the pipeline (the extras' layers, every rank's
  // whole), the head, and their backward at once (remat none: nothing waits between them); the
  // input gradient to the last stage. Evaluating, the forward and the loss only.
  void outside(int microbatch, const LayerParallel& parallel);
  // The set's decoder layers, in order, with their router biases.
  static std::vector<LayerWeights> layers(const ParamSet& set, const RouterBias& bias);
  using TensorMap = std::map<Key, Tensor>;
  static Tensor take(TensorMap& map, const Key& key);  // removes and returns map[key]
  // This rank's part of every microbatch it reads, of step_ (or evaluation batch step_) from
  // source_, into the token buffers batch() returns.
  void upload_batches();
  const Microbatch& batch(int microbatch) const { return batches_.at(microbatch); }
  // The RoPE tables (and, with packing, document starts) of a microbatch's tokens.
  const RopeTables& rope_of(int microbatch) const {
    return cfg_.packing ? packed_rope_.at(microbatch) : rope_;
  }
  // [b_local, T / C, E] in the compute dtype (C context ranks; tensor parallel: my rows of it)
  Tensor activation() const;

  const Config& cfg_;
  schedule::Layout layout_;
  RankPlace place_;
  const std::vector<schedule::Action>& actions_;
  Backend& be_;
  RankCommunicators& comms_;
  ShardedParams& params_;
  FlightRecorder& recorder_;
  DType compute_;
  const DataLoader& data_;
  const DataLoader* source_;  // where batch() reads: the training data, or an evaluation's
  bool evaluating_ = false;   // in evaluate(): the head computes the loss only
  LayerParallel parallel_;    // the tensor and context groups computing this rank's layers with it
  RopeTables rope_;           // at the positions of this rank's tokens (context parallelism)
  std::vector<float> rope_cos_, rope_sin_;  // packing: rope_'s values on the host [T, D/2]
  RematPolicy remat_;
  std::int64_t microbatch_size_;  // sequences of a microbatch this rank computes (b / (F x D))
  double loss_scale_;             // 1 / (B x T): a token loss sum to the global mean
  RouterBias router_bias_;        // by layer; empty without routed_bias

  // Per step.
  std::int64_t step_ = 0;
  // Where a received tensor's consumer and an AG_WAIT wait (Event::order_before): the device's
  // queue (a CUDA stream waits for NCCL's event; host communicators wait on the host), or
  // nullptr for the host itself.
  void* device_queue_ = nullptr;
  double loss_sum_ = 0;  // this rank's head losses
  RouterStats router_;   // this rank's MoE routing in the step's forwards
  // The step's head losses in loss_buffers_, in the order they are summed (a replayed step's
  // are where its captured step put them).
  std::vector<DeviceLosses> losses_;
  // Kept from step to step (a captured step reads and writes these addresses).
  std::map<int, Microbatch> batches_;      // microbatch -> this rank's part of its tokens
  std::map<int, Tensor> loss_buffers_;     // microbatch -> its per-token losses
  std::vector<int> data_microbatches_;     // the microbatches whose tokens this rank reads
  std::map<int, RopeTables> packed_rope_;  // packing: microbatch -> its tokens' RoPE rows
  std::map<Key, StageSaved> saved_;        // forward state for the backward
  std::map<Key, std::vector<DeferredWeightGrad>> deferred_;  // I done, W pending
  std::map<Key, Tensor> in_f_, in_b_;                        // inputs of F and B
  std::map<Key, Tensor> out_f_, out_b_;                      // outputs waiting for their SEND
  std::map<Key, Event> recv_f_, recv_b_;  // receives into in_f_ / in_b_ not yet waited for
  struct PostedGroup {
    Event done;
    std::vector<Key> sent_f, sent_b;  // out_f_ / out_b_ entries that live until `done`
  };
  std::deque<PostedGroup> posted_;  // in posting order
  std::unique_ptr<PairThread> pair_thread_;  // runs a pair's second half (made at the first pair)
  StepCapture capture_;             // last: its graph uses the buffers above
};

}  // namespace carousel
