// broadcast_perf — recv = root's send on every rank; busbw = algbw.
#include "benchmarks/collectives/perf.h"

int main(int argc, char** argv) {
  using namespace carousel;
  perf::CollectiveTest t;
  t.name = "broadcast";
  t.rooted = true;
  t.counts = [](std::int64_t elems, std::int64_t, int, std::int64_t& send, std::int64_t& recv,
                std::int64_t& count) { send = recv = count = elems; };
  t.busbw_factor = [](int) { return 1.0; };
  t.in_place_views = [](const Tensor& buf, int, std::int64_t) { return std::pair{buf, buf}; };
  t.run = [](Communicator& c, const Tensor& send, const Tensor& recv, int root, ReduceOp) {
    return c.broadcast(send, recv, root);
  };
  t.source = [](int, int, std::int64_t i, std::int64_t, int root) {
    return perf::Source{perf::Source::OneRank, root, i};
  };
  return perf::run_perf(t, argc, argv);
}
