// test_multiproc.cpp — the MPI communicator, run as 4 processes by mpirun (label multiproc): the
// exact collective checks of the threaded test on sub-communicators of 1..4 ranks, the
// hand-worked table of every element type and reduce op on 3 of them, rings,
// splits, the mismatch errors, and float results that must be bitwise equal to the same
// collectives run by the local communicator's threads inside each process.
#include <gtest/gtest.h>

#include <cstring>

#include "collectives/local_communicator.h"
#include "collectives/mpi_communicator.h"
#include "compute/cpu_backend.h"
#include "tests/support/collective_checks.h"
#include "tests/support/reduction_table.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

MpiRuntime* runtime = nullptr;  // set by main

// The first n ranks of the world as one communicator (nullptr on the others).
std::unique_ptr<Communicator> first_ranks(Communicator& world, int n) {
  return world.split(world.rank() < n ? 0 : -1, world.rank());
}

TEST(Multiproc, CollectivesAreExactOnOneToFourProcesses) {
  auto world = runtime->world(60.0);
  CpuBackend be(world->rank());
  for (int n = 1; n <= world->size(); ++n) {
    auto comm = first_ranks(*world, n);
    if (!comm) continue;
    ASSERT_EQ(comm->size(), n);
    for (std::int64_t count : {1, 7, 16, 1000}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << n << " ranks, count " << count
                                          << (in_place ? ", in place" : ", out of place"));
        testing::check_collectives_exact(*comm, be, count, in_place);
      }
    }
    if (n > 1) testing::check_grouped_rings(*comm, be);
  }
}

TEST(Multiproc, EveryDtypeAndOpMatchesTheHandWorkedTable) {
  auto world = runtime->world(60.0);
  ASSERT_GE(world->size(), 3) << "run under mpirun with at least 3 processes";
  CpuBackend be(world->rank());
  auto comm = first_ranks(*world, 3);
  if (comm) testing::check_reduction_table(*comm, be);
}

TEST(Multiproc, FloatResultsAreBitwiseThoseOfTheThreadedRun) {
  auto world = runtime->world(60.0);
  CpuBackend be(world->rank());
  const int n = world->size(), me = world->rank();
  for (std::int64_t count : {1, 7, 1000, 100003}) {
    for (bool in_place : {false, true}) {
      const auto mpi = testing::float_collective_results(*world, be, count, in_place);
      // The same collectives with this process's threads as the n ranks; keep this rank's.
      std::vector<float> threads;
      LocalWorld local(n, 60.0);
      run_ranks(n, [&](int r) {
        CpuBackend rank_be(r);
        auto comm = local.communicator(r);
        auto out = testing::float_collective_results(*comm, rank_be, count, in_place);
        if (r == me) threads = std::move(out);
      });
      ASSERT_EQ(mpi.size(), threads.size());
      EXPECT_EQ(std::memcmp(mpi.data(), threads.data(), mpi.size() * sizeof(float)), 0)
          << "count " << count << (in_place ? " in place" : " out of place");
    }
  }
}

TEST(Multiproc, SplitOrdersByKeyAndNests) {
  auto world = runtime->world(60.0);
  CpuBackend be(world->rank());
  const int r = world->rank(), n = world->size();
  auto sub = world->split(r % 2, -r);  // even / odd ranks, reversed by the key
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->size(), (n + 1 - r % 2) / 2);
  EXPECT_EQ(sub->rank(), sub->size() - 1 - r / 2);
  EXPECT_EQ(sub->name(), "world/split(" + std::to_string(r % 2) + ")");
  Tensor t = be.from_host(std::vector<std::int32_t>{r}, {1});
  sub->all_reduce(t, t, ReduceOp::Sum).wait();
  std::int32_t expected = 0;
  for (int q = r % 2; q < n; q += 2) expected += q;
  EXPECT_EQ(be.to_host<std::int32_t>(t)[0], expected);
  auto none = world->split(-1, 0);
  EXPECT_FALSE(none);
}

TEST(Multiproc, MismatchedCollectivesNameRanksSequenceAndBothSignatures) {
  auto world = runtime->world(60.0);
  CpuBackend be(world->rank());
  Tensor t = be.zeros({8}, DType::I32);
  world->barrier().wait();  // sequence 0 matches
  const std::string error = testing::error_of([&] {
    if (world->rank() == 0) {
      world->all_reduce(t, t, ReduceOp::Sum).wait();
    } else {
      world->broadcast(t, t, 0).wait();
    }
  });
  EXPECT_NE(error.find("collective mismatch on communicator 'world' at sequence 1"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find(world->rank() == 0 ? "broadcast(count=8, int32, root=0)"
                                          : "all_reduce(count=8, int32, sum)"),
            std::string::npos)
      << error;
}

TEST(Multiproc, ReceiveOfTheWrongSizeIsAnError) {
  auto world = runtime->world(60.0);
  CpuBackend be(world->rank());
  if (world->size() < 2 || world->rank() > 1) return;
  const std::string error = testing::error_of([&] {
    if (world->rank() == 0)
      world->send(be.zeros({4}, DType::I32), 1).wait();
    else
      world->recv(be.zeros({5}, DType::I32), 0).wait();
  });
  if (world->rank() == 1) {
    EXPECT_NE(error.find("send/recv mismatch on communicator 'world': rank 1 receives #0 into "
                         "int32[5] on cpu:1 but rank 0 sent 4 elements"),
              std::string::npos)
        << error;
  } else {
    EXPECT_EQ(error, "<no error>");
  }
}

// Non-zero ranks print only their failures, prefixed with the rank, so the log stays readable.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::printf("[rank %d] %s:%d: %s\n", rank_, result.file_name() ? result.file_name() : "?",
                  result.line_number(), result.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace carousel

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  carousel::MpiRuntime mpi;
  carousel::runtime = &mpi;
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new carousel::RankFailurePrinter(mpi.rank()));
  }
  const int failed = RUN_ALL_TESTS();
  return failed;
}
