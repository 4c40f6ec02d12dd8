// context_parallel.cpp — context parallelism's token placement and attention.
//
// Layouts: a rank's tensors are [b, 2c, ...] (its early chunk, then its late one, per
// sequence); the gathered keys arrive rank-major [C, b, 2c, ...] and are rearranged into
// sequence order [b, S, ...] (chunk m from rank m or 2C - 1 - m). The chunks' queries, outputs
// and statistics are cut out of and put back into the rank's tensors with copies per sequence
// (a chunk of one sequence is contiguous; of several, strided). The collectives wait on the host.
#include "models/parallel/context_parallel.h"

#include "compute/error.h"

namespace carousel {

std::vector<std::int64_t> ContextGroup::positions(std::int64_t seq) const {
  std::vector<std::int64_t> out;
  if (size() == 1) {  // the whole sequence (of any length)
    for (std::int64_t p = 0; p < seq; ++p) out.push_back(p);
    return out;
  }
  const std::int64_t c = seq / (2 * size());
  for (const int half : {0, 1}) {
    for (std::int64_t p = 0; p < c; ++p) out.push_back(chunk(half) * c + p);
  }
  return out;
}

namespace {

// Rows [from, from + n) of every sequence of `src` [b, Ts, X...] to rows [to, to + n) of `dst`
// [b, Td, X...] (dst += src rows with `add`).
void copy_rows(Backend& be, const Tensor& src, std::int64_t from, const Tensor& dst,
               std::int64_t to, std::int64_t n, bool add = false) {
  const std::int64_t b = src.dim(0), row = src.numel() / (b * src.dim(1));
  for (std::int64_t s = 0; s < b; ++s) {
    const Tensor a = src.view((s * src.dim(1) + from) * row, {n * row});
    const Tensor z = dst.view((s * dst.dim(1) + to) * row, {n * row});
    if (add) {
      be.axpy(1.0, a, z);
    } else {
      be.copy(a, z);
    }
  }
}

// [b, L, X...] with the first dim kept and L replaced.
Shape with_length(const Tensor& t, std::int64_t length) {
  Shape s = t.shape();
  s[1] = length;
  return s;
}

// parts [C, b, 2c, X...] (rank-major) -> whole [b, S, X...] in sequence order, or the reverse.
void rearrange(Backend& be, const ContextGroup& cg, const Tensor& parts, const Tensor& whole,
               bool to_sequence) {
  const std::int64_t c = whole.dim(1) / (2 * cg.size()), per_rank = parts.numel() / cg.size();
  Shape local = whole.shape();
  local[1] = 2 * c;
  for (int r = 0; r < cg.size(); ++r) {
    const Tensor mine = parts.view(r * per_rank, local);
    for (const int half : {0, 1}) {
      const std::int64_t m = half == 0 ? r : 2 * cg.size() - 1 - r;
      if (to_sequence) {
        copy_rows(be, mine, half * c, whole, m * c, c);
      } else {
        copy_rows(be, whole, m * c, mine, half * c, c);
      }
    }
  }
}

// [b, 2c, X...] of every rank -> [b, S, X...] in sequence order.
Tensor gather_sequence(Backend& be, const ContextGroup& cg, const Tensor& mine) {
  Tensor parts = be.empty({mine.numel() * cg.size()}, mine.dtype());
  cg.comm->all_gather(mine, parts).wait();
  Tensor whole = be.empty(with_length(mine, mine.dim(1) * cg.size()), mine.dtype());
  rearrange(be, cg, parts, whole, /*to_sequence=*/true);
  return whole;
}

// lse [b, H, 2c] <-> one chunk's [b, H, c] (its columns h*c ...).
void lse_chunk(Backend& be, const Tensor& lse, int half, const Tensor& chunk, bool to_chunk) {
  const std::int64_t rows = lse.dim(0) * lse.dim(1), two_c = lse.dim(2), c = two_c / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const Tensor a = lse.view(r * two_c + half * c, {c}), z = chunk.view(r * c, {c});
    if (to_chunk) {
      be.copy(a, z);
    } else {
      be.copy(z, a);
    }
  }
}

// This rank's chunk `half` of a [b, 2c, X...] tensor, copied out.
Tensor chunk_of(Backend& be, const Tensor& t, int half) {
  const std::int64_t c = t.dim(1) / 2;
  Tensor out = be.empty(with_length(t, c), t.dtype());
  copy_rows(be, t, half * c, out, 0, c);
  return out;
}

// The first `length` positions of every sequence of [b, S, X...], copied out.
Tensor prefix_of(Backend& be, const Tensor& whole, std::int64_t length) {
  Tensor out = be.empty(with_length(whole, length), whole.dtype());
  copy_rows(be, whole, 0, out, 0, length);
  return out;
}

}  // namespace

