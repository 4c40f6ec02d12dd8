// overlapped_pair.cpp — the halves of an F&B pair taking turns (overlapped_pair.h).
#include "host/runtime/overlapped_pair.h"

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
//
// A half that fails must stop its partner too: the other ranks of the expert group are still
// taking turns, so a partner going on alone would post its exchanges out of their order (a
// mismatch, or a hang on NCCL). Once one half has failed, take() throws, and so does
// check_partner(), which a half calls after each pass once its own exchange has completed.
class Baton {
 public:
  using Handed = std::optional<Clock::time_point>;
  explicit Baton(int halves) : finished_(std::size_t(halves), halves == 1) {}
  Handed take(int me) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return turn_ == me; });
    check_partner_locked();
    return handed_;
  }
  Handed pass(int me) {
    std::unique_lock lock(mutex_);
    if (finished_.size() == 1 || finished_[std::size_t(1 - me)]) return {};  // no one to pass to
    hand_to(1 - me);
    changed_.wait(lock, [&] { return turn_ == me; });
    return handed_;
  }
  // Throws if the other half failed (after a pass, once the caller's exchange in flight is done).
  void check_partner() {
    std::lock_guard lock(mutex_);
    check_partner_locked();
  }
  // `error`: the half failed with it (the first failure of the pair is the one rethrown).
  void finish(int me, std::exception_ptr error = nullptr) {
    std::lock_guard lock(mutex_);
    finished_[std::size_t(me)] = true;
    if (error && !first_error_) first_error_ = error;
    if (finished_.size() == 2) hand_to(1 - me);
  }
  std::exception_ptr first_error() {
    std::lock_guard lock(mutex_);
    return first_error_;
  }

 private:
  void check_partner_locked() const {
    CAROUSEL_CHECK(!first_error_,
                   "the other half of this overlapped F&B pair failed; its error "
                   "is reported instead");
  }
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
  std::exception_ptr first_error_;
};

// A half's waiter: passes the turn at each exchange, then waits for the exchange's rest.
class HalfWaiter : public ExchangeWaiter {
 public:
  HalfWaiter(int me, const schedule::Action& action, Baton& baton, StepTrace* trace,
             const std::function<void()>& synchronize)
      : me_(me),
        action_(action),
        exchange_(schedule::exchange_of(action)),
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
    baton_.check_partner();
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

PairThread::PairThread()
    : thread_([this] {
        std::unique_lock lock(mutex_);
        for (;;) {
          changed_.wait(lock, [&] { return job_ || stopping_; });
          if (!job_) return;  // stopping, nothing queued
          lock.unlock();
          job_();  // never throws: a half's errors go to its baton
          lock.lock();
          job_ = nullptr;
          changed_.notify_all();
        }
      }) {}

PairThread::~PairThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void PairThread::run(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    CAROUSEL_ASSERT(!job_, "the pair thread already runs a half");
    job_ = std::move(job);
  }
  changed_.notify_all();
}

void PairThread::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !job_; });
}

void take_turns(const std::vector<TurnHalf>& halves, StepTrace* trace,
                const std::function<void()>& synchronize, PairThread* second) {
  CAROUSEL_ASSERT(halves.size() == 1 || halves.size() == 2, "{} halves take turns", halves.size());
  Baton baton(int(halves.size()));
  const auto run = [&](int me) {
    HalfWaiter waiter(me, halves[std::size_t(me)].action, baton, trace, synchronize);
    std::exception_ptr error;
    try {
      waiter.begin(baton.take(me));
      halves[std::size_t(me)].compute(waiter);
      waiter.end();
    } catch (...) {
      error = std::current_exception();
    }
    baton.finish(me, error);
  };
  if (halves.size() == 1) {
    run(0);
  } else {
    CAROUSEL_ASSERT(second, "a pair's second half needs a thread");
    const int threads = omp_get_max_threads();  // the rank's share of the cores, as on this thread
    second->run([&] {
      omp_set_num_threads(threads);
      run(1);
    });
    run(0);
    second->wait();
  }
  if (const std::exception_ptr error = baton.first_error()) std::rethrow_exception(error);
}

}  // namespace carousel
