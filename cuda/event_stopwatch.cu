// event_stopwatch.cu — time by op kind on the GPU (event_stopwatch.h). Every CUDA call is checked.
#include <vector>

#include "compute/error.h"
#include "cuda/event_stopwatch.h"

namespace carousel {

namespace {

// Time by op kind on the GPU: a pair of events around each op on the backend's stream, read when
// timing stops (one synchronisation for all of them). Events are reused across profiled steps.
class EventStopwatch final : public OpStopwatch {
 public:
  EventStopwatch(int gpu, cudaStream_t stream) : gpu_(gpu), stream_(stream) {}
  ~EventStopwatch() override {
    cudaSetDevice(gpu_);
    for (const Mark& m : marks_) spare_.insert(spare_.end(), {m.begin, m.end});
    for (cudaEvent_t e : spare_)
      if (e) cudaEventDestroy(e);
  }
  void begin(const char* op) override {
    marks_.push_back({op, take(), nullptr});
    CUDA_CHECK(cudaEventRecord(marks_.back().begin, stream_));
  }
  void end() override {
    marks_.back().end = take();
    CUDA_CHECK(cudaEventRecord(marks_.back().end, stream_));
  }
  OpTimes collect() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    OpTimes times;
    for (const Mark& m : marks_) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, m.begin, m.end));
      OpTime& t = times[m.op];
      ++t.calls;
      t.seconds += double(ms) / 1e3;
      spare_.insert(spare_.end(), {m.begin, m.end});
    }
    marks_.clear();
    return times;
  }

 private:
  struct Mark {
    const char* op;
    cudaEvent_t begin, end;
  };
  cudaEvent_t take() {
    if (!spare_.empty()) {
      cudaEvent_t e = spare_.back();
      spare_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  int gpu_;
  cudaStream_t stream_;
  std::vector<Mark> marks_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace

std::unique_ptr<OpStopwatch> make_event_stopwatch(int gpu, cudaStream_t stream) {
  return std::make_unique<EventStopwatch>(gpu, stream);
}

}  // namespace carousel
