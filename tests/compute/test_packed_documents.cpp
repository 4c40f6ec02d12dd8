// test_packed_documents.cpp — packed documents in the CPU backend's ops: attention with
// doc_start equals attention run on each document alone (forward, lse and backward), a
// document's results do not change when another document's tokens do (bitwise), and RoPE with
// a table row per token equals RoPE on each document alone (bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compute/cpu_backend.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

using testing::fetch;
using testing::make;

constexpr std::int64_t B = 2, T = 200, H = 4, Hkv = 2, D = 16;  // T spans two 128-query tiles
// Each row's documents, as their first positions; the last run to T.
const std::vector<std::vector<std::int64_t>> kDocs = {{0, 37, 150, 151}, {0, 130}};

std::vector<double> doc_start_values() {
  std::vector<double> ds;
  for (const auto& starts : kDocs) {
    for (std::int64_t t = 0; t < T; ++t) {
      ds.push_back(double(*std::prev(std::upper_bound(starts.begin(), starts.end(), t))));
    }
  }
  return ds;
}

Tensor int_tensor(Backend& be, const std::vector<double>& values) {  // [B, T] int32
  std::vector<std::int32_t> ids(values.begin(), values.end());
  Tensor t = be.empty({B, T}, DType::I32);
  be.upload(ids.data(), t);
  return t;
}

// Rows [s, e) of sequence b of a [B, T, X...] tensor, copied out as [1, e - s, X...].
Tensor rows_of(Backend& be, const Tensor& t, std::int64_t b, std::int64_t s, std::int64_t e) {
  Shape shape = t.shape();
  const std::int64_t per = t.numel() / (shape[0] * shape[1]);
  shape[0] = 1;
  shape[1] = e - s;
  Tensor out = be.empty(shape, t.dtype());
  be.copy(t.view((b * T + s) * per, {(e - s) * per}), out.view(0, {(e - s) * per}));
  return out;
}

struct Attention {
  Tensor q, k, v, dout;
};

Attention random_inputs(Backend& be, std::uint64_t seed) {
  return {make(be, testing::randn(B * T * H * D, seed), {B, T, H, D}, DType::F32),
          make(be, testing::randn(B * T * Hkv * D, seed + 1), {B, T, Hkv, D}, DType::F32),
          make(be, testing::randn(B * T * Hkv * D, seed + 2), {B, T, Hkv, D}, DType::F32),
          make(be, testing::randn(B * T * H * D, seed + 3), {B, T, H, D}, DType::F32)};
}

struct Results {
  std::vector<double> out, lse, dq, dk, dv;
};

Results packed(Backend& be, const Attention& a, const Tensor& doc_start) {
  Tensor out = be.empty(a.q.shape(), DType::F32), lse = be.empty({B, H, T}, DType::F32);
  be.attention_forward(a.q, a.k, a.v, out, lse, doc_start);
  Tensor dq = be.empty(a.q.shape(), DType::F32), dk = be.empty(a.k.shape(), DType::F32),
         dv = be.empty(a.v.shape(), DType::F32);
  be.attention_backward(a.dout, a.q, a.k, a.v, out, lse, dq, dk, dv, doc_start);
  return {fetch(be, out), fetch(be, lse), fetch(be, dq), fetch(be, dk), fetch(be, dv)};
}

void expect_near(const std::vector<double>& got, std::size_t at, const std::vector<double>& want,
                 double tol, const std::string& what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[at + i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
  }
}

