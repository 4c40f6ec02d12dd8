// all_reduce_perf — recv = reduction of every rank's send; busbw = algbw 2(n-1)/n.
#include "benchmarks/collectives/perf.h"

int main(int argc, char** argv) {
  using namespace carousel;
  perf::CollectiveTest t;
  t.name = "all_reduce";
  t.reduces = true;
  t.counts = [](std::int64_t elems, std::int64_t, int, std::int64_t& send, std::int64_t& recv,
                std::int64_t& count) { send = recv = count = elems; };
  t.busbw_factor = [](int n) { return 2.0 * (n - 1) / n; };
  t.in_place_views = [](const Tensor& buf, int, std::int64_t) { return std::pair{buf, buf}; };
  t.run = [](Communicator& c, const Tensor& send, const Tensor& recv, int, ReduceOp op) {
    return c.all_reduce(send, recv, op);
  };
  t.source = [](int, int, std::int64_t i, std::int64_t, int) {
    return perf::Source{perf::Source::AllRanks, 0, i};
  };
  return perf::run_perf(t, argc, argv);
}
