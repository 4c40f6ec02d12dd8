// test_collectives.cpp — the local communicator: every collective over 1..8 ranks with counts
// that do and do not divide, in and out of place, checked exactly on rank-dependent integers;
// every element type with every reduce op against a hand-worked table (reduction_table.h);
// the float16 conversions; split communicators; send/recv rings; the mismatch and timeout
// errors; and Event::order_before's choice between a device-side and a host wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <thread>

#include "collectives/local_communicator.h"
#include "collectives/wait_timer.h"
#include "compute/cpu_backend.h"
#include "compute/float16.h"
#include "tests/support/collective_checks.h"
#include "tests/support/reduction_table.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

struct Case {
  int ranks;
  std::int64_t count;  // per-rank count (all_gather send, reduce_scatter recv)
  bool in_place;
};

class Collectives : public ::testing::TestWithParam<Case> {};

TEST_P(Collectives, AllGatherReduceScatterAllReduceBroadcastAreExact) {
  const auto [n, count, in_place] = GetParam();
  LocalWorld world(n, 30.0);
  run_ranks(n, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    testing::check_collectives_exact(*comm, be, count, in_place);
  });
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int n : {1, 2, 3, 4, 8})
    for (std::int64_t count : {1, 7, 16, 1000})
      for (bool in_place : {false, true}) out.push_back({n, count, in_place});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Local, Collectives, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::to_string(info.param.ranks) + "ranks_count" + std::to_string(info.param.count) +
         (info.param.in_place ? "_inplace" : "_outofplace");
});

// Host memory posing as a GPU's: the CPU "cannot touch" it, so the communicator must go through
// copy_to_host / copy_from_host, as it does with CUDA tensors (counted, to prove it did).
class DeviceLikeAllocator final : public DeviceAllocator {
 public:
  DeviceLikeAllocator(int index, std::atomic<int>& copies)
      : DeviceAllocator(DeviceKind::CPU, index, 0), copies_(copies) {}
  bool host_accessible() const override { return false; }
  void copy_to_host(void* host, const void* src, std::size_t bytes) const override {
    ++copies_;
    std::memcpy(host, src, bytes);
  }
  void copy_from_host(void* dst, const void* host, std::size_t bytes) const override {
    ++copies_;
    std::memcpy(dst, host, bytes);
  }

 protected:
  void* raw_allocate(std::size_t bytes) override {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void raw_free(void* p) override { std::free(p); }

 private:
  std::atomic<int>& copies_;
};

// Even ranks on device-like memory, odd ranks on host memory: every collective and the rings
// stay exact, through host copies where needed.
TEST(Collectives, DeviceMemoryMovesThroughHostCopies) {
  for (int n : {1, 2, 3, 4}) {
    std::atomic<int> copies{0};
    LocalWorld world(n, 30.0);
    run_ranks(n, [&](int r) {
      std::unique_ptr<CpuBackend> be =
          r % 2 == 0
              ? std::make_unique<CpuBackend>(std::make_unique<DeviceLikeAllocator>(r, copies))
              : std::make_unique<CpuBackend>(r);
      auto comm = world.communicator(r);
      for (std::int64_t count : {1, 7, 1000}) {
        for (bool in_place : {false, true})
          testing::check_collectives_exact(*comm, *be, count, in_place);
      }
      if (n > 1) testing::check_grouped_rings(*comm, *be);
    });
    EXPECT_GT(copies.load(), 0) << n << " ranks";
  }
}

TEST(Collectives, AsynchronousOperationsCompleteInIssueOrder) {
  LocalWorld world(3);
  run_ranks(3, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    std::vector<Tensor> outs;
    std::vector<Event> events;
    for (int k = 0; k < 10; ++k) {  // ten all_reduces in flight at once
      Tensor t = be.from_host(std::vector<std::int32_t>{r + k}, {1});
      outs.push_back(t);
      events.push_back(comm->all_reduce(t, t, ReduceOp::Sum));
    }
    for (int k = 0; k < 10; ++k) {
      events[k].wait();
      ASSERT_EQ(be.to_host<std::int32_t>(outs[k])[0], 3 + 3 * k);  // (0+1+2) + 3k
    }
  });
}

