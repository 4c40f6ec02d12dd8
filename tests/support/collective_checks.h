// collective_checks.h — the collective checks every Communicator must pass, written once and run
// by the threaded (test_collectives), multi-process (test_multiproc) and NCCL (test_nccl) tests.
// Each function is called by every rank of `comm` at the same time, with the rank's backend.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "compute/backend.h"

namespace carousel::testing {

// Value of element i of rank r's input: distinct per rank and position, exact in float32.
inline std::int32_t collective_input(int r, std::int64_t i) {
  return std::int32_t(1000 * r + i % 997);
}

// all_gather, reduce_scatter (sum), all_reduce (int32 sum, float32 avg), broadcast and barrier
// on rank-dependent integers, checked exactly. `count` is the per-rank count (all_gather send,
// reduce_scatter recv); in_place uses the rank's slice / the send buffer as the output.
inline void check_collectives_exact(Communicator& comm, Backend& be, std::int64_t count,
                                    bool in_place) {
  const int n = comm.size(), r = comm.rank();
  std::vector<std::int32_t> mine(count), full(count * n);
  for (std::int64_t i = 0; i < count; ++i) mine[i] = collective_input(r, i);
  for (std::int64_t i = 0; i < count * n; ++i) full[i] = collective_input(r, i);

  // all_gather: block q of the result is rank q's input.
  Tensor gathered = be.zeros({count * n}, DType::I32);
  Tensor send = in_place ? gathered.view(r * count, {count}) : be.empty({count}, DType::I32);
  be.upload(mine.data(), send);
  comm.all_gather(send, gathered).wait();
  const auto g = be.to_host<std::int32_t>(gathered);
  for (int q = 0; q < n; ++q)
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(g[q * count + i], collective_input(q, i));

  // reduce_scatter (sum): element i of rank r = sum over q of rank q's input[r*count + i].
  Tensor rs_send = be.from_host(full, {count * n});
  Tensor rs_recv = in_place ? rs_send.view(r * count, {count}) : be.empty({count}, DType::I32);
  comm.reduce_scatter(rs_send, rs_recv, ReduceOp::Sum).wait();
  const auto rs = be.to_host<std::int32_t>(rs_recv);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int32_t expected = 0;
    for (int q = 0; q < n; ++q) expected += collective_input(q, r * count + i);
    ASSERT_EQ(rs[i], expected) << "rank " << r << " element " << i;
  }

  // all_reduce (sum, int32) and (avg, float32 holding integers: exact).
  Tensor ar = be.from_host(mine, {count});
  Tensor ar_out = in_place ? ar : be.empty({count}, DType::I32);
  comm.all_reduce(ar, ar_out, ReduceOp::Sum).wait();
  std::vector<float> f(mine.begin(), mine.end());
  Tensor af = be.from_host(f, {count});
  Tensor af_out = in_place ? af : be.empty({count});
  comm.all_reduce(af, af_out, ReduceOp::Avg).wait();
  const auto s = be.to_host<std::int32_t>(ar_out);
  const auto a = be.to_host<float>(af_out);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int32_t sum = 0;
    for (int q = 0; q < n; ++q) sum += collective_input(q, i);
    ASSERT_EQ(s[i], sum);
    ASSERT_EQ(a[i], float(sum) / float(n));
  }

  // broadcast from the last rank.
  Tensor b = be.from_host(mine, {count});
  Tensor b_out = in_place ? b : be.zeros({count}, DType::I32);
  comm.broadcast(b, b_out, n - 1).wait();
  const auto bc = be.to_host<std::int32_t>(b_out);
  for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(bc[i], collective_input(n - 1, i));
  comm.barrier().wait();
}

// Every rank sends to both neighbours before receiving, in one group: only grouping lets this
// complete. Needs at least 2 ranks.
inline void check_grouped_rings(Communicator& comm, Backend& be) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor to_next = be.from_host(std::vector<std::int32_t>(5, 10 * r), {5});
  Tensor to_prev = be.from_host(std::vector<std::int32_t>(5, 10 * r + 1), {5});
  Tensor from_prev = be.zeros({5}, DType::I32), from_next = be.zeros({5}, DType::I32);
  comm.group_start();
  comm.send(to_next, next);
  comm.send(to_prev, prev);
  comm.recv(from_prev, prev);
  comm.recv(from_next, next);
  comm.group_end().wait();
  EXPECT_EQ(be.to_host<std::int32_t>(from_prev), std::vector<std::int32_t>(5, 10 * prev));
  EXPECT_EQ(be.to_host<std::int32_t>(from_next), std::vector<std::int32_t>(5, 10 * next + 1));
}

// The float32 outputs of reduce_scatter (sum), all_reduce (sum, avg), all_gather and broadcast
// of random, rank-dependent inputs, concatenated: rounding depends on the order of the sums, so
// two communicators that return the same bytes here reduce in the same order.
inline std::vector<float> float_collective_results(Communicator& comm, Backend& be,
                                                   std::int64_t count, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  std::vector<float> input(count * n);
  std::uint64_t state = 0x9E3779B97F4A7C15ull * std::uint64_t(r + 1);
  for (float& x : input) {  // xorshift: the same numbers on every platform
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    x = float(double(state % 2000001) / 1000000.0 - 1.0) * 3.7f;
  }
  std::vector<float> out;
  auto append = [&](const Tensor& t) {
    const auto v = be.to_host<float>(t);
    out.insert(out.end(), v.begin(), v.end());
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    Tensor rs_send = be.from_host(input, {count * n});
    Tensor rs_recv = in_place ? rs_send.view(r * count, {count}) : be.empty({count});
    comm.reduce_scatter(rs_send, rs_recv, op).wait();
    append(rs_recv);
    Tensor ar = be.from_host(input, {count * n});
    Tensor ar_out = in_place ? ar : be.empty({count * n});
    comm.all_reduce(ar, ar_out, op).wait();
    append(ar_out);
  }
  Tensor gathered = be.zeros({count * n});
  Tensor send = in_place ? gathered.view(r * count, {count}) : be.empty({count});
  be.upload(input.data(), send);
  comm.all_gather(send, gathered).wait();
  append(gathered);
  Tensor b = be.from_host(input, {count * n});
  comm.broadcast(b, b, 0).wait();
  append(b);
  return out;
}

}  // namespace carousel::testing