TEST(PackedDocuments, AttentionEqualsEachDocumentAlone) {
  CpuBackend be;
  const Attention a = random_inputs(be, 11);
  const Tensor ds = int_tensor(be, doc_start_values());
  const Results p = packed(be, a, ds);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::size_t d = 0; d < kDocs[b].size(); ++d) {
      const std::int64_t s = kDocs[b][d], e = d + 1 < kDocs[b].size() ? kDocs[b][d + 1] : T;
      const std::string doc = "row " + std::to_string(b) + " document " + std::to_string(d);
      const Tensor q = rows_of(be, a.q, b, s, e), k = rows_of(be, a.k, b, s, e),
                   v = rows_of(be, a.v, b, s, e), g = rows_of(be, a.dout, b, s, e);
      Tensor out = be.empty(q.shape(), DType::F32), lse = be.empty({1, H, e - s}, DType::F32);
      be.attention_forward(q, k, v, out, lse);
      Tensor dq = be.empty(q.shape(), DType::F32), dk = be.empty(k.shape(), DType::F32),
             dv = be.empty(v.shape(), DType::F32);
      be.attention_backward(g, q, k, v, out, lse, dq, dk, dv);
      expect_near(p.out, std::size_t(b * T + s) * H * D, fetch(be, out), 1e-5, doc + " out");
      expect_near(p.dq, std::size_t(b * T + s) * H * D, fetch(be, dq), 1e-4, doc + " dq");
      expect_near(p.dk, std::size_t(b * T + s) * Hkv * D, fetch(be, dk), 1e-4, doc + " dk");
      expect_near(p.dv, std::size_t(b * T + s) * Hkv * D, fetch(be, dv), 1e-4, doc + " dv");
      const std::vector<double> l = fetch(be, lse);  // [1, H, e - s] against [B, H, T]
      for (std::int64_t h = 0; h < H; ++h) {
        for (std::int64_t t = 0; t < e - s; ++t) {
          ASSERT_NEAR(p.lse[std::size_t((b * H + h) * T + s + t)], l[std::size_t(h * (e - s) + t)],
                      1e-5)
              << doc << " lse";
        }
      }
    }
  }
}

// Another first document (row 0's tokens 0..36 replaced): every later document's outputs and
// gradients keep their bits; without doc_start they change (the test can fail).
TEST(PackedDocuments, ADocumentDoesNotSeeTheOthers) {
  CpuBackend be;
  const Attention a = random_inputs(be, 21);
  Attention changed = random_inputs(be, 21);
  const Attention other = random_inputs(be, 77);
  for (const Tensor* t : {&changed.q, &changed.k, &changed.v}) {
    const Tensor& from = t == &changed.q ? other.q : t == &changed.k ? other.k : other.v;
    const std::int64_t per = t->numel() / (B * T);
    be.copy(from.view(0, {37 * per}), t->view(0, {37 * per}));
  }
  const Tensor ds = int_tensor(be, doc_start_values());
  const Results x = packed(be, a, ds), y = packed(be, changed, ds);
  const auto after_first = [](const std::vector<double>& v, std::int64_t per) {
    return std::vector<double>(v.begin() + 37 * per, v.end());
  };
  EXPECT_EQ(after_first(x.out, H * D), after_first(y.out, H * D));
  EXPECT_EQ(after_first(x.dq, H * D), after_first(y.dq, H * D));
  EXPECT_EQ(after_first(x.dk, Hkv * D), after_first(y.dk, Hkv * D));
  EXPECT_EQ(after_first(x.dv, Hkv * D), after_first(y.dv, Hkv * D));
  const Tensor one_doc = int_tensor(be, std::vector<double>(B * T, 0.0));
  EXPECT_NE(after_first(packed(be, a, one_doc).out, H * D),
            after_first(packed(be, changed, one_doc).out, H * D));
}

