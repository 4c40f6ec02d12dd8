// test_overlapped_pair.cpp — the halves of an F&B pair taking turns
// (host/runtime/overlapped_pair.h): where they switch, and what a failing half does to its
// partner.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "compute/error.h"
#include "host/runtime/overlapped_pair.h"

namespace carousel {
namespace {

Event completed() {
  Event e;
  e.complete();
  return e;
}

// The F computes a part, posts an exchange and hands over; the B computes its part while it is
// in flight, and so on: F0 B0 F1 B1 F2, then the F goes on alone (its partner has finished).
TEST(OverlappedPair, HalvesAlternateAtTheirExchanges) {
  std::vector<std::string> order;  // appended by whichever half holds the turn
  std::vector<std::thread::id> b_threads;
  const auto half = [&](const std::string& name, int exchanges) {
    return [&order, &b_threads, name, exchanges](ExchangeWaiter& waiter) {
      if (name == "B") b_threads.push_back(std::this_thread::get_id());
      for (int k = 0; k <= exchanges; ++k) {
        order.push_back(name + std::to_string(k));
        if (k < exchanges) waiter.wait(completed(), 0);
      }
    };
  };
  PairThread second;
  take_turns(
      {{{schedule::Kind::F, 0, 1}, half("F", 3)}, {{schedule::Kind::B, 1, 0}, half("B", 1)}},
      nullptr, [] {}, &second);
  EXPECT_EQ(order, (std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "F3"}));
  // The same thread runs the next pair's second half.
  order.clear();
  take_turns(
      {{{schedule::Kind::F, 0, 2}, half("F", 1)}, {{schedule::Kind::B, 1, 1}, half("B", 1)}},
      nullptr, [] {}, &second);
  EXPECT_EQ(order, (std::vector<std::string>{"F0", "B0", "F1", "B1"}));
  ASSERT_EQ(b_threads.size(), 2u);
  EXPECT_EQ(b_threads[0], b_threads[1]);
  EXPECT_NE(b_threads[0], std::this_thread::get_id());
}

// A half that fails stops its partner at the partner's next exchange (the other expert ranks
// would otherwise see that partner's exchanges out of their order); its own error is reported.
TEST(OverlappedPair, AFailingHalfStopsItsPartnerAndItsErrorIsReported) {
  int f_parts = 0;
  const auto f = [&](ExchangeWaiter& waiter) {
    for (int k = 0; k < 3; ++k) {
      ++f_parts;
      waiter.wait(completed(), 0);
    }
  };
  const auto b = [](ExchangeWaiter&) { fail("the backward ran out of memory"); };
  const std::string error = [&] {
    try {
      PairThread second;
      take_turns(
          {{{schedule::Kind::F, 0, 1}, f}, {{schedule::Kind::B, 1, 0}, b}}, nullptr, [] {},
          &second);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  }();
  EXPECT_NE(error.find("the backward ran out of memory"), std::string::npos) << error;
  EXPECT_EQ(f_parts, 1) << "the forward posted more exchanges after its partner failed";
}

}  // namespace
}  // namespace carousel
