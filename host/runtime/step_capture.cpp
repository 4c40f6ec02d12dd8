// step_capture.cpp — the step_graphs decision and the captured graph's life (step_capture.h).
#include "host/runtime/step_capture.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <vector>

namespace carousel {

namespace sch = schedule;

std::string capture_blocker(const sch::Program& program, const RankPlace& place, bool host_routing,
                            bool host_scales) {
  if (host_routing) {
    return "the mixture-of-experts layers route tokens on the host (each expert's token count "
           "sizes its GEMMs), which a captured step cannot do";
  }
  if (host_scales) {
    return "quantization=fp8 reads each GEMM operand's amax on the host to make its scale "
           "(device-side scales are not built yet), which a captured step cannot do";
  }
  bool p2p = false, fsdp = false;
  for (const sch::Action& a : program.ranks.at(place.stage_rank)) {
    if (a.kind == sch::Kind::OPTIMIZER) break;
    p2p = p2p || a.is_p2p();
    fsdp = fsdp || a.kind == sch::Kind::AG_ISSUE || a.kind == sch::Kind::REDUCE_SCATTER;
  }
  std::vector<std::string> what;
  if (p2p) what.emplace_back("pipeline sends and receives");
  if (fsdp) what.emplace_back("FSDP weight gathers and gradient reduce-scatters");
  if (place.mesh.tensor > 1) what.emplace_back("tensor-parallel collectives in every layer");
  if (place.mesh.context > 1) what.emplace_back("context-parallel key/value exchanges");
  if (what.empty()) return "";
  return fmt::format(
      "stage rank {}'s forward and backward communicate ({}), and NCCL inside a captured step "
      "is not built yet",
      place.stage_rank, fmt::join(what, ", "));
}

StepCapture::StepCapture(const std::string& setting, const sch::Program& program,
                         const RankPlace& place, Backend& be, bool host_routing, bool host_scales)
    : be_(be), rank_(place.rank()) {
  const bool wanted = setting == "on" || (setting == "auto" && be.kind() == DeviceKind::CUDA);
  if (!wanted) return;
  std::string blocker = be.graph_blocker();
  if (blocker.empty()) blocker = capture_blocker(program, place, host_routing, host_scales);
  enabled_ = blocker.empty();
  if (place.rank() != 0) return;  // one line for the run (ranks block alike, or for one reason)
  if (enabled_) {
    spdlog::info(
        "step graphs: each rank's forward and backward are captured at its second step "
        "and replayed from then on (profiled steps run eagerly)");
  } else {
    spdlog::info("step graphs: off, every step runs eagerly: {}", blocker);
  }
}

StepCapture::Mode StepCapture::mode(bool profiled) const {
  if (!enabled_ || profiled) return Mode::Eager;
  if (graph_) return Mode::Replay;
  return warmed_ ? Mode::Capture : Mode::Eager;
}

void StepCapture::switch_to(bool graph) {
  // To the graph: the pool's cached eager memory goes; to eager work: the graph's goes.
  if (graph_ && graph != graph_last_) be_.allocator().release_cached(graph, !graph);
  graph_last_ = graph;
}

void StepCapture::begin(Mode mode) {
  switch_to(mode == Mode::Replay);
  if (mode == Mode::Capture) {
    capturing_ = true;
    be_.begin_capture();
  }
  if (mode == Mode::Replay) {
    graph_->launch();
    ++replays_;
  }
}

void StepCapture::end(Mode mode) {
  if (mode == Mode::Eager) warmed_ = true;
  if (mode != Mode::Capture) return;
  graph_ = be_.end_capture();
  be_.allocator().release_cached(true, false);  // the eager steps' pool: the graph has its own
  graph_->launch();                             // the captured step's own work
  graph_last_ = true;
  capturing_ = false;
}

void StepCapture::failed(std::int64_t step, const std::exception& e) {
  be_.abort_capture();
  capturing_ = false;
  enabled_ = false;
  graph_.reset();
  spdlog::warn(
      "step graphs: capturing step {} on rank {} failed, so it and every later step "
      "run eagerly: {}",
      step, rank_, e.what());
}

}  // namespace carousel
