// reduce_scatter_perf — recv [count] = reduction of every rank's send slice; busbw = algbw (n-1)/n.
#include "benchmarks/collectives/perf.h"

int main(int argc, char** argv) {
  using namespace carousel;
  perf::CollectiveTest t;
  t.name = "reduce_scatter";
  t.reduces = true;
  t.counts = [](std::int64_t elems, std::int64_t elt, int n, std::int64_t& send,
                std::int64_t& recv, std::int64_t& count) {
    count = perf::aligned_per_rank(elems, elt, n);
    send = count * n;
    recv = count;
  };
  t.busbw_factor = [](int n) { return double(n - 1) / n; };
  t.in_place_views = [](const Tensor& buf, int rank, std::int64_t count) {
    return std::pair{buf, buf.view(rank * count, {count})};
  };
  t.run = [](Communicator& c, const Tensor& send, const Tensor& recv, int, ReduceOp op) {
    return c.reduce_scatter(send, recv, op);
  };
  t.source = [](int rank, int, std::int64_t i, std::int64_t count, int) {
    return perf::Source{perf::Source::AllRanks, 0, rank * count + i};
  };
  return perf::run_perf(t, argc, argv);
}
