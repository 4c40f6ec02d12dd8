// cudnn_attention.cpp — cuDNN fused attention through the frontend's graph API (see
// cudnn_attention.h). Why the frontend: it is NVIDIA's supported way to reach the SDPA engines
// (the backend descriptor API would be hundreds of lines of attribute plumbing); it is
// header-only and comes from PyPI (nvidia-cudnn-frontend, installed by scripts/setup.sh). Read
// against frontend 1.32 and cuDNN 9.19's headers.
//
// Layout: carousel's [B, T, H, D] tensors are described to cuDNN as [b, h, s, d] by strides, the
// statistics [B, H, T] float32 as [b, h, s, 1]; no copies. Each graph: bfloat16 in and out,
// float32 inside; causal (top-left, or bottom-right for a context-parallel chunk whose keys are
// longer than its queries); scale 1/sqrt(D); the backward's deterministic algorithm (the fast
// tier's promise: the same bits every run; on Hopper the frontend serves it with the dP-workspace
// backward, whose workspace — b·h·⌈s_q⌉₆₄·⌈s_kv⌉₆₄·2 bytes — each build logs).
//
// Sharing: one GpuGraphs per GPU for the whole process — one cuDNN handle, the graph memo, one
// mutex — used by every backend and logical device on that GPU, so a shape's graph (a run-time
// compile of up to seconds) is built once per process, not once per backend. Why one handle per
// GPU, its stream set per call under the mutex, rather than executing a shared graph with each
// caller's own handle: in frontend 1.32 a plan is finalized from an engine config of an
// operation graph that carries the build's handle (CUDNN_ATTR_OPERATIONGRAPH_HANDLE; the plan
// itself gets none), and nothing in cuDNN's or the frontend's documentation says such a plan may
// run on, or outlive, another handle (only the plans of deviceless AOT compilation, made from
// device properties, are documented to run on any handle of a matching device). The cost
// is a cudnnSetStream per call (host only, microseconds) and host-side serialisation of the
// launches of logical devices sharing a GPU.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "cuda/fast/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "compute/error.h"
#include "cuda/plans/attention_plan.h"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads libcudnn through this
}

namespace carousel::gpu {

namespace {

namespace fe = cudnn_frontend;

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::vector<std::int64_t> vec(const std::array<std::int64_t, 4>& a) { return {a.begin(), a.end()}; }

std::string status_text(cudnnStatus_t status) {
  const char* text = fe::detail::get_error_string(status);
  return fmt::format("{} ({})", text ? text : "no text", int(status));
}

// A built graph: the frontend's graph with its chosen plan, and what each execute needs.
struct CudnnGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace_bytes = 0;
  std::string plan;  // the engine cuDNN chose, for the build's log line
};

// What one GPU shares between its backends. Made on first open() for that GPU and never
// destroyed (the registry below is leaked): a cached graph must outlive every backend, and
// destroying cuDNN handles and plans from static destructors, after the CUDA runtime may have
// been torn down, is a known way to crash at exit.
struct GpuGraphs {
  std::mutex mutex;  // guards all below, and every set_stream + execute on `handle`
  cudnnHandle_t handle = nullptr;
  AttentionGraphMemo<CudnnGraph> memo;
  bool misaligned_said = false;
};

PerGpu<GpuGraphs>& registry() {
  static PerGpu<GpuGraphs>& graphs = *new PerGpu<GpuGraphs>;  // leaked on purpose: see GpuGraphs
  return graphs;
}

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

class Attention final : public CudnnAttention {
 public:
  Attention(Backend& be, int gpu, cudaStream_t stream, GpuGraphs& shared, std::size_t version)
      : be_(be), gpu_(gpu), stream_(stream), shared_(shared), version_(version) {}

