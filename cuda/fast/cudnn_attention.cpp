// cudnn_attention.cpp — cuDNN fused attention through the frontend's graph API (see
// cudnn_attention.h). Why the frontend: it is NVIDIA's supported way to reach the SDPA engines
// (the backend descriptor API would be hundreds of lines of attribute plumbing); it is
// header-only and comes from PyPI (nvidia-cudnn-frontend, installed by scripts/setup.sh).
//
// Layout: carousel's [B, T, H, D] tensors are described to cuDNN as [b, h, s, d] by strides, the
// statistics [B, H, T] float32 as [b, h, s, 1]; no copies. Each graph: bfloat16 in and out,
// float32 inside; causal (top-left, or bottom-right for a context-parallel chunk whose keys are
// longer than its queries); scale 1/sqrt(D); the backward's deterministic algorithm (the fast
// tier's promise: the same bits every run).
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "cuda/fast/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "compute/error.h"
#include "cuda/plans/attention_plan.h"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads libcudnn through this
}

namespace carousel::gpu {

namespace {

namespace fe = cudnn_frontend;

// Every frontend call returns an error_t; a failure names the call, the shape and cuDNN's words.
#define CUDNN_FE_CHECK(stmt, key)                                                              \
  do {                                                                                         \
    fe::error_t carousel_fe_ = (stmt); /* get_message() is not const */                        \
    CAROUSEL_CHECK(carousel_fe_.is_good(), "cuDNN attention {}: {} failed: {}", describe(key), \
                   #stmt, carousel_fe_.get_message());                                         \
  } while (0)

std::string describe(const AttentionKey& k) {
  return fmt::format("{} B={} T={}{} H={} Hkv={} D={}", k.backward ? "backward" : "forward",
                     k.batch, k.seq, k.kv_seq ? fmt::format(" Tk={}", k.kv_seq) : "", k.heads,
                     k.kv_heads, k.head_dim);
}

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::vector<std::int64_t> vec(const std::array<std::int64_t, 4>& a) { return {a.begin(), a.end()}; }

struct Graph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace_bytes = 0;
};

class Attention final : public CudnnAttention {
 public:
  Attention(Backend& be, cudaStream_t stream, cudnnHandle_t handle, std::size_t version)
      : be_(be), stream_(stream), handle_(handle), version_(version) {}
  ~Attention() override {
    graphs_.clear();  // the plans were built on the handle: released first
    fe::detail::destroy_handle(handle_);
  }

  void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse) override {
    const AttentionKey key = key_of(q, k, false);
    const Graph& g = graph(key);
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kStats, lse.raw()}};
    execute(key, g, pack);
  }
  void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) override {
    const AttentionKey key = key_of(q, k, true);
    const Graph& g = graph(key);
    std::unordered_map<std::int64_t, void*> pack{
        {kQ, q.raw()},     {kK, k.raw()},   {kV, v.raw()},   {kO, out.raw()}, {kStats, lse.raw()},
        {kDO, dout.raw()}, {kDQ, dq.raw()}, {kDK, dk.raw()}, {kDV, dv.raw()}};
    execute(key, g, pack);
  }
  bool takes_key_prefix(const Tensor& q, const Tensor& k, bool backward) override {
    if (prefix_refused_) return false;
    const AttentionKey key = key_of(q, k, backward);  // a shape cuDNN never takes: an error
    try {
      graph(key);
      return true;
    } catch (const Error& e) {
      prefix_refused_ = true;
      spdlog::warn(
          "attention of context-parallel chunks (queries against a longer key prefix) runs the "
          "reference kernel (slow): this cuDNN cannot build its bottom-right causal mask: {}",
          e.what());
      return false;
    }
  }
  std::string version() const override {
    return fmt::format("cuDNN {}.{}.{}", version_ / 10000, version_ % 10000 / 100, version_ % 100);
  }

 private:
  static AttentionKey key_of(const Tensor& q, const Tensor& k, bool backward) {
    AttentionKey key{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), q.dtype(), backward};
    if (k.dim(1) != q.dim(1)) key.kv_seq = k.dim(1);
    const std::string why = cudnn_attention_unsupported(key);
    CAROUSEL_CHECK(why.empty(),
                   "attention: cuDNN's fused attention does not take this shape: {}; change the "
                   "model's head_dim, or run gpu_kernels=reference (slow reference attention)",
                   why);
    return key;
  }

  void execute(const AttentionKey& key, const Graph& g,
               std::unordered_map<std::int64_t, void*>& pack) {
    Tensor workspace = be_.empty({std::max<std::int64_t>(g.workspace_bytes, 1)}, DType::U8);
    CUDNN_FE_CHECK(g.graph->execute(handle_, pack, workspace.raw()), key);
  }

  const Graph& graph(const AttentionKey& key) {
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return it->second;
    try {  // the frontend throws too (a symbol or library its loader cannot find)
      return graphs_.emplace(key, build(key)).first->second;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail("cuDNN attention {}: the frontend failed: {}", describe(key), e.what());
    }
  }

  Graph build(const AttentionKey& key) {
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
    CUDNN_FE_CHECK(g->validate(), key);
    CUDNN_FE_CHECK(g->build_operation_graph(handle_), key);
    CUDNN_FE_CHECK(g->create_execution_plans({fe::HeurMode_t::A}), key);
    CUDNN_FE_CHECK(g->check_support(), key);
    CUDNN_FE_CHECK(g->build_plans(handle_), key);
    Graph built{g, 0};
    CUDNN_FE_CHECK(g->get_workspace_size(built.workspace_bytes), key);
    return built;
  }

  Backend& be_;
  cudaStream_t stream_;
  cudnnHandle_t handle_;
  std::size_t version_;
  std::map<AttentionKey, Graph> graphs_;
  bool prefix_refused_ = false;  // this cuDNN could not build a bottom-right graph: said once
};

}  // namespace