// A context-parallel chunk (the last Tq queries against the keys before and up to them) with
// its queries' document starts equals those rows of the whole sequence's packed attention.
TEST(PackedDocuments, AKeyPrefixChunkEqualsThoseRowsOfTheWholeSequence) {
  CpuBackend be;
  const Attention a = random_inputs(be, 31);
  const Tensor ds = int_tensor(be, doc_start_values());
  const Results whole = packed(be, a, ds);
  constexpr std::int64_t Tq = 40, Tk = 160;  // queries 120..159, keys 0..159
  const auto rows = [&](const Tensor& t, std::int64_t s, std::int64_t e) {
    Shape shape = t.shape();
    const std::int64_t per = t.numel() / (shape[0] * shape[1]);
    shape[1] = e - s;
    Tensor out = be.empty(shape, t.dtype());
    for (std::int64_t b = 0; b < B; ++b) {
      be.copy(t.view((b * T + s) * per, {(e - s) * per}),
              out.view(b * (e - s) * per, {(e - s) * per}));
    }
    return out;
  };
  const Tensor q = rows(a.q, Tk - Tq, Tk), k = rows(a.k, 0, Tk), v = rows(a.v, 0, Tk),
               g = rows(a.dout, Tk - Tq, Tk), starts = rows(ds, Tk - Tq, Tk);
  Tensor out = be.empty(q.shape(), DType::F32), lse = be.empty({B, H, Tq}, DType::F32);
  be.attention_forward(q, k, v, out, lse, starts);
  Tensor dq = be.empty(q.shape(), DType::F32), dk = be.empty(k.shape(), DType::F32),
         dv = be.empty(v.shape(), DType::F32);
  be.attention_backward(g, q, k, v, out, lse, dq, dk, dv, starts);
  const std::vector<double> o = fetch(be, out), gq = fetch(be, dq);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < Tq * H * D; ++i) {
      const std::size_t at = std::size_t((b * T + Tk - Tq) * H * D + i);
      ASSERT_NEAR(o[std::size_t(b * Tq * H * D + i)], whole.out[at], 1e-5) << b << " " << i;
      ASSERT_NEAR(gq[std::size_t(b * Tq * H * D + i)], whole.dq[at], 1e-4) << b << " " << i;
    }
  }
}

// RoPE with a table row per token at its position in its document equals RoPE of each
// document alone, whose token t is at position t.
TEST(PackedDocuments, RopeRowsPerTokenRestartEachDocument) {
  CpuBackend be;
  const RopeTables tables = make_rope_tables(be, T, D, 10000.0);
  const std::vector<double> cos = fetch(be, tables.cos), sin = fetch(be, tables.sin);
  const std::vector<double> ds = doc_start_values();
  std::vector<double> cos_rows, sin_rows;
  for (std::int64_t i = 0; i < B * T; ++i) {
    const std::int64_t pos = i % T - std::int64_t(ds[std::size_t(i)]);
    cos_rows.insert(cos_rows.end(), cos.begin() + pos * D / 2, cos.begin() + (pos + 1) * D / 2);
    sin_rows.insert(sin_rows.end(), sin.begin() + pos * D / 2, sin.begin() + (pos + 1) * D / 2);
  }
  const Tensor c = make(be, cos_rows, {B * T, D / 2}, DType::F32),
               s = make(be, sin_rows, {B * T, D / 2}, DType::F32);
  const Tensor x = make(be, testing::randn(B * T * H * D, 5), {B, T, H, D}, DType::F32);
  Tensor out = be.empty(x.shape(), DType::F32);
  be.rope_forward(x, c, s, out);
  const std::vector<double> packed_out = fetch(be, out);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::size_t d = 0; d < kDocs[b].size(); ++d) {
      const std::int64_t st = kDocs[b][d], e = d + 1 < kDocs[b].size() ? kDocs[b][d + 1] : T;
      const Tensor xd = rows_of(be, x, b, st, e);
      const RopeTables own = make_rope_tables(be, e - st, D, 10000.0);
      Tensor od = be.empty(xd.shape(), DType::F32);
      be.rope_forward(xd, own.cos, own.sin, od);
      const std::vector<double> want = fetch(be, od);
      const std::vector<double> got(packed_out.begin() + (b * T + st) * H * D,
                                    packed_out.begin() + (b * T + e) * H * D);
      ASSERT_EQ(got, want) << "row " << b << " document " << d;
    }
  }
}

}  // namespace
}  // namespace carousel