// Event::order_before, the one decision between a device-side wait (NCCL: the consumer's
// stream waits for a CUDA event) and a host wait (host communicators, or no device queue).
TEST(EventOrder, WithoutADeviceOrderTheHostWaitsForCompletion) {
  Event op;
  std::atomic<bool> completed{false};
  std::thread finisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    completed = true;
    op.complete();
  });
  int queue = 0;
  op.order_before(&queue);  // a device queue, but the operation offers no device order
  EXPECT_TRUE(completed.load());
  EXPECT_TRUE(op.ready());
  finisher.join();
}

TEST(EventOrder, ADeviceOrderIsEnqueuedWithoutBlockingTheHost) {
  // The operation completes a second from now (so a host wait would end, not hang, the test).
  Event op;
  std::vector<void*> ordered;
  op.set_device_order([&](void* queue) { ordered.push_back(queue); });
  std::thread finisher([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    op.complete();
  });
  int queue = 0;
  op.order_before(&queue);
  EXPECT_FALSE(op.ready()) << "the host waited although the operation orders device queues";
  ASSERT_EQ(ordered.size(), 1u);
  EXPECT_EQ(ordered[0], &queue);

  // No device queue (the host itself, e.g. a profiled step): the host waits.
  op.order_before(nullptr);
  EXPECT_TRUE(op.ready());
  EXPECT_EQ(ordered.size(), 1u);
  // Complete already: nothing left to order (the implementation's event may be gone).
  op.order_before(&queue);
  EXPECT_EQ(ordered.size(), 1u);
  finisher.join();
}

TEST(EventOrder, AReportedErrorIsRethrownOnEitherPath) {
  Event failed;
  bool device_ordered = false;
  failed.set_device_order([&](void*) { device_ordered = true; });
  failed.complete(std::make_exception_ptr(Error("rank 1: all_gather #3 timed out")));
  int queue = 0;
  EXPECT_THROW(failed.order_before(&queue), Error);
  EXPECT_FALSE(device_ordered);  // no device wait queued behind a failed operation
  EXPECT_THROW(failed.order_before(nullptr), Error);
  EXPECT_THROW(failed.wait(), Error);
}

TEST(EventOrder, AnErrorReportedFirstIsNotErasedByALaterCompletion) {
  // NCCL: the watchdog fails a hung operation and aborts the communicator; the stream then
  // reaches the operation's host function, which completes the same Event again, successfully.
  // An operation only ordered on the device is waited for at step end, after both: the error
  // must still be there (and a completion time must not move).
  Event op;
  op.set_device_order([](void*) {});
  int queue = 0;
  op.order_before(&queue);  // not done yet: a device-side wait, no host block
  op.complete(std::make_exception_ptr(Error("rank 0: send/recv group #7 timed out")));
  const auto failed_at = op.completed_at();
  op.complete();  // the stream's own completion, after the abort
  EXPECT_TRUE(op.ready());
  EXPECT_EQ(op.completed_at(), failed_at);
  EXPECT_THROW(op.wait(), Error);
  EXPECT_THROW(op.order_before(&queue), Error);
}

TEST(Collectives, ReduceScatterCountNotDivisibleIsAClearError) {
  LocalWorld world(3);
  auto comm = world.communicator(0);
  CpuBackend be;
  Tensor send = be.zeros({10}, DType::I32), recv = be.zeros({3}, DType::I32);
  try {
    comm->reduce_scatter(send, recv, ReduceOp::Sum);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("send count 10 is not divisible by 3 ranks"),
              std::string::npos);
  }
}

TEST(Split, ColorsFormGroupsOrderedByKey) {
  LocalWorld world(8);
  run_ranks(8, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    // Even and odd ranks; keys reverse the order inside each group.
    auto sub = comm->split(r % 2, -r);
    ASSERT_TRUE(sub);
    EXPECT_EQ(sub->size(), 4);
    EXPECT_EQ(sub->rank(), 3 - r / 2);
    Tensor t = be.from_host(std::vector<std::int32_t>{r}, {1});
    sub->all_reduce(t, t, ReduceOp::Sum).wait();
    EXPECT_EQ(be.to_host<std::int32_t>(t)[0], r % 2 == 0 ? 0 + 2 + 4 + 6 : 1 + 3 + 5 + 7);
    // A second split of the split, and a rank that joins none.
    auto pair = sub->split(sub->rank() < 2 ? 0 : -1, 0);
    EXPECT_EQ(bool(pair), sub->rank() < 2);
    if (pair) {
      EXPECT_EQ(pair->size(), 2);
    }
  });
}

