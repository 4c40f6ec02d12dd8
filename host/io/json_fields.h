// json_fields.h — reading the JSON files carousel writes (safetensors headers, checkpoint
// manifests, state.json) with errors that name the file and the field instead of the JSON
// library's text ("[json.exception.type_error.302] type must be number, but is string").
// Header-only: every function throws carousel::Error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "compute/error.h"

namespace carousel {

// The message of a nlohmann exception without its "[json.exception.parse_error.101] " prefix.
inline std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string text = e.what();
  const auto end = text.find("] ");
  return text.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? text.substr(end + 2)
                                                                            : text;
}

// Parses `text`; `where` names the file (and part) in the error.
template <class It>
nlohmann::json parse_json_text(It begin, It end, const std::string& where) {
  try {
    return nlohmann::json::parse(begin, end);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", where, json_error_text(e));
  }
}

// Reads and parses a regular file (never blocks on a FIFO: non-regular files are refused).
inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  CAROUSEL_CHECK(std::filesystem::exists(status), "'{}' does not exist", path.string());
  CAROUSEL_CHECK(std::filesystem::is_regular_file(status), "'{}' is not a regular file",
                 path.string());
  std::ifstream in(path, std::ios::binary);
  CAROUSEL_CHECK(in.good(), "cannot open '{}'", path.string());
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  return parse_json_text(text.begin(), text.end(), fmt::format("'{}'", path.string()));
}

// `v` as short text for an error message. json::dump() recurses once per nesting level, so
// quoting a value from a corrupt file nested 100000 arrays deep overflowed the stack (found by
// FuzzReaders.DeeplyNestedHeaderValuesAreErrors under ASan): a value nested deeper than 8 levels
// or holding over 256 elements is shown as its type and size, and the text is cut at 200 chars.
inline std::string json_excerpt(const nlohmann::json& v) {
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&v, 0}};
  std::size_t elements = 0;
  while (!stack.empty()) {
    const auto [value, depth] = stack.back();
    stack.pop_back();
    if (!value->is_structured()) continue;
    elements += value->size();
    if (depth >= 8 || elements > 256) {
      return fmt::format("<{} of {} elements>", v.type_name(), v.size());
    }
    for (const auto& element : *value) stack.emplace_back(&element, depth + 1);
  }
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

// obj[key]; obj must be an object holding key. `where` names the file and the enclosing entry.
inline const nlohmann::json& json_field(const nlohmann::json& obj, const std::string& key,
                                        const std::string& where) {
  CAROUSEL_CHECK(obj.is_object(), "{}: expected a JSON object, found {}", where, obj.type_name());
  const auto it = obj.find(key);
  CAROUSEL_CHECK(it != obj.end(), "{}: field '{}' is missing", where, key);
  return *it;
}

inline std::string json_string(const nlohmann::json& v, const std::string& where,
                               const std::string& field) {
  CAROUSEL_CHECK(v.is_string(), "{}: field '{}' must be a string, found {} {}", where, field,
                 v.type_name(), json_excerpt(v));
  return v.get<std::string>();
}

// A non-negative integer no larger than `max` (floats, negatives and strings are refused).
inline std::uint64_t json_unsigned(const nlohmann::json& v, const std::string& where,
                                   const std::string& field,
                                   std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  CAROUSEL_CHECK(v.is_number_unsigned() && v.get<std::uint64_t>() <= max,
                 "{}: field '{}' must be an integer in [0, {}], found {} {}", where, field, max,
                 v.type_name(), json_excerpt(v));
  return v.get<std::uint64_t>();
}

}  // namespace carousel
