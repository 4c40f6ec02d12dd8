// op_timing.h — time by op kind: what a Backend's ops took while timing was on (the profiled
// steps, host/run/profiler.h), so a step's time can be split into GEMMs, attention, norms, ... and
// what is left between ops (launch gaps, host work, waits).
//
// A Backend times only its outermost op (an op staged through bf16 casts counts once, casts
// included); an OpStopwatch measures one op at a time. The CPU's stopwatch reads the host clock
// around each call (its work is done when the call returns); a GPU's records events on its
// stream (cuda/cuda_backend.cu), read when timing stops.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace carousel {

struct OpTime {
  std::int64_t calls = 0;
  double seconds = 0;
};
using OpTimes = std::map<std::string, OpTime>;  // by op name ("gemm", "attention_backward")

// Adds b into a.
void accumulate(OpTimes& a, const OpTimes& b);

// "gemm 61.2 % (480 calls), attention_backward 14.0 % (40), ... — ops 87.0 % of 2.31 s": the op
// kinds by time, largest first, as shares of `elapsed_seconds` (the wall time they ran in).
std::string describe_op_times(const OpTimes& times, double elapsed_seconds, int top = 8);

class OpStopwatch {
 public:
  virtual ~OpStopwatch() = default;
  virtual void begin(const char* op) = 0;  // op: a static name (op_name())
  virtual void end() = 0;
  virtual OpTimes collect() = 0;  // the times so far (waits for the device's work), then resets
};

std::unique_ptr<OpStopwatch> host_op_stopwatch();

}  // namespace carousel