TEST(SendRecv, GroupedRingsInBothDirections) {
  for (int n : {2, 3, 4, 8}) {
    LocalWorld world(n);
    run_ranks(n, [&](int r) {
      CpuBackend be(r);
      auto comm = world.communicator(r);
      testing::check_grouped_rings(*comm, be);
    });
  }
}

TEST(SendRecv, MessagesBetweenTwoRanksMatchInIssueOrder) {
  LocalWorld world(2);
  run_ranks(2, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    if (r == 0) {
      for (int k = 0; k < 5; ++k) comm->send(be.from_host(std::vector<std::int32_t>{k}, {1}), 1);
      comm->barrier().wait();
    } else {
      std::vector<Tensor> got;
      std::vector<Event> ev;
      for (int k = 0; k < 5; ++k) {
        got.push_back(be.zeros({1}, DType::I32));
        ev.push_back(comm->recv(got.back(), 0));
      }
      for (int k = 0; k < 5; ++k) {
        ev[k].wait();
        EXPECT_EQ(be.to_host<std::int32_t>(got[k])[0], k);
      }
      comm->barrier().wait();
    }
  });
}

// Runs fn on every rank and returns each rank's error message ("" when none).
std::vector<std::string> errors_of(int n, double timeout,
                                   const std::function<void(Communicator&, CpuBackend&)>& fn) {
  LocalWorld world(n, timeout);
  std::vector<std::string> errors(n);
  run_ranks(n, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    try {
      fn(*comm, be);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  });
  return errors;
}