namespace {
// Loads cuDNN and makes a handle on `stream`; null and `why_not` when it cannot.
std::unique_ptr<CudnnAttention> try_open(Backend& be, cudaStream_t stream, std::string& why_not) {
  constexpr const char* kLibrary = "libcudnn.so.9";
  if (!fe::cudnn_dlhandle) fe::cudnn_dlhandle = dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
  if (!fe::cudnn_dlhandle) {
    const char* err = dlerror();
    why_not = fmt::format(
        "{} could not be loaded ({}); put cuDNN 9's library folder on "
        "LD_LIBRARY_PATH",
        kLibrary, err ? err : "no reason given");
    return nullptr;
  }
  try {
    const std::size_t version = fe::detail::get_backend_version();
    if (version < 90000) {
      why_not = fmt::format("{} is cuDNN {}.{}, older than the 9.0 fused attention needs", kLibrary,
                            version / 1000, version % 1000 / 100);
      return nullptr;
    }
    cudnnHandle_t handle = nullptr;
    const cudnnStatus_t created = fe::detail::create_handle(&handle);
    if (created != CUDNN_STATUS_SUCCESS) {
      why_not = fmt::format("cudnnCreate failed with status {}", int(created));
      return nullptr;
    }
    const cudnnStatus_t bound = fe::detail::set_stream(handle, stream);
    if (bound != CUDNN_STATUS_SUCCESS) {
      fe::detail::destroy_handle(handle);
      why_not = fmt::format("cudnnSetStream failed with status {}", int(bound));
      return nullptr;
    }
    return std::make_unique<Attention>(be, stream, handle, version);
  } catch (const std::runtime_error& e) {  // the frontend's loader: a symbol or libcudart missing
    why_not = fmt::format("cuDNN's frontend could not start: {}", e.what());
    return nullptr;
  }
}
}  // namespace

std::unique_ptr<CudnnAttention> CudnnAttention::open(Backend& be, cudaStream_t stream) {
  std::string why_not;
  auto attention = try_open(be, stream, why_not);
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

void note_reference_attention(DType dtype, bool have_cudnn) {
  if (!have_cudnn || dtype == DType::BF16) return;  // open() or takes_key_prefix said why
  static std::once_flag noted;                      // said once per process
  std::call_once(noted, [&] {
    spdlog::info(
        "{} attention runs the reference kernel: cuDNN's fused attention takes "
        "bfloat16 (dtype=bfloat16 for speed)",
        dtype_name(dtype));
  });
}

}  // namespace carousel::gpu
