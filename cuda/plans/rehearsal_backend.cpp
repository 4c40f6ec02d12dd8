// rehearsal_backend.cpp — the fast tier's native ops on a CPU (see rehearsal_backend.h). Each
// native op's do_<op> gets float32 stand-ins of its bfloat16 tensors, runs the CPU backend's
// float32 kernel on them, and rounds the bfloat16 outputs back once.
#include "cuda/plans/rehearsal_backend.h"

#include "compute/bf16_staging.h"
#include "compute/error.h"
#include "cuda/plans/fast_tier_ops.h"

namespace carousel::gpu {

namespace {

class RehearsalBackend final : public CpuBackend {
 public:
  RehearsalBackend(int device_index, std::size_t memory_limit_bytes)
      : CpuBackend(device_index, memory_limit_bytes) {}

  std::string name() const override {
    return CpuBackend::name() + ", rehearsing the GPU fast tier's bfloat16 rules";
  }
  // The fast tier with cuDNN attention open: the most ops native, as on the GPU the proof runs.
  bool has_native_bf16(Op op) const override {
    return fast_tier_native_bf16(op, /*cudnn_attention=*/true);
  }

 private:
  // The float32 stand-ins of one native call's bfloat16 tensors, made as the front end's staging
  // makes them (compute/bf16_staging.h): one copy per buffer, so an in-place call (dlogits
  // aliasing logits, RoPE's out aliasing x) reads and writes one stand-in as the kernel reads and
  // writes one buffer; each bfloat16 output rounded back once by finish(); float32 and float64
  // tensors (an accumulator beside bfloat16) used as they are.
  class StandIns {
   public:
    explicit StandIns(Backend& be) : staging_(be) {}
    Tensor in(const Tensor& t) { return t.defined() ? staging_.widen(t) : t; }
    Tensor out(const Tensor& t) {  // read too: accumulating outputs start from their value
      staging_.note_output(detail::Out{t});
      return in(t);
    }
    void finish() { staging_.finish(); }

   private:
    detail::Float32Staging staging_;
  };

  // Runs `fn` (a CpuBackend kernel on the stand-ins it asks for), then rounds the outputs back.
  template <class Fn>
  void on_stand_ins(Fn&& fn) {
    StandIns s(*this);
    fn(s);
    s.finish();
  }

 protected:
  void do_scale(const Tensor& x, double alpha) override {
    on_stand_ins([&](StandIns& s) { CpuBackend::do_scale(s.out(x), alpha); });
  }
  void do_axpy(double alpha, const Tensor& x, const Tensor& y) override {
    on_stand_ins([&](StandIns& s) { CpuBackend::do_axpy(alpha, s.in(x), s.out(y)); });
  }
  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    on_stand_ins([&](StandIns& s) { CpuBackend::do_add(s.in(a), s.in(b), s.out(out)); });
  }
  void do_embedding_forward(const Tensor& table, const Tensor& tokens, const Tensor& out) override {
    on_stand_ins(
        [&](StandIns& s) { CpuBackend::do_embedding_forward(s.in(table), tokens, s.out(out)); });
  }
  void do_embedding_backward(const Tensor& dout, const Tensor& tokens,
                             const Tensor& dtable) override {
    on_stand_ins(
        [&](StandIns& s) { CpuBackend::do_embedding_backward(s.in(dout), tokens, s.out(dtable)); });
  }
  void do_rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& out,
                          const Tensor& rstd) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_rmsnorm_forward(s.in(x), s.in(w), eps, s.out(out), rstd);
    });
  }
  void do_rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dw) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_rmsnorm_backward(s.in(dout), s.in(x), s.in(w), rstd, s.out(dx), s.out(dw));
    });
  }
  void do_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
               bool backward) override {
    on_stand_ins(
        [&](StandIns& s) { CpuBackend::do_rope(s.in(x), cos, sin, s.out(out), backward); });
  }
  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const Tensor& doc_start) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_attention_forward(s.in(q), s.in(k), s.in(v), s.out(out), lse, doc_start);
    });
  }
  void do_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, const Tensor& doc_start) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_attention_backward(s.in(dout), s.in(q), s.in(k), s.in(v), s.in(out), lse,
                                        s.out(dq), s.out(dk), s.out(dv), doc_start);
    });
  }
  void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    on_stand_ins(
        [&](StandIns& s) { CpuBackend::do_swiglu_forward(s.in(gate), s.in(up), s.out(out)); });
  }
  void do_swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                          const Tensor& dgate, const Tensor& dup) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_swiglu_backward(s.in(dout), s.in(gate), s.in(up), s.out(dgate), s.out(dup));
    });
  }
  void do_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) override {
    on_stand_ins(
        [&](StandIns& s) { CpuBackend::do_cross_entropy_forward(s.in(logits), targets, losses); });
  }
  void do_cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                 const Tensor& dlogits) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_cross_entropy_backward(s.in(logits), targets, dloss, s.out(dlogits));
    });
  }
  void do_adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWScalars& scalars) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_adamw_update(s.out(param), s.in(grad), s.out(m), s.out(v), scalars);
    });
  }
  // The embedding part's backward is staged (not native): it arrives in float32 or float64.
  void do_embedding_part(const Tensor& table, const Tensor& tokens, std::int64_t first,
                         const Tensor& rows, bool backward) override {
    CAROUSEL_ASSERT(!backward || table.dtype() != DType::BF16,
                    "embedding_part_backward reached the rehearsal in bfloat16 ({}), but the fast "
                    "tier stages it (fast_tier_ops.cpp)",
                    table.describe());
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_embedding_part(s.in(table), tokens, first, s.out(rows), backward);
    });
  }
  void do_cross_entropy_part_forward(const Tensor& logits, const Tensor& targets,
                                     std::int64_t first, const Tensor& lse,
                                     const Tensor& target_logits) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_cross_entropy_part_forward(s.in(logits), targets, first, lse, target_logits);
    });
  }
  void do_cross_entropy_part_backward(const Tensor& logits, const Tensor& targets,
                                      std::int64_t first, const Tensor& lse, double dloss,
                                      const Tensor& dlogits) override {
    on_stand_ins([&](StandIns& s) {
      CpuBackend::do_cross_entropy_part_backward(s.in(logits), targets, first, lse, dloss,
                                                 s.out(dlogits));
    });
  }
};

}  // namespace

std::unique_ptr<Backend> make_rehearsal_backend(int device_index, std::size_t memory_limit_bytes) {
  return std::make_unique<RehearsalBackend>(device_index, memory_limit_bytes);
}

}  // namespace carousel::gpu