RopeTables context_rope(Backend& be, const RopeTables& whole, const ContextGroup& context) {
  if (context.size() == 1) return whole;
  const std::int64_t seq = whole.cos.dim(0), half = whole.cos.dim(1);
  RopeTables mine{be.empty({seq / context.size(), half}, whole.cos.dtype()),
                  be.empty({seq / context.size(), half}, whole.sin.dtype()), Tensor()};
  const auto pos = context.positions(seq);
  for (std::size_t i = 0; i < pos.size(); ++i) {
    be.copy(whole.cos.view(pos[i] * half, {half}), mine.cos.view(std::int64_t(i) * half, {half}));
    be.copy(whole.sin.view(pos[i] * half, {half}), mine.sin.view(std::int64_t(i) * half, {half}));
  }
  return mine;
}

void context_attention_forward(Backend& be, const ContextGroup& context, const Tensor& q,
                               const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, ContextSaved& saved, const Tensor& doc_start) {
  if (context.size() == 1) return be.attention_forward(q, k, v, out, lse, doc_start);
  const std::int64_t c = q.dim(1) / 2;
  saved.k_all = gather_sequence(be, context, k);  // [b, S, Hkv, hd]
  saved.v_all = gather_sequence(be, context, v);
  for (const int half : {0, 1}) {
    const std::int64_t end = (context.chunk(half) + 1) * c;  // the chunk sees keys [0, end)
    Tensor o = be.empty(with_length(q, c), q.dtype());
    Tensor l = be.empty({lse.dim(0), lse.dim(1), c}, lse.dtype());
    be.attention_forward(chunk_of(be, q, half), prefix_of(be, saved.k_all, end),
                         prefix_of(be, saved.v_all, end), o, l,
                         doc_start.defined() ? chunk_of(be, doc_start, half) : Tensor());
    copy_rows(be, o, 0, out, half * c, c);
    lse_chunk(be, lse, half, l, /*to_chunk=*/false);
  }
}

void context_attention_backward(Backend& be, const ContextGroup& context, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const ContextSaved& saved,
                                const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Tensor& doc_start) {
  if (context.size() == 1)
    return be.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, doc_start);
  const std::int64_t c = q.dim(1) / 2;
  Tensor dk_all = be.zeros(saved.k_all.shape(), k.dtype()),
         dv_all = be.zeros(saved.v_all.shape(), v.dtype());
  for (const int half : {0, 1}) {
    const std::int64_t end = (context.chunk(half) + 1) * c;
    const Tensor qc = chunk_of(be, q, half), kp = prefix_of(be, saved.k_all, end),
                 vp = prefix_of(be, saved.v_all, end);
    Tensor l = be.empty({lse.dim(0), lse.dim(1), c}, lse.dtype());
    lse_chunk(be, lse, half, l, /*to_chunk=*/true);
    Tensor dqc = be.empty(qc.shape(), q.dtype()), dkp = be.empty(kp.shape(), k.dtype()),
           dvp = be.empty(vp.shape(), v.dtype());
    be.attention_backward(chunk_of(be, dout, half), qc, kp, vp, chunk_of(be, out, half), l, dqc,
                          dkp, dvp,
                          doc_start.defined() ? chunk_of(be, doc_start, half) : Tensor());
    copy_rows(be, dqc, 0, dq, half * c, c);
    copy_rows(be, dkp, 0, dk_all, 0, end, /*add=*/true);
    copy_rows(be, dvp, 0, dv_all, 0, end, /*add=*/true);
  }
  // Each rank's keys were seen by every rank's queries: sum their gradients on the owner.
  for (const auto& [all, mine] : {std::pair{dk_all, dk}, std::pair{dv_all, dv}}) {
    Tensor parts = be.empty({all.numel()}, all.dtype());
    rearrange(be, context, parts, all, /*to_sequence=*/false);
    context.comm->reduce_scatter(parts, mine, ReduceOp::Sum).wait();
  }
}

}  // namespace carousel
