// test_device_order.cpp — the pipeline executor hands each rank's own device queue to
// Event::order_before where a received tensor is consumed and at every AG_WAIT, and the host
// itself (no queue) in a profiled step, on CPUs.
//
// Why: on GPUs a received activation or a gathered weight slot is ordered before its consumer by
// making the compute stream wait for NCCL's CUDA event (the host does not block); a profiled
// step waits on the host instead, so its trace tells waiting apart from compute. On CPUs none of
// that wiring runs: a CPU allocator's work_queue() is nullptr and the local communicator sets no
// device order, so order_before always waits on the host, and a slip in the executor (the host
// instead of the queue, the queue in a profiled step, another rank's queue) would only show on a
// GPU. Here every rank of a small mesh with both p2p hand-offs and FSDP gathers (S=2, F=2,
// circular over 8 virtual stages, each stage's weights gathered for every use) is built by hand
// as `carousel train` does, and runs a normal step, a profiled step and an evaluation, with
//   - a CpuBackend over a host allocator whose work_queue() is a sentinel pointer, distinct per
//     rank (compute stays the CPU's, synchronous);
//   - its pipe and fsdp communicators wrapped in OrderingCommunicator, whose Events carry a
//     device order that records (rank, which communicator, queue) and then waits on the host for
//     the inner operation, so the results stay those of a plain run.
// order_before does nothing for an Event already complete, so the decorator's Events complete
// later than the inner ones: a helper thread completes them in issue order a few milliseconds
// after the inner operation. That alone leaves to timing whether any consumer finds its Event
// incomplete, so in each phase the first group with a receive (pipe) and the first all-gather
// (fsdp) are held: not complete until a device order was called on them (or a fallback after the
// inner operation: long where the test expects an order, so a missing one fails instead of
// hanging; short in the profiled step, where the host waiting for it is right). The executor
// consumes both with order_before before any host wait on them, so whether an order happens
// never depends on timing; only how many of the others do, which is not asserted.
// Asserted: in a normal step and in evaluate(), device orders for received tensors (pipe) and
// for gathers (fsdp) on every rank, with the rank's own queue; never any other queue; none at
// all in a profiled step; the losses, gradient norms and evaluation loss equal (bitwise) those of
// the same ranks on plain CpuBackends without the decorator.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/data/data.h"
#include "host/mesh/mesh.h"
#include "host/runtime/rank_executor.h"
#include "host/runtime/sharded_params.h"
#include "host/reliability/flight_recorder.h"
#include "host/report/logging.h"
#include "host/report/step_trace.h"
#include "tests/support/communicator_decorator.h"

namespace carousel {
namespace {

using std::chrono::milliseconds;

// Host memory whose work_queue() is a pointer to a member: not null and distinct per live
// allocator (each rank's), never dereferenced; like a CUDA stream, it names the device's queue.
class QueueAllocator final : public DeviceAllocator {
 public:
  explicit QueueAllocator(int index) : DeviceAllocator(DeviceKind::CPU, index, 0) {}
  void* work_queue() const override { return const_cast<char*>(&queue_); }

 protected:
  void* raw_allocate(std::size_t bytes) override {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void raw_free(void* ptr) override { std::free(ptr); }

 private:
  char queue_ = 0;
};

enum class Link { Pipe, Fsdp };
enum Phase { kNormalStep, kProfiledStep, kEvaluation, kPhases };
const char* const kPhaseNames[kPhases] = {"normal step", "profiled step", "evaluation"};

// A device order called by order_before: on which rank's communicator, which one, in which phase
// of the run, for which queue.
struct Order {
  int rank;
  Link link;
  int phase;
  void* queue;
};

class OrderLog {
 public:
  void add(const Order& order) {
    std::lock_guard lock(mutex_);
    orders_.push_back(order);
  }
  std::vector<Order> orders() const {
    std::lock_guard lock(mutex_);
    return orders_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Order> orders_;
};

// Hands out Events that complete after the inner operation's, in issue order, and carry a device
// order (recorded in the log, then a host wait for the inner operation). See the file comment for
// the one operation per phase that is held.
class OrderingCommunicator final : public testing::ForwardingCommunicator {
 public:
  static constexpr milliseconds kDelay{2};  // after the inner operation, for those not held

