// overlapped_pair.cpp — the halves of an F&B pair taking turns (overlapped_pair.h).
#include "host/parallel/overlapped_pair.h"

#include <omp.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "compute/error.h"

namespace carousel {

namespace {

using Clock = StepTrace::Clock;

// Which half may compute: the one holding the turn. A half passes it at each exchange (and
// gets it back when the other passes or finishes) and gives it up for good when it finishes.
// take() and pass() return when the turn was handed to the caller by the other half (to trace
// the hand-over's latency: a thread waking up), or nullopt when the caller kept it.
class Baton {
 public:
  using Handed = std::optional<Clock::time_point>;
  explicit Baton(int halves) : finished_(std::size_t(halves), halves == 1) {}
  Handed take(int me) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return turn_ == me; });
    return handed_;
  }
  Handed pass(int me) {
    std::unique_lock lock(mutex_);
    if (finished_.size() == 1 || finished_[std::size_t(1 - me)]) return {};  // no one to pass to
    hand_to(1 - me);
    changed_.wait(lock, [&] { return turn_ == me; });
    return handed_;
  }
  void finish(int me) {
    std::lock_guard lock(mutex_);
    finished_[std::size_t(me)] = true;
    if (finished_.size() == 2) hand_to(1 - me);
  }

 private:
  void hand_to(int other) {  // with the mutex held
    turn_ = other;
    handed_ = Clock::now();
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  int turn_ = 0;
  Handed handed_;
  std::vector<bool> finished_;
};

// A half's waiter: passes the turn at each exchange, then waits for the exchange's rest.
class HalfWaiter : public ExchangeWaiter {
 public:
  HalfWaiter(int me, const schedule::Action& action, Baton& baton, StepTrace* trace,
             const std::function<void()>& synchronize)
      : me_(me),
        action_(action),
        exchange_{action.kind == schedule::Kind::F ? schedule::Kind::A2A_F : schedule::Kind::A2A_B,
                  action.stage, action.index},
        baton_(baton),
        trace_(trace),
        synchronize_(synchronize) {}

  // The turn is this half's (handed over by the other half, or its own from the start).
  void begin(const Baton::Handed& handed) {
    part_start_ = Clock::now();
    note_hand_over(handed, part_start_);
  }
  void wait(const Event& done, std::int64_t bytes) override {
    const auto posted = end_part();
    if (trace_) trace_->exchange(exchange_, posted, done, bytes);
    const Baton::Handed handed = baton_.pass(me_);
    const auto resumed = Clock::now();
    note_hand_over(handed, resumed);
    done.wait();
    part_start_ = Clock::now();
    if (trace_ && !done_before(resumed, done)) trace_->compute(exchange_, resumed, part_start_);
  }
  void end() { end_part(); }

 private:
  void note_hand_over(const Baton::Handed& handed, Clock::time_point woke) {
    if (trace_ && handed) trace_->hand_over(exchange_, *handed, woke);
  }
  Clock::time_point end_part() {
    if (trace_) synchronize_();
    const auto now = Clock::now();
    if (trace_) trace_->compute_part(action_, part_start_, now, part_++);
    return now;
  }
  // Whether the exchange had completed by the time the turn came back (no exposed wait).
  static bool done_before(Clock::time_point at, const Event& done) {
    return done.completed_at() <= at;
  }

  int me_;
  schedule::Action action_, exchange_;  // the compute action, the A2A of its exchanges
  Baton& baton_;
  StepTrace* trace_;
  const std::function<void()>& synchronize_;
  Clock::time_point part_start_;
  int part_ = 0;
};

}  // namespace

void take_turns(const std::vector<TurnHalf>& halves, StepTrace* trace,
                const std::function<void()>& synchronize) {
  CAROUSEL_ASSERT(halves.size() == 1 || halves.size() == 2, "{} halves take turns",
                  halves.size());
  Baton baton(int(halves.size()));
  std::vector<std::exception_ptr> errors(halves.size());
  const auto run = [&](int me) {
    HalfWaiter waiter(me, halves[std::size_t(me)].action, baton, trace, synchronize);
    const Baton::Handed handed = baton.take(me);
    try {
      waiter.begin(handed);
      halves[std::size_t(me)].compute(waiter);
      waiter.end();
    } catch (...) {
      errors[std::size_t(me)] = std::current_exception();
    }
    baton.finish(me);
  };
  if (halves.size() == 1) {
    run(0);
  } else {
    const int threads = omp_get_max_threads();  // the rank's share of the cores, as on this thread
    std::thread second([&] {
      omp_set_num_threads(threads);
      run(1);
    });
    run(0);
    second.join();
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace carousel