  bool forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse) override {
    const AttentionKey key = key_of(q, k, false);
    if (!aligned(key,
                 sdpa_aligned({address(q), address(k), address(v), address(out), address(lse)})))
      return false;
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kStats, lse.raw()}};
    return run(key, pack);
  }
  bool backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) override {
    const AttentionKey key = key_of(q, k, true);
    if (!aligned(key, sdpa_aligned({address(q), address(k), address(v), address(out), address(lse),
                                    address(dout), address(dq), address(dk), address(dv)})))
      return false;
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, q.raw()},     {kK, k.raw()},   {kV, v.raw()},   {kO, out.raw()}, {kStats, lse.raw()},
        {kDO, dout.raw()}, {kDQ, dq.raw()}, {kDK, dk.raw()}, {kDV, dv.raw()}};
    return run(key, pack);
  }
  std::string version() const override {
    return fmt::format("cuDNN {}.{}.{}", version_ / 10000, version_ % 10000 / 100, version_ % 100);
  }

 private:
  static AttentionKey key_of(const Tensor& q, const Tensor& k, bool backward) {
    AttentionKey key{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), q.dtype(), backward};
    if (k.dim(1) != q.dim(1)) key.kv_seq = k.dim(1);
    return key;
  }

  static std::uintptr_t address(const Tensor& t) {
    return reinterpret_cast<std::uintptr_t>(t.raw());
  }
  // A view at an odd offset cannot go to cuDNN (the frontend would refuse it at execute): the
  // reference kernel runs that call. Said once per GPU: it is a property of the model's views.
  bool aligned(const AttentionKey& key, bool ok) {
    if (ok) return true;
    std::lock_guard<std::mutex> lock(shared_.mutex);
    if (!shared_.misaligned_said) {
      shared_.misaligned_said = true;
      spdlog::warn(
          "attention {} on GPU {}: an operand is not {}-byte aligned (a view at an odd offset), "
          "which cuDNN's fused attention requires; such calls run the reference attention (slow)",
          describe(key), gpu_, kSdpaAlignment);
    }
    return false;
  }

  bool run(const AttentionKey& key, std::unordered_map<std::int64_t, void*>& pack) {
    CUDA_CHECK(cudaSetDevice(gpu_));  // the frontend's cudart and cuDNN read the current device
    std::lock_guard<std::mutex> lock(shared_.mutex);
    const CudnnGraph* g = graph(key);
    if (!g) return false;
    // Execute failures stay errors. The graph was validated, support-checked and built for this
    // very shape, so a failure here is a runtime fault — a failed launch, a sticky CUDA error, a
    // capture that forbids the call — which leaves the stream's work in an unknown state: running
    // the reference on top would hide it, and inside a CUDA-graph capture it would record a
    // different step than the eager one.
    // From the calling backend's pool, on its stream: ordered with this call's work, and
    // capturable.
    Tensor workspace = be_.empty({std::max<std::int64_t>(g->workspace_bytes, 1)}, DType::U8);
    const cudnnStatus_t bound = fe::detail::set_stream(shared_.handle, stream_);
    CAROUSEL_CHECK(bound == CUDNN_STATUS_SUCCESS,
                   "cuDNN attention {} on GPU {}: cudnnSetStream: {}", describe(key), gpu_,
                   status_text(bound));
    fe::error_t done = g->graph->execute(shared_.handle, pack, workspace.raw());
    CAROUSEL_CHECK(done.is_good(), "cuDNN attention {} on GPU {}: execute failed: {}",
                   describe(key), gpu_, done.get_message());
    return true;
  }

  // The shape's graph, built on first asking (said with its wall time), or null when cuDNN
  // refused it (said once, with cuDNN's words). Called with shared_.mutex held. A refusal is
  // remembered for the process: a passing cause (out of memory while building plans) also sends
  // that shape to the reference kernel for the rest of the run — said in the log, and the
  // proof's summary lists every such line.
  const CudnnGraph* graph(const AttentionKey& key) {
    const auto found = shared_.memo.find(key, [&] { return build(key); });
    const auto& entry = *found.entry;
    if (found.first && entry.graph) {
      spdlog::info(
          "cuDNN attention graph {} on GPU {}: built in {:.2f} s (plan {}, workspace {}{})",
          describe(key), gpu_, entry.build_seconds, entry.graph->plan,
          mib(entry.graph->workspace_bytes),
          key.backward ? "; the deterministic backward (on Hopper: the dP-workspace "
                         "path, allocated per call from the pool)"
                       : "");
    } else if (found.first) {
      spdlog::warn(
          "attention {} on GPU {} runs the reference attention from now on (float32 copies of "
          "the bfloat16 tensors; slow): {}{}",
          describe(key), gpu_, entry.refusal,
          key.kv_seq ? " (a context-parallel chunk: cuDNN's bottom-right causal mask)" : "");
    }
    return entry.graph.get();
  }

  AttentionBuild<CudnnGraph> build(const AttentionKey& key) {
    // carousel's reading of cuDNN's limits (head_dim, heads) refuses without asking cuDNN: the
    // same degradation, in words that name the setting.
    if (std::string why = cudnn_attention_unsupported(key); !why.empty())
      return {nullptr, "cuDNN's fused attention does not take this shape: " + why};
    const auto start = std::chrono::steady_clock::now();
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const std::int64_t B = key.batch, T = key.seq, H = key.heads, Hkv = key.kv_heads,
                       D = key.head_dim;
    const DimsStrides qo = bthd_as_bhsd(B, T, H, D), kv = bthd_as_bhsd(B, key.keys(), Hkv, D);
    const bool bottom_right = key.kv_seq != 0;  // the queries are the keys' last positions
    const DimsStrides st = stats_as_bhs1(B, H, T);
    auto input = [&](const char* name, std::int64_t uid, const DimsStrides& ds) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim(vec(ds.dims))
                           .set_stride(vec(ds.strides)));
    };
    auto output = [&](const std::shared_ptr<fe::graph::Tensor_attributes>& t, std::int64_t uid,
                      const DimsStrides& ds) {
      t->set_output(true).set_uid(uid).set_dim(vec(ds.dims)).set_stride(vec(ds.strides));
    };
    auto q = input("Q", kQ, qo), k = input("K", kK, kv), v = input("V", kV, kv);
    const float scale = float(1.0 / std::sqrt(double(D)));
    if (!key.backward) {
      auto attrs = fe::graph::SDPA_attributes()
                       .set_name("sdpa_forward")
                       .set_generate_stats(true)
                       .set_attn_scale(scale);
      if (bottom_right) {
        attrs.set_causal_mask_bottom_right(true);
      } else {
        attrs.set_causal_mask(true);
      }
      auto [o, stats] = g->sdpa(q, k, v, attrs);
      output(o, kO, qo);
      output(stats, kStats, st);
      stats->set_data_type(fe::DataType_t::FLOAT);
    } else {
      auto o = input("O", kO, qo), dout = input("dO", kDO, qo);
      auto stats = input("Stats", kStats, st);
      stats->set_data_type(fe::DataType_t::FLOAT);
      auto attrs = fe::graph::SDPA_backward_attributes()
                       .set_name("sdpa_backward")
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
      if (bottom_right) {
        attrs.set_causal_mask_bottom_right(true);
      } else {
        attrs.set_causal_mask(true);
      }
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, attrs);
      output(dq, kDQ, qo);
      output(dk, kDK, kv);
      output(dv, kDV, kv);
    }
    // Each step's refusal is cuDNN's (or the frontend's) words, with the step and the time spent.
    AttentionBuild<CudnnGraph> refused;
    auto step = [&](const char* what, fe::error_t e) {
      if (e.is_good()) return true;
      const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      refused.refusal = fmt::format("cuDNN refused its graph at {} ({:.2f} s): {}", what,
                                    spent.count(), e.get_message());
      return false;
    };
    if (!step("validate", g->validate()) ||
        !step("build_operation_graph", g->build_operation_graph(shared_.handle)) ||
        !step("create_execution_plans", g->create_execution_plans({fe::HeurMode_t::A})) ||
        !step("check_support", g->check_support()) || !step("build_plans", g->build_plans()))
      return refused;
    auto built = std::make_shared<CudnnGraph>();
    built->graph = g;
    if (!step("get_workspace_size", g->get_workspace_size(built->workspace_bytes))) return refused;
    if (!g->get_plan_name(built->plan).is_good()) built->plan = "(unnamed)";
    return {built, ""};
  }

  Backend& be_;
  int gpu_;
  cudaStream_t stream_;
  GpuGraphs& shared_;
  std::size_t version_;
};

