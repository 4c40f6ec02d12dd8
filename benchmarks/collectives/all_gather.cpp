// all_gather_perf — recv [n x count] = every rank's send [count]; busbw = algbw (n-1)/n.
#include "benchmarks/collectives/perf.h"

int main(int argc, char** argv) {
  using namespace carousel;
  perf::CollectiveTest t;
  t.name = "all_gather";
  t.counts = [](std::int64_t elems, std::int64_t elt, int n, std::int64_t& send,
                std::int64_t& recv, std::int64_t& count) {
    count = perf::aligned_per_rank(elems, elt, n);
    send = count;
    recv = count * n;
  };
  t.busbw_factor = [](int n) { return double(n - 1) / n; };
  t.in_place_views = [](const Tensor& buf, int rank, std::int64_t count) {
    return std::pair{buf.view(rank * count, {count}), buf};
  };
  t.run = [](Communicator& c, const Tensor& send, const Tensor& recv, int, ReduceOp) {
    return c.all_gather(send, recv);
  };
  t.source = [](int, int, std::int64_t i, std::int64_t count, int) {
    return perf::Source{perf::Source::OneRank, int(i / count), i % count};
  };
  return perf::run_perf(t, argc, argv);
}
