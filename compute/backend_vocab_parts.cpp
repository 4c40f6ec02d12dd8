// backend_vocab_parts.cpp — the Backend front end of the vocabulary-part ops (backend.h): the
// embedding and the cross-entropy of a vocabulary-parallel head, where each tensor rank holds a
// block of the vocabulary's rows. Arguments are checked here once for every backend, as in
// backend.cpp; bfloat16 is staged through float32 unless the backend takes it natively (the CUDA
// fast tier: the embedding forward and both cross-entropy parts, cuda/vocab_parts.h).
#include "compute/backend_internal.h"
#include "compute/bf16_staging.h"
#include "compute/op_check.h"

namespace carousel {

using detail::check_token_range;
using detail::from;
using detail::In;
using detail::OpCheck;
using detail::Out;
using detail::stage_bf16;

namespace {

// The part [first, first + rows) lies in [0, vocab); every id is in [0, vocab).
void check_part(Backend::Op op, Backend& be, const Tensor& ids, const char* ids_name,
                std::int64_t first, std::int64_t rows, std::int64_t vocab) {
  OpCheck(op, be).that(first >= 0 && rows >= 0 && first + rows <= vocab,
                       fmt::format("the part [{}, {}) is not inside the vocabulary [0, {})", first,
                                   first + rows, vocab));
  check_token_range(be, op_name(op), ids_name, ids, vocab);
}

void check_embedding_part(Backend::Op op, Backend& be, const Tensor& table, const char* table_name,
                          const Tensor& tokens, const Tensor& rows, const char* rows_name) {
  OpCheck check(op, be);
  check.floating(table_name, table).rank(table_name, table, 2, "[vocab part, embed]");
  check.tokens("tokens", tokens);
  Shape expected = tokens.shape();
  expected.push_back(table.dim(1));
  check.same_dtype(rows_name, rows, table_name, table)
      .shape(rows_name, rows, expected, "tokens shape + embed dim of the table");
}

void check_logits_part(Backend::Op op, Backend& be, const Tensor& logits, const Tensor& targets,
                       const Tensor& per_row, const char* per_row_name) {
  OpCheck check(op, be);
  check.floating("logits", logits).rank("logits", logits, 2, "[tokens, vocab part]");
  check.tokens("targets", targets)
      .shape("targets", targets, {logits.dim(0)}, from("one per row", "logits", logits));
  check.stats(per_row_name, per_row, "logits", logits)
      .shape(per_row_name, per_row, {logits.dim(0)}, from("one per row", "logits", logits));
}

}  // namespace

void Backend::embedding_part_forward(const Tensor& table, const Tensor& tokens, std::int64_t first,
                                     std::int64_t vocab, const Tensor& out) {
  const OpScope timed(*this, Op::embedding_part_forward);
  if (stage_bf16(*this, Op::embedding_part_forward, &Backend::embedding_part_forward, In{table},
                 tokens, first, vocab, Out{out}))
    return;
  check_embedding_part(Op::embedding_part_forward, *this, table, "table", tokens, out, "out");
  check_part(Op::embedding_part_forward, *this, tokens, "tokens", first, table.dim(0), vocab);
  issue(&Backend::do_embedding_part, table, tokens, first, out, /*backward=*/false);
}

void Backend::embedding_part_backward(const Tensor& dout, const Tensor& tokens, std::int64_t first,
                                      std::int64_t vocab, const Tensor& dtable) {
  const OpScope timed(*this, Op::embedding_part_backward);
  if (stage_bf16(*this, Op::embedding_part_backward, &Backend::embedding_part_backward, In{dout},
                 tokens, first, vocab, Out{dtable}))
    return;
  check_embedding_part(Op::embedding_part_backward, *this, dtable, "dtable", tokens, dout, "dout");
  check_part(Op::embedding_part_backward, *this, tokens, "tokens", first, dtable.dim(0), vocab);
  issue(&Backend::do_embedding_part, dtable, tokens, first, dout, /*backward=*/true);
}

void Backend::cross_entropy_part_forward(const Tensor& logits, const Tensor& targets,
                                         std::int64_t first, std::int64_t vocab, const Tensor& lse,
                                         const Tensor& target_logits) {
  const OpScope timed(*this, Op::cross_entropy_part_forward);
  if (stage_bf16(*this, Op::cross_entropy_part_forward, &Backend::cross_entropy_part_forward,
                 In{logits}, targets, first, vocab, Out{lse}, Out{target_logits}))
    return;
  const Op op = Op::cross_entropy_part_forward;
  check_logits_part(op, *this, logits, targets, lse, "lse");
  check_logits_part(op, *this, logits, targets, target_logits, "target_logits");
  check_part(op, *this, targets, "targets", first, logits.dim(1), vocab);
  issue(&Backend::do_cross_entropy_part_forward, logits, targets, first, lse, target_logits);
}

void Backend::cross_entropy_combine(const Tensor& lse_parts, const Tensor& target_logit_parts,
                                    const Tensor& lse, const Tensor& losses) {
  const OpScope timed(*this, Op::cross_entropy_combine);
  OpCheck check(Op::cross_entropy_combine, *this);
  check.floating("lse_parts", lse_parts).rank("lse_parts", lse_parts, 2, "[parts, tokens]");
  check.like("target_logit_parts", target_logit_parts, "lse_parts", lse_parts);
  const Shape rows = {lse_parts.dim(1)};
  check.same_dtype("lse", lse, "lse_parts", lse_parts)
      .shape("lse", lse, rows, from("one per token", "lse_parts", lse_parts));
  check.same_dtype("losses", losses, "lse_parts", lse_parts)
      .shape("losses", losses, rows, from("one per token", "lse_parts", lse_parts));
  issue(&Backend::do_cross_entropy_combine, lse_parts, target_logit_parts, lse, losses);
}

void Backend::cross_entropy_part_backward(const Tensor& logits, const Tensor& targets,
                                          std::int64_t first, std::int64_t vocab, const Tensor& lse,
                                          double dloss, const Tensor& dlogits) {
  const OpScope timed(*this, Op::cross_entropy_part_backward);
  if (stage_bf16(*this, Op::cross_entropy_part_backward, &Backend::cross_entropy_part_backward,
                 In{logits}, targets, first, vocab, In{lse}, dloss, Out{dlogits}))
    return;
  const Op op = Op::cross_entropy_part_backward;
  check_logits_part(op, *this, logits, targets, lse, "lse");
  OpCheck(op, *this).like("dlogits", dlogits, "logits", logits);
  check_part(op, *this, targets, "targets", first, logits.dim(1), vocab);
  issue(&Backend::do_cross_entropy_part_backward, logits, targets, first, lse, dloss, dlogits);
}

}  // namespace carousel