// --- Loading up front what would otherwise load at the first graph build ---------------------
//
// libcudnn.so.9 is a shim that loads its sub-libraries on first use; the SDPA engines live in
// libcudnn_engines_runtime_compiled.so.9 (cuDNN 9's precompiled engine library has none) and are
// compiled at run time with NVRTC, which that library dlopens as libnvrtc.so.<CUDA major> and
// which in turn loads libnvrtc-builtins.so.<major>.<minor>. The frontend dlopens its own CUDA
// runtime (libcudart.so.12 or .13; carousel links cudart statically) at its first device query,
// inside validate(). Missing any of these used to surface as a failed graph build on every
// attention call; loading them here makes it one warning at start-up.

// The folder a dlopen handle's library came from; empty when unknown.
std::string folder_of(void* handle) {
  char folder[PATH_MAX] = {};
  if (!handle || dlinfo(handle, RTLD_DI_ORIGIN, folder) != 0) return "";
  return folder;
}

// dlopen of `name` in each of `folders` in order ("" = the ordinary search: LD_LIBRARY_PATH,
// runpath, ld.so.cache). RTLD_GLOBAL, and never closed: cuDNN's own later dlopen of the same
// soname then finds this copy. Null, with the ordinary search's dlerror in `error`, if none loads.
void* load_library(const std::string& name, const std::vector<std::string>& folders,
                   std::string& error) {
  error = "not found";
  for (const std::string& folder : folders) {
    const std::string path = folder.empty() ? name : folder + "/" + name;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
    const char* why = dlerror();
    if (folder.empty() && why) error = why;
  }
  return nullptr;
}

