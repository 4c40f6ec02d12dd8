// expert_parallel.cpp — the counts exchange, the rows' all-to-all and the regrouping by expert
// (expert_parallel.h).
#include "models/parallel/expert_parallel.h"

#include <numeric>

#include "compute/error.h"

namespace carousel {

namespace {

// recv [sum recv_counts, C] = from each rank s, its block for this rank, in rank order; this
// rank's block of `send` [sum send_counts, C] goes to each rank d (its own block: a copy).
Tensor exchange(Backend& be, const ExpertGroup& group, const Tensor& send,
                const std::vector<std::int64_t>& send_counts,
                const std::vector<std::int64_t>& recv_counts) {
  const std::int64_t C = send.cols();
  const std::int64_t total =
      std::accumulate(recv_counts.begin(), recv_counts.end(), std::int64_t(0));
  Tensor recv = be.empty({total, C}, send.dtype());
  Communicator& comm = *group.comm;
  const int me = comm.rank();
  std::int64_t moved = 0;  // rows sent and received
  std::int64_t send_at = 0, recv_at = 0;
  std::vector<std::int64_t> send_first, recv_first;
  for (int r = 0; r < comm.size(); ++r) {
    send_first.push_back(send_at);
    recv_first.push_back(recv_at);
    send_at += send_counts[std::size_t(r)];
    recv_at += recv_counts[std::size_t(r)];
  }
  CAROUSEL_ASSERT(send_at == send.rows(), "{} rows to send, the counts say {}", send.rows(),
                  send_at);
  const auto rows = [C](const Tensor& t, std::int64_t first, std::int64_t n) {
    return t.view(first * C, {n, C});
  };
  comm.group_start();
  for (int r = 0; r < comm.size(); ++r) {
    const std::int64_t out = send_counts[std::size_t(r)], in = recv_counts[std::size_t(r)];
    if (r == me) {
      CAROUSEL_ASSERT(out == in, "rank {} keeps {} rows of its own but receives {}", me, out, in);
      if (out > 0)
        be.copy(rows(send, send_first[std::size_t(r)], out),
                rows(recv, recv_first[std::size_t(r)], in));
      continue;
    }
    if (out > 0) comm.send(rows(send, send_first[std::size_t(r)], out), r);
    if (in > 0) comm.recv(rows(recv, recv_first[std::size_t(r)], in), r);
    moved += out + in;
  }
  group.wait(comm.group_end(), moved * C * std::int64_t(dtype_size(send.dtype())));
  return recv;
}

// out [n, C] = rows of `in` picked by `index` [n] (int32).
Tensor pick_rows(Backend& be, const Tensor& in, const Tensor& index) {
  Tensor out = be.empty({index.numel(), in.cols()}, in.dtype());
  if (index.numel() > 0) be.embedding_forward(in, index, out);
  return out;
}

}  // namespace

ExpertDispatch plan_dispatch(Backend& be, const ExpertGroup& group,
                             const std::vector<std::int64_t>& first) {
  ExpertDispatch d;
  const int E = group.size();
  const std::int64_t X = std::int64_t(first.size()) - 1, local = X / E;
  if (E == 1) {
    d.first = first;
    return d;
  }
  CAROUSEL_ASSERT(X % E == 0, "{} experts over {} expert ranks", X, E);
  std::vector<std::int64_t> mine(static_cast<std::size_t>(X));
  for (std::int64_t e = 0; e < X; ++e)
    mine[std::size_t(e)] = first[std::size_t(e + 1)] - first[std::size_t(e)];
  Tensor all = be.empty({X * E}, DType::I64);
  group.comm->all_gather(be.from_host(mine, {X}), all).wait();
  const std::vector<std::int64_t> counts = be.to_host<std::int64_t>(all);  // [E, X]
  const int me = group.rank();
  const auto count = [&](int rank, std::int64_t expert) {
    return counts[std::size_t(rank * X + expert)];
  };
  for (int r = 0; r < E; ++r) {
    std::int64_t out = 0, in = 0;
    for (std::int64_t e = 0; e < local; ++e) {
      out += count(me, r * local + e);
      in += count(r, me * local + e);
    }
    d.send.push_back(out);
    d.recv.push_back(in);
  }
  // Received rows come rank by rank, each rank's expert by expert; regrouped, expert by expert
  // and within an expert rank by rank.
  std::vector<std::int64_t> block(
      static_cast<std::size_t>(E * local));  // received offset of (r, e)
  std::int64_t at = 0;
  for (int r = 0; r < E; ++r) {
    for (std::int64_t e = 0; e < local; ++e) {
      block[std::size_t(r * local + e)] = at;
      at += count(r, me * local + e);
    }
  }
  std::vector<std::int32_t> order, inverse(static_cast<std::size_t>(at));
  d.first.push_back(0);
  for (std::int64_t e = 0; e < local; ++e) {
    for (int r = 0; r < E; ++r) {
      for (std::int64_t i = 0; i < count(r, me * local + e); ++i) {
        const std::int64_t received = block[std::size_t(r * local + e)] + i;
        inverse[std::size_t(received)] = std::int32_t(order.size());
        order.push_back(std::int32_t(received));
      }
    }
    d.first.push_back(std::int64_t(order.size()));
  }
  d.order = be.from_host(order, {std::int64_t(order.size())});
  d.inverse = be.from_host(inverse, {std::int64_t(inverse.size())});
  return d;
}

Tensor to_experts(Backend& be, const ExpertGroup& group, const ExpertDispatch& d,
                  const Tensor& rows) {
  if (group.size() == 1) return rows;
  return pick_rows(be, exchange(be, group, rows, d.send, d.recv), d.order);
}

Tensor from_experts(Backend& be, const ExpertGroup& group, const ExpertDispatch& d,
                    const Tensor& rows) {
  if (group.size() == 1) return rows;
  return exchange(be, group, pick_rows(be, rows, d.inverse), d.recv, d.send);
}

}  // namespace carousel