  OrderingCommunicator(std::unique_ptr<Communicator> inner, int rank, Link link, OrderLog& log)
      : ForwardingCommunicator(std::move(inner)),
        rank_(rank),
        link_(link),
        log_(log),
        shared_(std::make_shared<Shared>()),
        completer_([this] { complete_in_order(); }) {}

  // Every Event handed out completes (with the inner operation's outcome) before this returns.
  ~OrderingCommunicator() override {
    {
      std::lock_guard lock(shared_->mutex);
      shared_->stop = true;
    }
    shared_->cv.notify_all();
    completer_.join();
  }

  // From now on orders are logged under `phase`; the next operation of the kind the executor
  // orders (pipe: a group with a receive; fsdp: an all-gather) is held, until a device order is
  // called on it or `fallback` after its inner operation completed.
  void begin(Phase phase, milliseconds fallback) {
    std::lock_guard lock(shared_->mutex);
    shared_->phase = phase;
    shared_->hold_next = true;
    shared_->fallback = fallback;
  }

  Event do_all_gather(const Tensor& send, const Tensor& recv) override {
    return later(inner().all_gather(send, recv), link_ == Link::Fsdp);
  }
  Event do_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return later(inner().reduce_scatter(send, recv, op), false);
  }
  Event do_all_reduce(const Tensor& send, const Tensor& recv, ReduceOp op) override {
    return later(inner().all_reduce(send, recv, op), false);
  }
  Event do_broadcast(const Tensor& send, const Tensor& recv, int root) override {
    return later(inner().broadcast(send, recv, root), false);
  }
  Event barrier() override { return later(inner().barrier(), false); }
  void group_start() override {
    inner().group_start();
    in_group_ = true;
    group_receives_ = false;
  }
  Event group_end() override {
    in_group_ = false;
    return later(inner().group_end(), link_ == Link::Pipe && group_receives_);
  }
  // Inside a group the inner Events (they complete with the group) are handed out as they are.
  Event do_send(const Tensor& data, int peer) override {
    const Event sent = inner().send(data, peer);
    return in_group_ ? sent : later(sent, false);
  }
  Event do_recv(const Tensor& data, int peer) override {
    const Event received = inner().recv(data, peer);
    if (!in_group_) return later(received, link_ == Link::Pipe);
    group_receives_ = true;
    return received;
  }

 private:
  struct Pending {
    Event inner, outer;
    bool held = false;
    bool ordered = false;  // a device order was called on `outer`
    milliseconds fallback{0};
  };
  // What the completer thread and the device orders share; the device orders hold weak
  // references only (the outer Event owns its device order: no cycle, nothing leaks).
  struct Shared {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Pending>> queue;  // in issue order
    bool stop = false;
    int phase = kNormalStep;
    bool hold_next = false;
    milliseconds fallback{0};
  };

  Event later(const Event& inner, bool holdable) {
    auto pending = std::make_shared<Pending>();
    pending->inner = inner;
    std::weak_ptr<Shared> weak_shared = shared_;
    std::weak_ptr<Pending> weak_pending = pending;
    pending->outer.set_device_order(
        [inner, weak_shared, weak_pending, rank = rank_, link = link_, &log = log_](void* queue) {
          int phase = kPhases;
          if (const auto shared = weak_shared.lock()) {
            {
              std::lock_guard lock(shared->mutex);
              phase = shared->phase;
              if (const auto p = weak_pending.lock()) p->ordered = true;
            }
            shared->cv.notify_all();
          }
          log.add({rank, link, phase, queue});
          inner.wait();  // the CPU "device" runs what follows at once: the host waits for it here
        });
    {
      std::lock_guard lock(shared_->mutex);
      if (holdable && shared_->hold_next) {
        shared_->hold_next = false;
        pending->held = true;
        pending->fallback = shared_->fallback;
      }
      shared_->queue.push_back(pending);
    }
    shared_->cv.notify_all();
    return pending->outer;
  }

  // The completer thread: each Event in issue order, once its inner operation completed and its
  // delay passed (held: once ordered, or after the fallback); at shutdown without delays.
  void complete_in_order() {
    Shared& s = *shared_;
    for (;;) {
      std::shared_ptr<Pending> p;
      {
        std::unique_lock lock(s.mutex);
        s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
        if (s.queue.empty()) return;
        p = s.queue.front();
      }
      std::exception_ptr error;
      try {
        p->inner.wait();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::unique_lock lock(s.mutex);
        const auto until = p->inner.completed_at() + (p->held ? p->fallback : kDelay);
        s.cv.wait_until(lock, until, [&] { return s.stop || (p->held && p->ordered); });
        s.queue.pop_front();
      }
      p->outer.complete(error);
    }
  }

