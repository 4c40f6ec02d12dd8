// perf.h — the shared driver of the nccl-tests-style collective benchmarks.
//
// Each *_perf binary describes one collective (a CollectiveTest, one small file each) and calls
// run_perf(). The driver is split by concern:
//   perf_options.*  the command line (nccl-tests 2.19 flags) and its checks;
//   perf_types.*    the element types and reduce ops of -d/-o, inputs, expected values, checks;
//   perf_report.*   the nccl-tests table, header and footer on stdout, and the -J JSON file;
//   perf.cpp        ranks, devices and communicators, and the timed sweep.
// docs/collectives.md has the flag table, the dtype/op matrix and the JSON fields.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "collectives/communicator.h"

namespace carousel::perf {

// Where element i of a rank's receive buffer comes from after the collective.
struct Source {
  enum Kind {
    Nothing,   // left as it was (zero): sendrecv with one rank
    OneRank,   // element `index` of rank `rank`'s send buffer
    AllRanks,  // the reduction over every rank of element `index` of their send buffers
  } kind = Nothing;
  int rank = 0;
  std::int64_t index = 0;
};

struct CollectiveTest {
  std::string name;  // "all_gather"
  bool reduces = false, rooted = false, has_in_place = true;
  // Send and receive element counts, and the "count" column, for `elems` = size / element size
  // (`elt` bytes each).
  std::function<void(std::int64_t elems, std::int64_t elt, int ranks, std::int64_t& send,
                     std::int64_t& recv, std::int64_t& count)>
      counts;
  double (*busbw_factor)(int ranks);
  // In place: the send and recv views of one buffer of max(send, recv) elements, as NCCL defines.
  std::function<std::pair<Tensor, Tensor>(const Tensor& buffer, int rank, std::int64_t count)>
      in_place_views;
  std::function<Event(Communicator&, const Tensor& send, const Tensor& recv, int root, ReduceOp op)>
      run;
  // The source of element i of `rank`'s recv buffer (count: the "count" column).
  std::function<Source(int rank, int ranks, std::int64_t i, std::int64_t count, int root)> source;
};

// Elements per rank of a collective that splits `elems` over `ranks` (all_gather,
// reduce_scatter), rounded down to whole 16-byte units as nccl-tests does, so every rank's piece
// starts aligned: -b 1000 with 4 float ranks is 60 elements each (960 bytes), not 62.
inline std::int64_t aligned_per_rank(std::int64_t elems, std::int64_t elt, int ranks) {
  const std::int64_t unit = elt < 16 ? 16 / elt : 1;
  return elems / ranks / unit * unit;
}

int run_perf(const CollectiveTest& test, int argc, char** argv);

}  // namespace carousel::perf
