// test_cuda_backend.cpp — every CUDA op, in both kernel tiers (fast and reference), against the
// CPU op (the oracle) on the same seeded inputs, and the fast tier against the reference tier:
// float32 (rtol 1e-5 / atol 1e-6, attention and reductions 1e-4), float64 (1e-10) and bfloat16
// (1e-2); bfloat16 cast (bitwise) and bf16-input GEMM into float32. Sizes include odd ones (the
// fast kernels' scalar path) and multiples of 8 (their 16-byte packs). The *_into_float32 cases
// give bfloat16 activations float32 accumulators that start non-zero, as a bfloat16 run does for
// every parameter gradient (the CPU stages them; the fast tier takes them natively).
// Label gpu. Without a visible GPU every case skips and says why (CUDA not built, no driver, or
// no device), so `ctest -L gpu` on a GPU-less machine reports them as skipped, not passed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "compute/bfloat16.h"
#include "compute/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_info.h"
#include "cuda/plans/gemm_plan.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

// Runs an op on a backend and returns every output it produced, concatenated.
using OpRun = std::function<std::vector<double>(Backend&, DType)>;

struct GpuCase {
  std::string name;
  OpRun run;
  double rtol32 = 1e-5;
  bool bf16 = true;  // also run with bfloat16 tensors (adamw: parameters stay float32)
  // float32 absolute tolerance; < 0: rtol32 / 10. GEMMs: two summation orders over k = 53
  // products of randn inputs differ by about sqrt(k) x 0.3 ulp of partial sums of 2 to 8, ~1e-6,
  // which an output near zero cannot absorb relatively; 1e-5 bounds k x 2^-24 x max|a b|.
  double atol32 = -1;
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

std::vector<double> cat(std::initializer_list<std::vector<double>> parts) {
  std::vector<double> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The accumulating outputs' dtype beside activations of `dt`: float32 beside bfloat16.
DType accumulator_dtype(DType dt) { return dt == DType::BF16 ? DType::F32 : dt; }

// An MoE layer's experts with outputs in accumulator_dtype that start non-zero: grouped_gemm and
// the experts' weight gradients (grouped_weight_gemm), one group empty. Also the probe below.
std::vector<double> grouped_gemm_into_float32(Backend& be, DType dt) {
  const DType acc = accumulator_dtype(dt);
  const std::vector<std::int64_t> first = {0, 13, 13, 40, 41};
  Tensor a = make(be, testing::randn(41 * 24, 70, 0.25), {41, 24}, dt);
  Tensor v = make(be, testing::randn(4 * 24 * 40, 71), {4, 24, 40}, dt);
  Tensor c = make(be, testing::randn(41 * 40, 72), {41, 40}, acc);
  be.grouped_gemm(false, 0.5, a, v, first, 1.0, c);
  Tensor dy = make(be, testing::randn(41 * 40, 73, 0.25), {41, 40}, dt);
  Tensor dw = make(be, testing::randn(4 * 24 * 40, 74), {4, 24, 40}, acc);
  be.grouped_weight_gemm(1.0, a, dy, first, 1.0, dw);
  return cat({fetch(be, c), fetch(be, dw)});
}

std::vector<GpuCase> cases() {
  std::vector<GpuCase> c;
  c.push_back(
      {"gemm_all_transposes",
       [](Backend& be, DType dt) {
         std::vector<double> out;
         for (bool ta : {false, true})
           for (bool tb : {false, true}) {
             const int m = 37, n = 29, k = 53;
             Tensor a = make(be, testing::randn(m * k, 1), ta ? Shape{k, m} : Shape{m, k}, dt);
             Tensor b = make(be, testing::randn(k * n, 2), tb ? Shape{n, k} : Shape{k, n}, dt);
             Tensor cc = make(be, testing::randn(m * n, 3), {m, n}, dt);
             be.gemm(ta, tb, 0.5, a, b, 1.0, cc);
             const auto v = fetch(be, cc);
             out.insert(out.end(), v.begin(), v.end());
           }
         return out;
       },
       1e-5, true, 1e-5});
  c.push_back({"gemm_strided_batched", [](Backend& be, DType dt) {
                 Tensor a = make(be, testing::randn(3 * 7 * 11, 4), {3, 7, 11}, dt);
                 Tensor b = make(be, testing::randn(3 * 13 * 11, 5), {3, 13, 11}, dt);
                 Tensor cc = be.zeros({3, 7, 13}, dt);
                 be.gemm_strided_batched(false, true, 1.0, a, b, 0.0, cc);
                 return fetch(be, cc);
               }});
  c.push_back({"elementwise_and_reductions",
               [](Backend& be, DType dt) {
                 Tensor x = make(be, testing::randn(1031, 6), {1031}, dt);
                 Tensor y = make(be, testing::randn(1031, 7), {1031}, dt);
                 Tensor z = be.empty({1031}, dt);
                 be.add(x, y, z);
                 be.axpy(0.25, x, z);
                 be.scale(z, -1.5);
                 return cat({fetch(be, z), {be.sum(z), be.sum_squares(z)}});
               },
               1e-4});
  c.push_back(
      {"embedding", [](Backend& be, DType dt) {
         Tensor table = make(be, testing::randn(17 * 5, 8), {17, 5}, dt);
         Tensor tok = be.from_host(testing::randint(23, 17, 9), {23});
         Tensor out = be.empty({23, 5}, dt), dtab = be.zeros({17, 5}, dt);
         be.embedding_forward(table, tok, out);
         be.embedding_backward(make(be, testing::randn(23 * 5, 10), {23, 5}, dt), tok, dtab);
         return cat({fetch(be, out), fetch(be, dtab)});
       }});
  c.push_back(
      {"rmsnorm",
       [](Backend& be, DType dt) {
         Tensor x = make(be, testing::randn(13 * 67, 11), {13, 67}, dt);
         Tensor g = make(be, testing::randn(67, 12), {67}, dt);
         Tensor y = be.empty({13, 67}, dt), r = be.empty({13}, stats_dtype(dt)),
                dx = be.empty({13, 67}, dt), dg = be.zeros({67}, dt);
         be.rmsnorm_forward(x, g, 1e-5, y, r);
         be.rmsnorm_backward(make(be, testing::randn(13 * 67, 13), {13, 67}, dt), x, g, r, dx, dg);
         return cat({fetch(be, y), fetch(be, dx), fetch(be, dg)});
       },
       1e-4});
  c.push_back(
      {"accumulators_into_float32",  // rmsnorm's dweight, the embedding's dtable; odd and packed
       [](Backend& be, DType dt) {
         std::vector<double> out;
         for (std::int64_t width : {67, 256}) {
           const std::int64_t N = 13;
           Tensor x = make(be, testing::randn(N * width, 80), {N, width}, dt);
           Tensor g = make(be, testing::randn(width, 81), {width}, dt);
           Tensor y = be.empty({N, width}, dt), r = be.empty({N}, stats_dtype(dt)),
                  dx = be.empty({N, width}, dt);
           Tensor dg = make(be, testing::randn(width, 82), {width}, accumulator_dtype(dt));
           be.rmsnorm_forward(x, g, 1e-5, y, r);
           be.rmsnorm_backward(make(be, testing::randn(N * width, 83), {N, width}, dt), x, g, r, dx,
                               dg);
           // Tokens repeat (vocab 7): runs of equal tokens add into one row of the table.
           Tensor tok = be.from_host(testing::randint(N, 7, 84), {N});
           Tensor dtab = make(be, testing::randn(7 * width, 85), {7, width}, accumulator_dtype(dt));
           be.embedding_backward(x, tok, dtab);
           out = cat({out, fetch(be, dx), fetch(be, dg), fetch(be, dtab)});
         }
         return out;
       },
       1e-4});
  c.push_back({"rope", [](Backend& be, DType dt) {
                 Tensor x = make(be, testing::randn(2 * 9 * 3 * 10, 14), {2, 9, 3, 10}, dt);
                 // bfloat16 activations rotate by float32 tables, as in the model.
                 auto tables = make_rope_tables(be, 9, 10, 10000.0, stats_dtype(dt));
                 Tensor y = be.empty(x.shape(), dt), dx = be.empty(x.shape(), dt);
                 be.rope_forward(x, tables.cos, tables.sin, y);
                 be.rope_backward(y, tables.cos, tables.sin, dx);
                 return cat({fetch(be, y), fetch(be, dx)});
               }});
  c.push_back(
      {"attention_gqa",
       [](Backend& be, DType dt) {
         const int B = 2, T = 19, H = 4, Hkv = 2, D = 8;
         Tensor q = make(be, testing::randn(B * T * H * D, 15), {B, T, H, D}, dt);
         Tensor k = make(be, testing::randn(B * T * Hkv * D, 16), {B, T, Hkv, D}, dt);
         Tensor v = make(be, testing::randn(B * T * Hkv * D, 17), {B, T, Hkv, D}, dt);
         Tensor o = be.empty(q.shape(), dt), lse = be.empty({B, H, T}, stats_dtype(dt));
         be.attention_forward(q, k, v, o, lse);
         Tensor dq = be.empty(q.shape(), dt), dk = be.empty(k.shape(), dt),
                dv = be.empty(v.shape(), dt);
         be.attention_backward(make(be, testing::randn(q.numel(), 18), q.shape(), dt), q, k, v, o,
                               lse, dq, dk, dv);
         return cat({fetch(be, o), fetch(be, lse), fetch(be, dq), fetch(be, dk), fetch(be, dv)});
       },
       1e-4});
  c.push_back(
      {"attention_packed",  // packed documents: row 0 starts documents at 0, 6, 7; row 1 at 0, 12
       [](Backend& be, DType dt) {
         const int B = 2, T = 19, H = 4, Hkv = 2, D = 8;
         std::vector<std::int32_t> starts(B * T);
         for (int t = 0; t < T; ++t) {
           starts[t] = t < 6 ? 0 : t < 7 ? 6 : 7;
           starts[T + t] = t < 12 ? 0 : 12;
         }
         Tensor ds = be.empty({B, T}, DType::I32);
         be.upload(starts.data(), ds);
         Tensor q = make(be, testing::randn(B * T * H * D, 35), {B, T, H, D}, dt);
         Tensor k = make(be, testing::randn(B * T * Hkv * D, 36), {B, T, Hkv, D}, dt);
         Tensor v = make(be, testing::randn(B * T * Hkv * D, 37), {B, T, Hkv, D}, dt);
         Tensor o = be.empty(q.shape(), dt), lse = be.empty({B, H, T}, stats_dtype(dt));
         be.attention_forward(q, k, v, o, lse, ds);
         Tensor dq = be.empty(q.shape(), dt), dk = be.empty(k.shape(), dt),
                dv = be.empty(v.shape(), dt);
         be.attention_backward(make(be, testing::randn(q.numel(), 38), q.shape(), dt), q, k, v, o,
                               lse, dq, dk, dv, ds);
         return cat({fetch(be, o), fetch(be, lse), fetch(be, dq), fetch(be, dk), fetch(be, dv)});
       },
       1e-4});
  c.push_back(
      {"attention_key_prefix",  // a context-parallel chunk: 5 queries, the last of 19 keys
       [](Backend& be, DType dt) {
         const int B = 2, Tq = 5, Tk = 19, H = 4, Hkv = 2, D = 8;
         Tensor q = make(be, testing::randn(B * Tq * H * D, 25), {B, Tq, H, D}, dt);
         Tensor k = make(be, testing::randn(B * Tk * Hkv * D, 26), {B, Tk, Hkv, D}, dt);
         Tensor v = make(be, testing::randn(B * Tk * Hkv * D, 27), {B, Tk, Hkv, D}, dt);
         Tensor o = be.empty(q.shape(), dt), lse = be.empty({B, H, Tq}, stats_dtype(dt));
         be.attention_forward(q, k, v, o, lse);
         Tensor dq = be.empty(q.shape(), dt), dk = be.empty(k.shape(), dt),
                dv = be.empty(v.shape(), dt);
         be.attention_backward(make(be, testing::randn(q.numel(), 28), q.shape(), dt), q, k, v, o,
                               lse, dq, dk, dv);
         return cat({fetch(be, o), fetch(be, lse), fetch(be, dq), fetch(be, dk), fetch(be, dv)});
       },
       1e-4});
  c.push_back(
      {"swiglu_gelu", [](Backend& be, DType dt) {
         Tensor g = make(be, testing::randn(7 * 31, 19, 2.0), {7, 31}, dt);
         Tensor u = make(be, testing::randn(7 * 31, 20), {7, 31}, dt);
         Tensor dy = make(be, testing::randn(7 * 31, 21), {7, 31}, dt);
         Tensor o = be.empty({7, 31}, dt), dg = be.empty({7, 31}, dt), du = be.empty({7, 31}, dt),
                ge = be.empty({7, 31}, dt), gd = be.empty({7, 31}, dt);
         be.swiglu_forward(g, u, o);
         be.swiglu_backward(dy, g, u, dg, du);
         be.gelu_forward(g, ge);
         be.gelu_backward(dy, g, gd);
         return cat({fetch(be, o), fetch(be, dg), fetch(be, du), fetch(be, ge), fetch(be, gd)});
       }});
  c.push_back({"scale_rows_row_dots", [](Backend& be, DType dt) {  // the MoE combine
                 Tensor x = make(be, testing::randn(9 * 33, 40), {9, 33}, dt);
                 Tensor y = make(be, testing::randn(9 * 33, 41), {9, 33}, dt);
                 Tensor s = make(be, testing::randn(9, 42), {9}, stats_dtype(dt));
                 Tensor o = be.empty({9, 33}, dt), d = be.empty({9}, stats_dtype(dt));
                 be.scale_rows(x, s, o);
                 be.row_dots(x, y, d);
                 return cat({fetch(be, o), fetch(be, d)});
               }});
  c.push_back({"grouped_gemm", [](Backend& be, DType dt) {  // an MoE layer's experts
                 const std::vector<std::int64_t> first = {0, 13, 13, 40, 41};  // one empty
                 Tensor a = make(be, testing::randn(41 * 24, 43, 0.25), {41, 24}, dt);
                 Tensor w = make(be, testing::randn(4 * 40 * 24, 44), {4, 40, 24}, dt);
                 Tensor v = make(be, testing::randn(4 * 40 * 24, 45), {4, 24, 40}, dt);
                 Tensor c1 = be.empty({41, 40}, dt), c2 = be.zeros({41, 40}, dt);
                 be.grouped_gemm(true, 1.0, a, w, first, 0.0, c1);  // [c,24] x [40,24]^T each
                 be.grouped_gemm(false, 0.5, a, v, first, 1.0, c2);
                 be.grouped_gemm(false, 1.0, a, v, first, 1.0, c2);  // accumulating
                 Tensor dy = make(be, testing::randn(41 * 40, 46, 0.25), {41, 40}, dt);
                 Tensor dw = be.zeros({4, 24, 40}, dt);
                 be.grouped_weight_gemm(1.0, a, dy, first, 1.0, dw);  // each [24,40] += a^T dy
                 return cat({fetch(be, c1), fetch(be, c2), fetch(be, dw)});
               }});
  c.push_back({"grouped_gemm_into_float32", grouped_gemm_into_float32, 1e-5, true, 1e-5});
  c.push_back({"cross_entropy", [](Backend& be, DType dt) {
                 Tensor logits = make(be, testing::randn(11 * 257, 22, 3.0), {11, 257}, dt);
                 Tensor tgt = be.from_host(testing::randint(11, 257, 23), {11});
                 Tensor losses = be.empty({11}, stats_dtype(dt)), dl = be.empty({11, 257}, dt);
                 be.cross_entropy_forward(logits, tgt, losses);
                 be.cross_entropy_backward(logits, tgt, 1.0 / 11, dl);
                 return cat({fetch(be, losses), fetch(be, dl)});
               }});
  c.push_back({"vocab_parts", [](Backend& be, DType dt) {  // rows [100, 200) of a 300-id vocabulary
                 Tensor table = make(be, testing::randn(100 * 24, 60), {100, 24}, dt);
                 Tensor ids = be.from_host(testing::randint(11, 300, 61), {11});
                 Tensor rows = be.empty({11, 24}, dt), dtable = be.zeros({100, 24}, dt);
                 be.embedding_part_forward(table, ids, 100, 300, rows);
                 be.embedding_part_backward(rows, ids, 100, 300, dtable);
                 Tensor logits = make(be, testing::randn(11 * 100, 62, 3.0), {11, 100}, dt);
                 const DType st = stats_dtype(dt);
                 Tensor lse = be.empty({11}, st), target = be.empty({11}, st);
                 be.cross_entropy_part_forward(logits, ids, 100, 300, lse, target);
                 Tensor parts = make(be, testing::randn(3 * 11, 63), {3, 11}, st);
                 Tensor whole_lse = be.empty({11}, st), losses = be.empty({11}, st);
                 be.cross_entropy_combine(parts, parts, whole_lse, losses);
                 Tensor dl = be.empty({11, 100}, dt);
                 be.cross_entropy_part_backward(logits, ids, 100, 300, whole_lse, 1.0 / 11, dl);
                 return cat({fetch(be, rows), fetch(be, dtable), fetch(be, lse), fetch(be, target),
                             fetch(be, whole_lse), fetch(be, losses), fetch(be, dl)});
               }});
  c.push_back({"adamw",
               [](Backend& be, DType dt) {
                 Tensor p = make(be, testing::randn(301, 24), {301}, dt);
                 Tensor g = make(be, testing::randn(301, 25), {301}, dt);
                 Tensor m = be.zeros({301}, dt), v = be.zeros({301}, dt);
                 for (long step = 1; step <= 3; ++step) {
                   be.adamw_update(p, g, m, v,
                                   AdamWParams{.lr = 0.01, .weight_decay = 0.1, .step = step});
                 }
                 return cat({fetch(be, p), fetch(be, m), fetch(be, v)});
               },
               1e-5, false});
  c.push_back(
      {"packed_shapes",  // multiples of 8: the fast kernels' 16-byte loads
       [](Backend& be, DType dt) {
         const int N = 48, E = 256, V = 1024, B = 2, T = 64, H = 4, Hkv = 2, D = 64;
         Tensor x = make(be, testing::randn(N * E, 40), {N, E}, dt);
         Tensor g = make(be, testing::randn(E, 41), {E}, dt);
         Tensor y = be.empty({N, E}, dt), r = be.empty({N}, stats_dtype(dt)),
                dx = be.empty({N, E}, dt), dg = be.zeros({E}, dt);
         be.rmsnorm_forward(x, g, 1e-5, y, r);
         be.rmsnorm_backward(make(be, testing::randn(N * E, 42), {N, E}, dt), x, g, r, dx, dg);
         Tensor sw = be.empty({N, E}, dt), dsg = be.empty({N, E}, dt), dsu = be.empty({N, E}, dt);
         be.swiglu_forward(x, y, sw);
         be.swiglu_backward(dx, x, y, dsg, dsu);
         // Tokens repeat (vocab 7): the embedding backward sums runs of equal tokens.
         Tensor table = make(be, testing::randn(7 * E, 43), {7, E}, dt);
         Tensor tok = be.from_host(testing::randint(N, 7, 44), {N});
         Tensor emb = be.empty({N, E}, dt), dtab = be.zeros({7, E}, dt);
         be.embedding_forward(table, tok, emb);
         be.embedding_backward(x, tok, dtab);
         Tensor logits = make(be, testing::randn(N * V, 45, 3.0), {N, V}, dt);
         Tensor tgt = be.from_host(testing::randint(N, V, 46), {N});
         Tensor losses = be.empty({N}, stats_dtype(dt)), dl = be.empty({N, V}, dt);
         be.cross_entropy_forward(logits, tgt, losses);
         be.cross_entropy_backward(logits, tgt, 1.0 / N, dl);
         Tensor q = make(be, testing::randn(B * T * H * D, 47), {B, T, H, D}, dt);
         Tensor k = make(be, testing::randn(B * T * Hkv * D, 48), {B, T, Hkv, D}, dt);
         Tensor v = make(be, testing::randn(B * T * Hkv * D, 49), {B, T, Hkv, D}, dt);
         auto tables = make_rope_tables(be, T, D, 500000.0, stats_dtype(dt));
         be.rope_forward(q, tables.cos, tables.sin, q);  // in place, as the model does
         Tensor o = be.empty(q.shape(), dt), lse = be.empty({B, H, T}, stats_dtype(dt));
         be.attention_forward(q, k, v, o, lse);
         Tensor dq = be.empty(q.shape(), dt), dk = be.empty(k.shape(), dt),
                dv = be.empty(v.shape(), dt);
         be.attention_backward(make(be, testing::randn(q.numel(), 50), q.shape(), dt), q, k, v, o,
                               lse, dq, dk, dv);
         return cat({fetch(be, y), fetch(be, r), fetch(be, dx), fetch(be, dg), fetch(be, sw),
                     fetch(be, dsg), fetch(be, dsu), fetch(be, emb), fetch(be, dtab),
                     fetch(be, losses), fetch(be, dl), fetch(be, q), fetch(be, o), fetch(be, lse),
                     fetch(be, dq), fetch(be, dk), fetch(be, dv)});
       },
       1e-4});
  return c;
}

// Logical device `logical` on GPU 0, or nullptr with the reason there is none.
std::unique_ptr<Backend> cuda_backend_or_why(int logical, std::string& why,
                                             GpuKernels kernels = GpuKernels::Fast) {
  try {
    return make_cuda_backend(0, logical, kernels);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

class CudaVsCpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(CudaVsCpu, BothTiersMatchTheCpuBackendAndRepeatThemselves) {
  std::string why;
  std::unique_ptr<Backend> fast = cuda_backend_or_why(0, why, GpuKernels::Fast);
  std::unique_ptr<Backend> reference = cuda_backend_or_why(1, why, GpuKernels::Reference);
  if (!fast || !reference) GTEST_SKIP() << "no GPU to test on: " << why;
  const GpuCase& c = GetParam();
  CpuBackend cpu;
  for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
    if (dt == DType::BF16 && !c.bf16) continue;
    // bfloat16: both backends round the same float32 results, which differ by float32 rounding
    // here and there; a flipped rounding is one bf16 ulp (2^-8 relative), inputs and outputs.
    const double rtol = dt == DType::F64 ? 1e-10 : dt == DType::BF16 ? 1e-2 : c.rtol32;
    const double atol = dt == DType::F32 && c.atol32 >= 0 ? c.atol32 : rtol / 10;
    const std::string what = c.name + " " + std::string(dtype_name(dt));
    const auto on_cpu = c.run(cpu, dt), on_fast = c.run(*fast, dt);
    testing::expect_close(on_fast, on_cpu, rtol, atol, what + " fast vs cpu");
    testing::expect_close(c.run(*reference, dt), on_cpu, rtol, atol, what + " reference vs cpu");
    // The same bits from run to run (no atomics, fixed reduction orders).
    EXPECT_EQ(c.run(*fast, dt), on_fast) << what << ": the fast tier is not deterministic";
  }
}

// The cases themselves, on the CPU oracle (runs everywhere): valid calls whose bfloat16 run agrees
// with the float32 one to bf16 precision, so a GPU's scarce minutes are not spent on a broken case.
TEST_P(CudaVsCpu, CaseIsValidOnTheCpu) {
  const GpuCase& c = GetParam();
  if (!c.bf16) GTEST_SKIP() << "float32 only";
  CpuBackend cpu;
  testing::expect_close(c.run(cpu, DType::BF16), c.run(cpu, DType::F32), 5e-2, 5e-2, c.name);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaVsCpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// bfloat16: cast must give the same bits as the CPU (one rounding function, compute/bfloat16.h);
// GEMM with bf16 inputs sums in float32 in another order than OpenBLAS: float32 outputs agree to
// 1e-5 relative (k = 53), bfloat16 outputs to one bf16 ulp (2^-7 relative).
TEST(CudaBf16, CastIsBitwiseAndGemmMatchesTheCpu) {
  std::string why;
  std::unique_ptr<Backend> gpu = cuda_backend_or_why(0, why);
  if (!gpu) GTEST_SKIP() << "no GPU to test on: " << why;
  CpuBackend cpu;
  const auto values = testing::randn(4099, 30, 100.0);
  auto bits = [](Backend& be, const std::vector<double>& v) {
    return be.to_host<bf16>(make(be, v, {std::int64_t(v.size())}, DType::BF16));
  };
  const auto g = bits(*gpu, values), c = bits(cpu, values);
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(g[i].bits, c[i].bits) << values[i];
  for (DType out : {DType::F32, DType::BF16}) {
    auto run = [&](Backend& be) {
      std::vector<double> all;
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const int m = 37, n = 29, k = 53;
          Tensor a =
              make(be, testing::randn(m * k, 1), ta ? Shape{k, m} : Shape{m, k}, DType::BF16);
          Tensor b =
              make(be, testing::randn(k * n, 2), tb ? Shape{n, k} : Shape{k, n}, DType::BF16);
          Tensor cc = make(be, testing::randn(m * n, 3), {m, n}, out);
          be.gemm(ta, tb, 0.5, a, b, 1.0, cc);
          const auto v = fetch(be, cc);
          all.insert(all.end(), v.begin(), v.end());
        }
      return all;
    };
    const double rtol = out == DType::F32 ? 1e-5 : std::ldexp(1.0, -7);
    testing::expect_close(run(*gpu), run(cpu), rtol, rtol,
                          "bf16 gemm into " + std::string(dtype_name(out)));
  }
}

// float8 (docs/float8.md): amax and quantize_float8 on both tiers give the CPU's bits — one scalar
// definition (compute/float8/float8.h), an exact max — for float32, bfloat16 and float64 inputs,
// both formats, sizes across the amax's one-block and many-block paths, and a NaN and an
// infinity (NaN-propagating amax, saturating casts).
TEST(CudaFloat8, AmaxAndQuantizeAreBitwiseTheCpus) {
  std::string why;
  std::unique_ptr<Backend> fast = cuda_backend_or_why(0, why, GpuKernels::Fast);
  std::unique_ptr<Backend> reference = cuda_backend_or_why(1, why, GpuKernels::Reference);
  if (!fast || !reference) GTEST_SKIP() << "no GPU to test on: " << why;
  CpuBackend cpu;
  for (const std::int64_t n : {std::int64_t(1), std::int64_t(4099), std::int64_t(1) << 20}) {
    auto values = testing::randn(std::size_t(n), 40 + std::uint64_t(n), 30.0);
    for (const int special : {0, 1, 2}) {
      if (special == 1) values[std::size_t(n / 2)] = INFINITY;
      if (special == 2) values[std::size_t(n / 3)] = NAN;
      for (const DType dt : {DType::F32, DType::BF16, DType::F64}) {
        for (const Float8Format f : {Float8Format::E4M3, Float8Format::E5M2}) {
          const auto run = [&](Backend& be) {
            const Tensor x = make(be, values, {n}, dt), amax = be.empty({1}, DType::F32);
            be.amax(x, amax);
            const Tensor q = be.empty({n}, dt);
            be.quantize_float8(x, f, 0.37f, q);
            std::vector<double> out = fetch(be, amax), qv = fetch(be, q);
            out.insert(out.end(), qv.begin(), qv.end());
            std::vector<std::uint64_t> bits(out.size());
            std::memcpy(bits.data(), out.data(), out.size() * sizeof(double));
            return bits;
          };
          const auto on_cpu = run(cpu);
          const std::string what =
              fmt::format("n={} special={} {} {}", n, special, dtype_name(dt), float8_name(f));
          EXPECT_EQ(run(*fast), on_cpu) << what << " fast";
          EXPECT_EQ(run(*reference), on_cpu) << what << " reference";
        }
      }
    }
  }
}

// Several logical devices share one GPU (multi-device logic on a single card): each has its own
// stream, pool-backed allocations and accounting, and refuses the other's tensors.
TEST(CudaDevice, LogicalDevicesOnOneGpuKeepTheirOwnAccounting) {
  std::string why;
  std::unique_ptr<Backend> a = cuda_backend_or_why(0, why), b = cuda_backend_or_why(1, why);
  if (!a || !b) GTEST_SKIP() << "no GPU to test on: " << why;
  {
    Tensor x = a->zeros({1000});
    EXPECT_GE(a->allocator().stats().current_bytes, 4000u);
    EXPECT_EQ(b->allocator().stats().current_bytes, 0u);
    const std::string msg = testing::error_of([&] { b->fill(x, 1.0); });
    EXPECT_NE(msg.find("lives on cuda:0 but this backend runs on cuda:1"), std::string::npos)
        << msg;
    Tensor y = b->from_host(std::vector<float>(1000, 2.0f), {1000});
    b->scale(y, 0.5);
    EXPECT_EQ(b->to_host<float>(y), std::vector<float>(1000, 1.0f));
  }
  EXPECT_EQ(a->allocator().stats().current_bytes, 0u);  // freed into the pool, accounted
  EXPECT_EQ(b->allocator().stats().current_bytes, 0u);
}

TEST(CudaDevice, AsksForCudaWithoutAGpuIsAClearError) {
  if (!list_cuda_devices().devices.empty()) GTEST_SKIP() << "a GPU is visible";
  const std::string msg = testing::error_of([] { make_cuda_backend(0); });
  EXPECT_EQ(msg.rfind("device=cuda: ", 0), 0u) << msg;
}

// Whether cuBLAS' grouped GEMM takes bfloat16 A and B into a float32 C in one call: the fast tier
// runs that mix one GEMM per group until this passes on a GPU (cuda/fast/grouped_gemm.cu). A
// refusal skips with cuBLAS' words (keep the fallback); wrong numbers fail. The proof runs it in a
// process of its own (gpu_checks.sh part gpu_grouped_probe): a misbehaving call leaves a sticky
// CUDA error, and googletest runs this TEST before the parameterised op cases.
TEST(CudaGroupedGemm, Bf16IntoFloat32InOneCall) {
  std::string why;
  std::unique_ptr<Backend> fast = cuda_backend_or_why(0, why);
  if (!fast) GTEST_SKIP() << "no GPU to test on: " << why;
  struct MixedTypes {  // on for this test only
    MixedTypes() { gpu::set_grouped_gemm_mixed_types(true); }
    ~MixedTypes() { gpu::set_grouped_gemm_mixed_types(false); }
  } mixed;
  std::vector<double> grouped;
  try {
    grouped = grouped_gemm_into_float32(*fast, DType::BF16);
  } catch (const Error& e) {
    GTEST_SKIP() << "cuBLAS' grouped GEMM refuses bfloat16 into float32 (keep one GEMM per "
                    "group): "
                 << e.what();
  }
  // Passing: cuBLAS takes the mix, and grouped_takes() in grouped_gemm.cu may admit it. bf16
  // products are exact in float32; sums over <= 27 of them in another order than the CPU's.
  CpuBackend cpu;
  testing::expect_close(grouped, grouped_gemm_into_float32(cpu, DType::BF16), 1e-5, 1e-5,
                        "grouped bf16 -> float32 in one cuBLAS call");
}

}  // namespace
}  // namespace carousel