TEST(Errors, MismatchedCollectivesNameRanksSequenceAndBothSignatures) {
  const auto errors = errors_of(2, 5.0, [](Communicator& c, CpuBackend& be) {
    Tensor t = be.zeros({8}, DType::I32);
    c.barrier().wait();  // sequence 0 matches
    if (c.rank() == 0) {
      c.all_reduce(t, t, ReduceOp::Sum).wait();
    } else {
      c.broadcast(t, t, 0).wait();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("collective mismatch on communicator 'world' at sequence 1"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("all_reduce(count=8, int32, sum)"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast(count=8, int32, root=0)"), std::string::npos) << e;
  }
}

TEST(Errors, AMissingRankTimesOutNamingIt) {
  const auto errors = errors_of(3, 0.3, [](Communicator& c, CpuBackend& be) {
    if (c.rank() == 1) return;  // never joins
    Tensor t = be.zeros({4}, DType::F32);
    c.all_reduce(t, t, ReduceOp::Avg).wait();
  });
  // The first rank to time out reports it; the other waiting rank gets the same message.
  for (int r : {0, 2}) {
    EXPECT_NE(errors[r].find(": all_reduce(count=4, float32, avg) #0 on communicator 'world' "
                             "timed out after 0.3 s waiting for ranks [1]"),
              std::string::npos)
        << errors[r];
  }
  EXPECT_TRUE(errors[1].empty());
}

// A rank that fails (here before its first collective) must not leave the others waiting for
// the timeout: run_ranks aborts the world, waiting collectives and receives fail at once naming
// the cause, and the cause (not an abandoned rank's error) is what run_ranks rethrows.
TEST(Errors, AFailedRankEndsTheOthersWaitsAtOnce) {
  LocalWorld world(3, 30.0);
  std::vector<std::string> errors(3);
  auto run = std::async(std::launch::async, [&] {
    return testing::error_of([&] {
      run_ranks(
          3,
          [&](int r) {
            CpuBackend be(r);
            auto comm = world.communicator(r);
            auto pair = comm->split(r == 0 ? -1 : 0, r);  // ranks 1 and 2: nobody else wakes it
            if (r == 1) throw Error("boom");
            // Let rank 1 fail first: the abort must also reach operations issued after it.
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            try {
              if (r == 0) {
                Tensor t = be.zeros({4});
                comm->all_reduce(t, t, ReduceOp::Sum).wait();
              } else {
                pair->recv(be.zeros({4}), 0).wait();  // from rank 1
              }
            } catch (const Error& e) {
              errors[r] = e.what();
              throw;
            }
          },
          &world);
    });
  });
  // A hang detector, not a speed test: without the abort the others wait the 30 s timeout.
  EXPECT_EQ(run.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "ranks still waiting 10 s after rank 1 failed";
  const std::string thrown = run.get();
  EXPECT_EQ(thrown, "boom");
  EXPECT_NE(errors[0].find("rank 0: all_reduce(count=4, float32, sum) #1 on communicator 'world' "
                           "abandoned: rank 1 failed: boom"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[2].find("rank 1: recv #0 from rank 0 (float32[4] on cpu:2) on communicator "
                           "'world/split(0)' abandoned: rank 1 failed: boom"),
            std::string::npos)
      << errors[2];
}

// A rank that abandons a collective after arriving at it (the world aborted while it waited for
// the others) leaves its arrival counted: a rank arriving later must fail at once too, neither
// reading the abandoning rank's buffer (freed as its thread unwinds) nor waiting for it to read.
// Before the slot was marked abandoned, the late rank waited "for ranks still reading" until the
// timeout — a failing training rank's communicators then blocked its unwinding, and the others
// were reported stuck after the 5 s grace (exit 2, no message).
TEST(Errors, ARankArrivingAfterAnotherAbandonedTheCollectiveFailsAtOnce) {
  LocalWorld world(2, 30.0);
  CpuBackend be0(0), be1(1);
  auto c0 = world.communicator(0), c1 = world.communicator(1);
  Tensor t0 = be0.zeros({4}), t1 = be1.zeros({4});
  const Event first = c0->all_reduce(t0, t0, ReduceOp::Sum);  // arrives, waits for rank 1
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  world.abort("rank 7 failed: boom");
  const std::string abandoned = testing::error_of([&] { first.wait(); });
  EXPECT_NE(abandoned.find("rank 0: all_reduce(count=4, float32, sum) #0 on communicator 'world' "
                           "abandoned: rank 7 failed: boom"),
            std::string::npos)
      << abandoned;
  auto late = std::async(std::launch::async, [&] {
    return testing::error_of([&] { c1->all_reduce(t1, t1, ReduceOp::Sum).wait(); });
  });
  ASSERT_EQ(late.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the late rank waits for a rank that abandoned the collective";
  const std::string error = late.get();
  EXPECT_NE(error.find("abandoned: rank 7 failed: boom"), std::string::npos) << error;
}

TEST(Errors, SendWithoutReceiveAndSizeMismatch) {
  auto errors = errors_of(2, 0.3, [](Communicator& c, CpuBackend& be) {
    if (c.rank() == 0) c.send(be.zeros({4}, DType::I32), 1).wait();
  });
  EXPECT_NE(errors[0].find("rank 0: send #0 to rank 1 (int32[4] on cpu:0) on communicator "
                           "'world' was not matched by a receive within 0.3 s"),
            std::string::npos)
      << errors[0];
  errors = errors_of(2, 5.0, [](Communicator& c, CpuBackend& be) {
    if (c.rank() == 0)
      c.send(be.zeros({4}, DType::I32), 1).wait();
    else
      c.recv(be.zeros({5}, DType::I32), 0).wait();
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("send/recv mismatch on communicator 'world' between rank 0 and rank 1 at "
                     "sequence 0: rank 0 sends int32[4] on cpu:0 but rank 1 receives into "
                     "int32[5] on cpu:1"),
              std::string::npos)
        << e;
  }
}

TEST(HostReductions, EveryDtypeAndOpMatchesTheHandWorkedTable) {
  LocalWorld world(3, 30.0);
  run_ranks(3, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    testing::check_reduction_table(*comm, be);
  });
}

TEST(HostReductions, AHundredInt8RanksWrapAndAverageLikeModularArithmetic) {
  // 100 ranks each send 3: the sum 300 wraps to 300 - 256 = 44; avg = 44 / 100 = 0; prod
  // 3^100 mod 256: 3^2 = 9, 3^4 = 81, 3^8 = 6561 = 25*256 + 161, 3^16 = 161^2 = 25921 =
  // 101*256 + 65, 3^32 = 65^2 = 4225 = 16*256 + 129, 3^64 = 129^2 = 16641 = 65*256 + 1, so
  // 3^100 = 3^64 * 3^32 * 3^4 = 1 * 129 * 81 = 10449 = 40*256 + 209 -> 209 - 256 = -47.
  constexpr int n = 100;
  LocalWorld world(n, 60.0);
  std::vector<std::vector<std::int8_t>> results(n);
  run_ranks(n, [&](int r) {
    CpuBackend be(r);
    auto comm = world.communicator(r);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Prod}) {
      Tensor t = be.from_host(std::vector<std::int8_t>{3}, {1});
      comm->all_reduce(t, t, op).wait();
      results[r].push_back(be.to_host<std::int8_t>(t)[0]);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], (std::vector<std::int8_t>{44, 0, -47})) << r;
}

TEST(Float16, ConversionsRoundToNearestEvenAndRoundTrip) {
  using math::to_f16;
  struct Case {
    float x;
    std::uint16_t bits;
  };
  const Case cases[] = {
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {65504.0f, 0x7BFF},             // largest finite half
      {65519.0f, 0x7BFF},             // below 65504 + half an ulp (16): rounds down
      {65520.0f, 0x7C00},             // the tie goes to the even side: infinity
      {0x1p-14f, 0x0400},             // smallest normal
      {0x1p-24f, 0x0001},             // smallest subnormal
      {0x1p-25f, 0x0000},             // half of it: a tie, to even (zero)
      {0x1.8p-25f, 0x0001},           // above the tie
      {1.0f + 0x1p-11f, 0x3C00},      // tie between 1 and 1 + 2^-10: even (1)
      {1.0f + 3 * 0x1p-11f, 0x3C02},  // tie between 1 + 2^-10 and 1 + 2^-9: even (0x3C02)
      {7.0f / 3.0f, 0x40AB},          // 1195 * 2^-9
      {1e9f, 0x7C00},
  };
  for (const Case& c : cases) EXPECT_EQ(to_f16(c.x).bits, c.bits) << c.x;
  EXPECT_EQ(to_f16(std::numeric_limits<float>::quiet_NaN()).bits & 0x7E00u, 0x7E00u);
  // Every half widens exactly and narrows back to itself (NaNs stay NaN).
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float x = math::to_float(f16{std::uint16_t(b)});
    if ((b & 0x7C00u) == 0x7C00u && (b & 0x03FFu)) {
      EXPECT_TRUE(std::isnan(x)) << b;
      continue;
    }
    ASSERT_EQ(to_f16(x).bits, b) << b;
  }
  EXPECT_EQ(math::to_float(f16{0x0001}), 0x1p-24f);
  EXPECT_EQ(math::to_float(f16{0x7BFF}), 65504.0f);
  EXPECT_EQ(math::to_float(f16{0x3555}), 0.333251953125f);  // 0x155 = 341: (1 + 341/1024) / 4
}

// A wait's time leaves out the stretches in which the process did not run (a whole job paused):
// polls 200 us apart count, a poll 5 s after the previous one counts as a pause, and polls 0.9 s
// apart (a process descheduled, not stopped) still count.
TEST(WaitTimer, AWholeProcessPauseIsNotWaiting) {
  using namespace std::chrono_literals;
  const auto t0 = WaitTimer::Clock::time_point{} + 100s;
  WaitTimer timer(t0);
  auto t = t0;
  for (int i = 0; i < 5000; ++i) timer.waited(t += 200us);  // 1 s of polling
  EXPECT_NEAR(timer.waited(t), 1.0, 1e-9);
  EXPECT_NEAR(timer.waited(t += 5s), 1.0, 1e-9);  // stopped for 5 s, then continued
  EXPECT_NEAR(timer.waited(t += 900ms), 1.9, 1e-9);
  EXPECT_NEAR(timer.waited(t += 200us), 1.9002, 1e-9);
  WaitTimer watchdog(t0);
  EXPECT_EQ(watchdog.pause_before(t0 + 50ms), WaitTimer::Clock::duration::zero());
  EXPECT_EQ(watchdog.pause_before(t0 + 50ms + 3s), std::chrono::duration_cast<WaitTimer::Clock::duration>(3s));
}

}  // namespace
}  // namespace carousel