  const int rank_;
  const Link link_;
  OrderLog& log_;
  bool in_group_ = false, group_receives_ = false;  // the issuing (rank's) thread only
  std::shared_ptr<Shared> shared_;
  std::thread completer_;  // last: started once everything it reads is constructed
};

// Where a consumer is expected to find its held Event: long enough never to be reached when
// the order comes, short enough that a missing order fails the test instead of hanging it.
constexpr milliseconds kOrderExpected{5000};
// A profiled step waits on the host for the held Events: the fallback ends that wait.
constexpr milliseconds kHostWaits{20};

struct RankRun {
  StepOutcome normal, profiled;
  double evaluation = 0;  // summed over the ranks
  void* queue = nullptr;  // the rank's device queue
};

Config mesh_config() {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  Config cfg = load_config("", {"max_target_length=16", "enable_checkpointing=false",
                                "base_output_directory=/tmp/carousel_device_order_tests",
                                "ici_pipeline_parallelism=2", "ici_fsdp_parallelism=2",
                                "num_pipeline_microbatches=4"})
                   .config;
  cfg.per_device_batch_size = 8.0 / double(cfg.num_devices());
  cfg.validate();
  return cfg;
}

// Every rank: a normal step, a profiled step, an evaluation of one batch. With `log` on the
// queue allocator with the pipe and fsdp communicators decorated, otherwise plainly.
std::vector<RankRun> run_ranks_by_hand(const Config& cfg, const schedule::Program& program,
                                       OrderLog* log) {
  const MeshShape mesh = MeshShape::of(cfg);
  const auto data = make_data_loader(cfg);
  std::vector<RankRun> out(mesh.ranks());
  auto rank_main = [&](int rank, Backend& be, Communicator& world, Communicator&) {
    const RankPlace place = RankPlace::of(rank, mesh);
    // Made before the communicators split here, so it outlives them.
    std::unique_ptr<Backend> queued;
    if (log) queued = std::make_unique<CpuBackend>(std::make_unique<QueueAllocator>(rank));
    Backend& device = log ? *queued : be;
    RankCommunicators comms = split_communicators(world, place, program.layout, cfg.model);
    std::vector<OrderingCommunicator*> decorated;
    if (log) {
      decorated = {testing::decorate<OrderingCommunicator>(comms.pipe, rank, Link::Pipe, *log),
                   testing::decorate<OrderingCommunicator>(comms.fsdp, rank, Link::Fsdp, *log)};
    }
    auto begin = [&](Phase phase, milliseconds fallback) {
      for (OrderingCommunicator* c : decorated) c->begin(phase, fallback);
    };
    ShardedParams params(cfg, program.layout, place, device, comms);
    FlightRecorder recorder;
    RankExecutor executor(cfg, program, place, device, comms, params, *data, recorder);
    RankRun& r = out[rank];
    begin(kNormalStep, kOrderExpected);
    r.normal = executor.step(0, 0);
    device.synchronize();
    begin(kProfiledStep, kHostWaits);
    StepTrace trace(rank, place.data_rank * mesh.fsdp + place.fsdp_rank);
    r.profiled = executor.step(1, 1, &trace);
    device.synchronize();
    begin(kEvaluation, kOrderExpected);
    Tensor share = device.from_host(std::vector<double>{executor.evaluate(*data, 1)}, {1});
    world.all_reduce(share, share, ReduceOp::Sum).wait();
    r.evaluation = device.to_host<double>(share)[0];
    r.queue = device.allocator().work_queue();
    world.barrier().wait();  // every collective has completed everywhere
  };
  launch_ranks(cfg, mesh.ranks(), Transport::Local, nullptr, rank_main);
  return out;
}

bool has(const std::vector<schedule::Action>& actions,
         std::initializer_list<schedule::Kind> kinds) {
  return std::any_of(actions.begin(), actions.end(), [&](const schedule::Action& a) {
    return std::find(kinds.begin(), kinds.end(), a.kind) != kinds.end();
  });
}

std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

TEST(DeviceOrder, TheExecutorOrdersEachRanksOwnQueueAndTheHostInAProfiledStep) {
  const Config cfg = mesh_config();
  const schedule::Program program = lowered_program(cfg);
  const MeshShape mesh = MeshShape::of(cfg);
  // The mesh must exercise both hand-offs on every rank, or the assertions below prove little.
  for (int s = 0; s < mesh.stages; ++s) {
    ASSERT_TRUE(has(program.ranks[s], {schedule::Kind::RECV_F})) << "stage rank " << s;
    ASSERT_TRUE(has(program.ranks[s], {schedule::Kind::RECV_B})) << "stage rank " << s;
    ASSERT_TRUE(has(program.ranks[s], {schedule::Kind::AG_WAIT})) << "stage rank " << s;
  }

  OrderLog log;
  const std::vector<RankRun> ordered = run_ranks_by_hand(cfg, program, &log);
  const std::vector<RankRun> plain = run_ranks_by_hand(cfg, program, nullptr);
  const std::vector<Order> orders = log.orders();

  std::set<void*> queues;
  for (const RankRun& r : ordered) {
    ASSERT_NE(r.queue, nullptr);
    queues.insert(r.queue);
  }
  ASSERT_EQ(queues.size(), ordered.size()) << "every rank has a queue of its own";

  // Never another queue than the rank's own (nor none: order_before calls no device order then).
  for (const Order& o : orders) {
    EXPECT_EQ(o.queue, ordered[o.rank].queue)
        << "rank " << o.rank << (o.link == Link::Pipe ? " pipe" : " fsdp") << " order in the "
        << (o.phase < kPhases ? kPhaseNames[o.phase] : "?");
  }
  int counts[kPhases][2] = {};
  for (const Order& o : orders) {
    if (o.phase < kPhases) ++counts[o.phase][int(o.link)];
  }
  std::printf(
      "device orders (all ranks): normal step pipe %d fsdp %d; profiled step %d; "
      "evaluation pipe %d fsdp %d\n",
      counts[kNormalStep][0], counts[kNormalStep][1],
      counts[kProfiledStep][0] + counts[kProfiledStep][1], counts[kEvaluation][0],
      counts[kEvaluation][1]);
  auto ordered_by = [&](int rank, Link link, Phase phase) {
    return std::any_of(orders.begin(), orders.end(), [&](const Order& o) {
      return o.rank == rank && o.link == link && o.phase == phase && o.queue == ordered[rank].queue;
    });
  };
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    SCOPED_TRACE(fmt::format("rank {}", rank));
    // A received tensor's consumer (await_input) and AG_WAIT (wait_gather) order the queue.
    EXPECT_TRUE(ordered_by(rank, Link::Pipe, kNormalStep)) << "received tensors, normal step";
    EXPECT_TRUE(ordered_by(rank, Link::Fsdp, kNormalStep)) << "gathers, normal step";
    EXPECT_TRUE(ordered_by(rank, Link::Pipe, kEvaluation)) << "received tensors, evaluation";
    EXPECT_TRUE(ordered_by(rank, Link::Fsdp, kEvaluation)) << "gathers, evaluation";
    // A profiled step waits on the host: no device order at all.
    for (Link link : {Link::Pipe, Link::Fsdp}) {
      EXPECT_FALSE(std::any_of(orders.begin(), orders.end(),
                               [&](const Order& o) {
                                 return o.rank == rank && o.link == link &&
                                        o.phase == kProfiledStep;
                               }))
          << (link == Link::Pipe ? "pipe" : "fsdp") << " order in a profiled step";
    }
    // The same numbers as the plain run, bit for bit.
    EXPECT_EQ(bits(ordered[rank].normal.loss), bits(plain[rank].normal.loss))
        << ordered[rank].normal.loss << " vs " << plain[rank].normal.loss;
    EXPECT_EQ(bits(ordered[rank].normal.grad_norm), bits(plain[rank].normal.grad_norm));
    EXPECT_EQ(bits(ordered[rank].profiled.loss), bits(plain[rank].profiled.loss))
        << ordered[rank].profiled.loss << " vs " << plain[rank].profiled.loss;
    EXPECT_EQ(bits(ordered[rank].profiled.grad_norm), bits(plain[rank].profiled.grad_norm));
    EXPECT_EQ(bits(ordered[rank].evaluation), bits(plain[rank].evaluation))
        << ordered[rank].evaluation << " vs " << plain[rank].evaluation;
  }
}

}  // namespace
}  // namespace carousel