// Empty when cuDNN, its sub-libraries, NVRTC and the frontend's CUDA runtime all load and cuDNN's
// version takes bfloat16 SDPA; otherwise one sentence naming the library and what to do. May
// throw (the frontend's loader): the caller's try block turns that into the same warning.
std::string load_cudnn_libraries() {
  constexpr const char* kCudnn = "libcudnn.so.9";
  std::string error;
  if (!fe::cudnn_dlhandle) fe::cudnn_dlhandle = load_library(kCudnn, {""}, error);
  if (!fe::cudnn_dlhandle)
    return fmt::format(
        "{} could not be loaded ({}); put cuDNN 9's library folder on "
        "LD_LIBRARY_PATH",
        kCudnn, error);
  const std::string cudnn_folder = folder_of(fe::cudnn_dlhandle);
  const std::size_t version = fe::detail::get_backend_version();
  if (version < 90000)
    return fmt::format("{} is cuDNN {}.{}, older than the 9.0 fused attention needs", kCudnn,
                       version / 1000, version % 1000 / 100);
  // The frontend refuses bfloat16 SDPA, forward and backward, on these two releases (known bugs;
  // sdpa_support_surface.h and scaled_dot_product_flash_attention.h): every shape would be refused.
  if (version == 91000 || version == 91001)
    return fmt::format(
        "cuDNN 9.10.{} has known bfloat16 fused-attention bugs and its frontend "
        "refuses it; use cuDNN 9.10.2 or newer",
        version % 100);

  // The graph library: cudnnGraphVersionCheck loads it and checks it matches libcudnn.so.9.
  using VersionCheck = cudnnStatus_t (*)();
  if (auto check =
          reinterpret_cast<VersionCheck>(dlsym(fe::cudnn_dlhandle, "cudnnGraphVersionCheck"))) {
    const cudnnStatus_t status = check();
    if (status != CUDNN_STATUS_SUCCESS)
      return fmt::format(
          "libcudnn_graph.so.9 (cuDNN's graph API) did not load or does not match "
          "{} (cudnnGraphVersionCheck status {}); install cuDNN's libraries "
          "together, in one folder",
          kCudnn, int(status));
  }
  // The run-time compiled engines, from libcudnn.so.9's own folder first: a same-named library of
  // another cuDNN release found earlier on the search path must not be the one cuDNN reuses.
  constexpr const char* kEngines = "libcudnn_engines_runtime_compiled.so.9";
  if (!load_library(kEngines, {cudnn_folder, ""}, error))
    return fmt::format(
        "{} (cuDNN's run-time compiled engines, which hold its fused attention) "
        "could not be loaded ({}); it belongs in {}'s folder ({})",
        kEngines, error, kCudnn, cudnn_folder.empty() ? "unknown" : cudnn_folder);

  // NVRTC of the CUDA major cuDNN was built for, searched as cuDNN searches: the ordinary way,
  // then the runpath of cuDNN's engine library (its own folder and the pip wheels' neighbours).
  using CudartVersion = std::size_t (*)();
  auto cudnn_cudart =
      reinterpret_cast<CudartVersion>(dlsym(fe::cudnn_dlhandle, "cudnnGetCudartVersion"));
  const int cuda_major = int((cudnn_cudart ? cudnn_cudart() : CUDART_VERSION) / 1000);
  const std::string nvrtc_name = fmt::format("libnvrtc.so.{}", cuda_major);
  std::vector<std::string> nvrtc_folders{""};
  if (!cudnn_folder.empty()) {
    for (const char* rel : {"", "/../../cuda_nvrtc/lib"})
      nvrtc_folders.push_back(cudnn_folder + rel);
    nvrtc_folders.push_back(fmt::format("{}/../../cu{}/lib", cudnn_folder, cuda_major));
  }
  void* nvrtc = load_library(nvrtc_name, nvrtc_folders, error);
  if (!nvrtc)
    return fmt::format(
        "{} (NVRTC, with which cuDNN compiles its fused-attention kernels at run "
        "time) could not be loaded ({}); put CUDA {}'s NVRTC folder (pip: "
        "nvidia/cu{}/lib) on LD_LIBRARY_PATH",
        nvrtc_name, error, cuda_major, cuda_major);
  using NvrtcVersion = int (*)(int*, int*);  // nvrtcResult nvrtcVersion(int*, int*); 0: success
  auto nvrtc_version = reinterpret_cast<NvrtcVersion>(dlsym(nvrtc, "nvrtcVersion"));
  int major = 0, minor = 0;
  if (!nvrtc_version || nvrtc_version(&major, &minor) != 0)
    return fmt::format("{} loaded but does not answer nvrtcVersion", nvrtc_name);
  const std::string builtins = fmt::format("libnvrtc-builtins.so.{}.{}", major, minor);
  if (!load_library(builtins, {folder_of(nvrtc), ""}, error))
    return fmt::format(
        "{} (NVRTC's builtins, loaded by NVRTC at its first compile) could not be "
        "loaded ({}); it belongs beside {}",
        builtins, error, nvrtc_name);

  // The frontend's CUDA runtime: get_cuda_runtime_version throws when no libcudart loads.
  const int cudart = fe::detail::get_cuda_runtime_version();
  int device = -1;
  const cudaError_t seen = fe::detail::cuda_get_device(&device);
  if (cudart == 0 || seen != cudaSuccess)
    return fmt::format(
        "the CUDA runtime cuDNN's frontend loaded (libcudart.so.12 or .13; "
        "CUDNN_FRONTEND_CUDART_LIB_NAME picks one) does not work here "
        "(version {}, cudaGetDevice: {})",
        cudart, cudaGetErrorName(seen));
  spdlog::info(
      "cuDNN attention: cuDNN {}.{}.{} from {}, NVRTC {}.{}, CUDA runtime {}.{} for the frontend "
      "{}.{}",
      version / 10000, version % 10000 / 100, version % 100,
      cudnn_folder.empty() ? "the library path" : cudnn_folder, major, minor, cudart / 1000,
      cudart % 1000 / 10, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION);
  return "";
}

