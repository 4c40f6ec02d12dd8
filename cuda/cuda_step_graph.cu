// cuda_step_graph.cu — CUDA graphs of captured steps (cuda_step_graph.h).
#include "cuda/cuda_step_graph.h"

#include "compute/error.h"

namespace carousel::gpu {

namespace {

// The region freed everything it allocated inside it (Backend::end_capture checks), so no graph
// allocation outlives a launch; AutoFreeOnLaunch is the safety net. The memory the graph keeps
// between launches is released when eager work follows (StepCapture, release_cached).
class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(int gpu, cudaStream_t stream, cudaGraph_t graph)
      : gpu_(gpu), stream_(stream), graph_(graph) {
    const cudaError_t rc =
        cudaGraphInstantiate(&exec_, graph_, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (rc != cudaSuccess) {
      cudaGraphDestroy(graph_);
      fail("instantiating the captured step's CUDA graph on GPU {} failed: {} ({}); "
           "step_graphs=off runs eagerly",
           gpu_, cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
  }
  ~CudaStepGraph() override {
    cudaSetDevice(gpu_);
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  void launch() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }

 private:
  int gpu_;
  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<StepGraph> make_step_graph(int gpu, cudaStream_t stream, cudaGraph_t graph) {
  return std::make_unique<CudaStepGraph>(gpu, stream, graph);
}

}  // namespace carousel::gpu
