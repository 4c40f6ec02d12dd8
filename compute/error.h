// error.h — carousel's one exception type and every check macro that raises it.
//
// One header for all checks, so every error reads the same way. It keeps the name error.h
// (not checks.h) because host/, models/ and the tests include it already for carousel::Error.
//
//   CAROUSEL_CHECK(cond, "fmt {}", args...)  an error a user can cause (bad config, data,
//       checkpoint, shapes): one message naming what is wrong and what would be valid. The
//       file:line is kept apart (Error::where()); the CLI logs it at debug level only.
//   CAROUSEL_ASSERT(cond, "fmt {}", args...) an internal invariant (a bug in carousel, not in the
//       input): "internal error at FILE:LINE: message".
//   CUDA_CHECK(stmt), CUBLAS_CHECK(stmt), NCCL_CHECK(stmt), MPI_CHECK(stmt): a library call
//       that must succeed; the error names the library, its error code and string, the
//       statement, file:line, and for CUDA and cuBLAS the current device.
//   MPI_ISSUE(MPI_Ixxx, args...): issues a nonblocking MPI call, checked like MPI_CHECK, and
//       yields its MPI_Request.
//
// The library macros expand to a comparison with the library's success value at the use site
// (which includes the library's own header) and one call of the non-template library_error():
// this header includes no library header, so any file may include it.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace carousel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, const char* file = nullptr, int line = 0)
      : std::runtime_error(message), file_(file), line_(line) {}
  // "compute/backend.cpp:42" where a CAROUSEL_CHECK failed; empty for other errors.
  std::string where() const;

 private:
  const char* file_;  // __FILE__: a string literal, so copying an Error cannot throw
  int line_;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const std::string& message);
[[noreturn]] void assert_failed(const char* file, int line, const std::string& message);
// "{library} error {code or code_name} ({message}) in '{stmt}' at {file}:{line}[ on device d]".
[[noreturn]] void library_error(const char* library, const char* stmt, const char* file, int line,
                                long long code, std::string_view message,
                                const char* code_name = nullptr,
                                std::optional<int> device = std::nullopt);
// MPI's text for an error code (defined with the MPI communicator).
std::string mpi_error_string(int code);
}  // namespace detail

}  // namespace carousel

#define CAROUSEL_CHECK(cond, ...)                                                                  \
  do {                                                                                             \
    if (!(cond)) ::carousel::detail::check_failed(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define CAROUSEL_ASSERT(cond, ...)                                                       \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::carousel::detail::assert_failed(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// The shared shape of the library checks: `text` is the statement as written at the use site,
// `message` maps the failing value to the library's text, and the trailing arguments (code
// name, device) are passed on to library_error(); they may read the failing value carousel_rc_.
#define CAROUSEL_LIBRARY_CHECK_(library, text, stmt, success, message, ...)   \
  do {                                                                        \
    const auto carousel_rc_ = (stmt);                                         \
    if (carousel_rc_ != (success))                                            \
      ::carousel::detail::library_error(library, text, __FILE__, __LINE__,    \
                                        static_cast<long long>(carousel_rc_), \
                                        message(carousel_rc_), __VA_ARGS__);  \
  } while (0)

// The CUDA device current on the failing thread (-1 when even that query fails).
#define CAROUSEL_CUDA_DEVICE_         \
  [] {                                \
    int carousel_device_ = -1;        \
    cudaGetDevice(&carousel_device_); \
    return carousel_device_;          \
  }()

#define CUDA_CHECK(stmt)                                                        \
  CAROUSEL_LIBRARY_CHECK_("CUDA", #stmt, stmt, cudaSuccess, cudaGetErrorString, \
                          cudaGetErrorName(carousel_rc_), CAROUSEL_CUDA_DEVICE_)

#define CUBLAS_CHECK(stmt)                                                                     \
  CAROUSEL_LIBRARY_CHECK_("cuBLAS", #stmt, stmt, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, \
                          nullptr, CAROUSEL_CUDA_DEVICE_)

#define NCCL_CHECK(stmt) \
  CAROUSEL_LIBRARY_CHECK_("NCCL", #stmt, stmt, ncclSuccess, ncclGetErrorString, nullptr)

#define MPI_CHECK(stmt)                                                                          \
  CAROUSEL_LIBRARY_CHECK_("MPI", #stmt, stmt, MPI_SUCCESS, ::carousel::detail::mpi_error_string, \
                          nullptr)

#define MPI_ISSUE(call, ...)                                                                  \
  [&] {                                                                                       \
    MPI_Request carousel_request_ = MPI_REQUEST_NULL;                                         \
    CAROUSEL_LIBRARY_CHECK_("MPI", #call, call(__VA_ARGS__, &carousel_request_), MPI_SUCCESS, \
                            ::carousel::detail::mpi_error_string, nullptr);                   \
    return carousel_request_;                                                                 \
  }()
