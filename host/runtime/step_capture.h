// step_capture.h — which of a rank's steps run from a captured graph (the step_graphs key).
//
// Between the token upload and the OPTIMIZER action a step does the same work on the same
// buffers every time: every forward and backward of the rank's program. That region is captured
// once into a graph (compute/recording/step_graph.h; a CUDA graph on GPUs: one launch instead of a
// few thousand) and replayed. Per step:
//   Eager    the first step (it builds the cuBLASLt plans and cuDNN graphs and allocates the
//            persistent token and loss buffers), profiled steps (they time every action), and
//            every step when graphs are off or blocked;
//   Capture  the first step after an eager one: walked once while recording, then launched;
//   Replay   every later step: one launch, no action walked.
// The optimizer, its norm and its skip decision stay outside: they read values on the host.
// A capture that fails (an op the device cannot record) is ended, said once, and the step runs
// again eagerly, as every later one does: nothing of it ran while it was recorded. Between a
// graph's launches and eager work (profiled steps, evaluation) the device's cached memory is
// released, so the two never each hold a step's working set.
//
// Blocked (and said once by rank 0, the run going on eagerly): the backend cannot capture
// (Backend::graph_blocker), or the rank's forward and backward communicate — pipeline sends and
// receives, FSDP gathers and reduce-scatters, tensor or context collectives — since NCCL inside a
// captured step is not built yet. Data parallelism and ZeRO-1 communicate in the optimizer only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compute/backend.h"
#include "host/mesh/mesh.h"
#include "host/schedule/ir.h"

namespace carousel {

// Why the forward and backward of `place`'s stage rank cannot be captured ("" when they can).
// `host_routing`: the model's mixture-of-experts layers route tokens on the host;
// `host_scales`: its float8 GEMMs read their operands' amax on the host (quantization=fp8).
std::string capture_blocker(const schedule::Program& program, const RankPlace& place,
                            bool host_routing = false, bool host_scales = false);

class StepCapture {
 public:
  enum class Mode { Eager, Capture, Replay };

  // `setting`: the step_graphs key — on, off, or auto (on for GPUs, off for the CPU, where a
  // graph only emulates one: the oracle of the GPU's, holding every buffer of the step at once).
  StepCapture(const std::string& setting, const schedule::Program& program, const RankPlace& place,
              Backend& be, bool host_routing, bool host_scales = false);

  Mode mode(bool profiled) const;
  // Starts the step's work in `mode`: a capture begins, or a replay launches the graph.
  void begin(Mode mode);
  // Ends it before the optimizer: a capture's graph is launched (its work has not run yet).
  void end(Mode mode);
  // Before eager work that is not a step (evaluation).
  void before_eager_work() { switch_to(false); }
  // Whether a capture is under way (begun, its graph not yet launched).
  bool capturing() const { return capturing_; }
  // A failure while capturing: ends the capture, says why, and turns graphs off for the run.
  void failed(std::int64_t step, const std::exception& e);
  std::int64_t replays() const { return replays_; }  // steps launched from the graph

 private:
  void switch_to(bool graph);  // releases cached device memory when the kind of work changes

  Backend& be_;
  int rank_;
  bool enabled_ = false;
  bool warmed_ = false;  // a step has run eagerly
  bool capturing_ = false;
  bool graph_last_ = false;  // the device's last work was a graph launch
  std::unique_ptr<StepGraph> graph_;
  std::int64_t replays_ = 0;
};

}  // namespace carousel
