// error.h — carousel's one exception type and the helpers that raise it.
//
// Every error a user can cause (bad config, data, checkpoint, shapes) is thrown as
// carousel::Error with one message naming what is wrong and what would be valid.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace carousel {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace carousel

// CAROUSEL_CHECK(cond, "fmt {}", args...): throw carousel::Error when cond is false.
#define CAROUSEL_CHECK(cond, ...)                  \
  do {                                             \
    if (!(cond)) ::carousel::fail(__VA_ARGS__);    \
  } while (0)
