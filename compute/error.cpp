// error.cpp — the out-of-line halves of the check macros in error.h (and of the dtype
// dispatcher's error, dispatch.h): they format the message and throw carousel::Error, so each
// use site carries only a comparison and one call.
#include "compute/error.h"

#include "compute/dispatch.h"

namespace carousel {

namespace {
// __FILE__ relative to the source tree ("compute/backend.cpp"), however the build spelled it.
std::string_view source_path(const char* file) {
  std::string_view path = file ? file : "";
#ifdef CAROUSEL_SOURCE_DIR
  constexpr std::string_view root = CAROUSEL_SOURCE_DIR "/";
  if (path.substr(0, root.size()) == root) path.remove_prefix(root.size());
#endif
  // ccache's base_dir hands the compiler paths relative to the build folder ("../cuda/x.cpp").
  while (path.substr(0, 3) == "../") path.remove_prefix(3);
  return path;
}
}  // namespace

std::string Error::where() const {
  if (!file_) return {};
  return fmt::format("{}:{}", source_path(file_), line_);
}

namespace detail {

void check_failed(const char* file, int line, const std::string& message) {
  throw Error(message, file, line);
}

void assert_failed(const char* file, int line, const std::string& message) {
  throw Error(fmt::format("internal error at {}:{}: {}", source_path(file), line, message), file,
              line);
}

void library_error(const char* library, const char* stmt, const char* file, int line,
                   long long code, std::string_view message, const char* code_name,
                   std::optional<int> device) {
  std::string text = code_name ? fmt::format("{} error {} ({})", library, code_name, message)
                               : fmt::format("{} error {} ({})", library, code, message);
  text += fmt::format(" in '{}' at {}:{}", stmt, source_path(file), line);
  if (device) text += fmt::format(" on device {}", *device);
  throw Error(text, file, line);
}

void unsupported_dtype(const char* op, DType dtype, const DType* handled, int n) {
  std::string names;
  for (int i = 0; i < n; ++i) names += fmt::format("{}{}", i ? ", " : "", dtype_name(handled[i]));
  throw Error(fmt::format("internal error: {} has no {} implementation (it handles {})", op,
                          dtype_name(dtype), names));
}

}  // namespace detail

}  // namespace carousel