// Loads cuDNN (once per process) and this GPU's handle (once per GPU); null and `why_not` when
// it cannot. Every library the frontend or cuDNN would load later is loaded here, inside the try
// block: the frontend throws when its loader misses a library or symbol.
std::unique_ptr<CudnnAttention> try_open(Backend& be, int gpu, cudaStream_t stream,
                                         std::string& why_not) {
  try {
    static const std::string missing = load_cudnn_libraries();
    if (!missing.empty()) {
      why_not = missing;
      return nullptr;
    }
    GpuGraphs& shared = registry().at(gpu);
    {
      std::lock_guard<std::mutex> lock(shared.mutex);
      if (!shared.handle) {  // cudnnCreate binds the device current here: the backend's GPU
        const cudnnStatus_t created = fe::detail::create_handle(&shared.handle);
        if (created != CUDNN_STATUS_SUCCESS) {
          shared.handle = nullptr;
          why_not = fmt::format("cudnnCreate on GPU {} failed: {}", gpu, status_text(created));
          return nullptr;
        }
      }
    }
    return std::make_unique<Attention>(be, gpu, stream, shared, fe::detail::get_backend_version());
  } catch (const std::exception& e) {
    why_not = fmt::format("cuDNN's frontend could not start: {}", e.what());
    return nullptr;
  }
}

}  // namespace

std::unique_ptr<CudnnAttention> CudnnAttention::open(Backend& be, int gpu, cudaStream_t stream) {
  std::string why_not;
  auto attention = try_open(be, gpu, stream, why_not);
  static std::once_flag warned;
  if (!attention) {
    std::call_once(warned, [&] {
      spdlog::warn(
          "gpu_kernels=fast without cuDNN attention: {}. Attention runs the reference "
          "kernel (one thread per query: many times slower at long sequences)",
          why_not);
    });
  }
  return attention;
}

void note_reference_attention(DType dtype, bool have_cudnn, bool packed) {
  if (!have_cudnn) return;  // open() said why
  if (dtype != DType::BF16) {
    static std::once_flag noted;  // said once per process
    std::call_once(noted, [&] {
      spdlog::info(
          "{} attention runs the reference kernel: cuDNN's fused attention takes bfloat16 "
          "(dtype=bfloat16 for speed)",
          dtype_name(dtype));
    });
  } else if (packed) {
    static std::once_flag noted;
    std::call_once(noted, [] {
      spdlog::warn(
          "packed documents: bfloat16 attention runs the reference kernel on float32 copies "
          "(slow): the cuDNN graphs here are built for the causal mask only, not per document");
    });
  }
}

}  // namespace carousel::gpu
