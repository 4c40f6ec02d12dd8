// perf.h — the shared driver of the nccl-tests-style collective benchmarks.
//
// Each *_perf binary describes one collective (a CollectiveTest, one small file each) and calls
// run_perf(). Flags, table and busbw formulas follow NVIDIA/nccl-tests so numbers read the same:
//   -b/-e  smallest/largest size in bytes (K, M, G suffixes), -f multiplicative step,
//   -g     ranks (simulated CPU devices of the local backend), -n timed iterations,
//   -w     warm-up iterations, -c check results (1) or not (0), -d float|double|int32|all,
//   -o     sum|avg, -r root, -T timeout seconds, -J JSON output file, --backend local.
// Time is per operation, averaged over ranks; algbw = size / time; busbw = algbw x factor.
// A bad flag value is one line on stderr (flag, value, what is valid) and exit status 2.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "collectives/communicator.h"

namespace carousel::perf {

// input(rank, j): the value rank puts in element j of its send buffer.
using Input = std::function<double(int rank, std::int64_t j)>;

struct CollectiveTest {
  std::string name;  // "all_gather"
  bool reduces = false, rooted = false, has_in_place = true;
  // Send and receive element counts, and the "count" column, for `elems` = size / element size.
  std::function<void(std::int64_t elems, int ranks, std::int64_t& send, std::int64_t& recv,
                     std::int64_t& count)>
      counts;
  double (*busbw_factor)(int ranks);
  // In place: the send and recv views of one buffer of max(send, recv) elements, as NCCL defines.
  std::function<std::pair<Tensor, Tensor>(const Tensor& buffer, int rank, std::int64_t count)>
      in_place_views;
  std::function<Event(Communicator&, const Tensor& send, const Tensor& recv, int root, ReduceOp op)>
      run;
  // Expected element i of `rank`'s recv buffer.
  std::function<double(int rank, int ranks, std::int64_t i, std::int64_t count, int root,
                       ReduceOp op, const Input& input)>
      expected;
};

int run_perf(const CollectiveTest& test, int argc, char** argv);

// Reduction over ranks of input(q, j), for the expected values of reducing collectives.
double reduce_over_ranks(int ranks, std::int64_t j, ReduceOp op, const Input& input);

}  // namespace carousel::perf
