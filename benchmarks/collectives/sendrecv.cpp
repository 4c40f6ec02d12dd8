// sendrecv_perf — the pipeline ring: every rank sends to rank+1 and receives from rank-1 in one
// group (activation hand-off between stages); busbw = algbw. Size = one message.
#include "benchmarks/collectives/perf.h"

int main(int argc, char** argv) {
  using namespace carousel;
  perf::CollectiveTest t;
  t.name = "sendrecv";
  t.has_in_place = false;
  t.counts = [](std::int64_t elems, std::int64_t, int, std::int64_t& send, std::int64_t& recv,
                std::int64_t& count) { send = recv = count = elems; };
  t.busbw_factor = [](int) { return 1.0; };
  t.run = [](Communicator& c, const Tensor& send, const Tensor& recv, int, ReduceOp) {
    const int n = c.size(), r = c.rank();
    c.group_start();
    if (n > 1) {
      c.send(send, (r + 1) % n);
      c.recv(recv, (r + n - 1) % n);
    }
    return c.group_end();
  };
  t.source = [](int rank, int n, std::int64_t i, std::int64_t, int) {
    if (n == 1) return perf::Source{};  // nothing moves: recv stays zero
    return perf::Source{perf::Source::OneRank, (rank + n - 1) % n, i};
  };
  return perf::run_perf(t, argc, argv);
}
