// safetensors.cpp — writer and validating reader of the safetensors format.
#include "host/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "compute/error.h"
#include "host/io/files.h"
#include "host/io/json_fields.h"

namespace carousel {

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::F16:
      return "F16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::I64:
      return "I64";
  }
  return "?";
}

namespace {
// Sets the entry's dtype fields; false for a dtype carousel does not read.
bool parse_dtype(const std::string& s, SafetensorsEntry& e) {
  e.dtype_name = s;
  if (s == "F16") {  // IEEE half: read only, widened to float32 by the importer
    e.element_size = 2;
    return true;
  }
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::I32}) {
    if (s == safetensors_dtype(d)) {
      e.dtype = d;
      e.element_size = dtype_size(d);
      return true;
    }
  }
  return false;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& within) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = std::uint64_t(numel(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  OutputFile out(path, "safetensors file", OutputMode::Replace, within);
  const std::uint64_t n = text.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(n >> (8 * i));
  // A failed write (a full disk, or a file-size limit: EFBIG) is an error naming the file.
  out.write(std::string(len, 8) + text);
  for (const auto& t : tensors) out.write(t.data, numel(t.shape) * dtype_size(t.dtype));
}

namespace {

// The format's own bound on the header (safetensors refuses longer ones): a corrupt length
// never becomes a huge allocation.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

void read_exactly(const ReadOnlyFile& file, std::uint64_t offset, std::size_t size, void* out,
                  const std::string& path) {
  errno = 0;  // read_at sets it on an error, not at the end of the file
  if (file.read_at(offset, size, out)) return;
  fail("reading '{}' at byte {} failed: {}", path, offset,
       errno ? std::strerror(errno) : "the file is shorter than when it was opened");
}

// The first name the header's top-level object holds twice, or "". nlohmann's parser keeps the
// last of duplicate keys, so a header naming a tensor twice would load whichever came last,
// silently: the reader refuses it (Hugging Face's safetensors does too). A second pass over the
// text with a SAX handler (an explicit stack: no recursion on deeply nested input).
class DuplicateKeys final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string duplicate;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    if (depth_ != 1 || seen_.insert(k).second) return true;
    duplicate = k;
    return false;  // stop: one is enough to refuse the file
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // not reached: the text parsed once already
  }

 private:
  int depth_ = 0;
  std::set<std::string> seen_;
};

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // Checked before opening: an open() on a FIFO blocks until a writer appears.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  CAROUSEL_CHECK(std::filesystem::exists(status), "safetensors file '{}' does not exist", path);
  CAROUSEL_CHECK(std::filesystem::is_regular_file(status),
                 "'{}' is not a regular file (a directory, FIFO or device?); a safetensors file "
                 "is expected",
                 path);
  const ReadOnlyFile file("", path, "safetensors file");
  const std::uint64_t file_size = file.size();
  CAROUSEL_CHECK(file_size >= 8, "'{}' is {} bytes: too short for a safetensors file", path,
                 file_size);
  unsigned char len[8];
  read_exactly(file, 0, 8, len, path);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(len[i]) << (8 * i);
  CAROUSEL_CHECK(n <= file_size - 8,
                 "'{}': header length {} exceeds the file size {} (truncated, or not a "
                 "safetensors file)",
                 path, n, file_size);
  CAROUSEL_CHECK(n <= kMaxHeaderBytes,
                 "'{}': header length {} is over the format's limit of {} bytes (corrupt, or not "
                 "a safetensors file)",
                 path, n, kMaxHeaderBytes);
  std::vector<char> header_bytes(n);
  read_exactly(file, 8, n, header_bytes.data(), path);
  data_start_ = 8 + n;
  const std::string where = fmt::format("'{}': the safetensors header", path);
  const nlohmann::json header = parse_json_text(header_bytes.begin(), header_bytes.end(), where);
  CAROUSEL_CHECK(header.is_object(), "{} is a JSON {}, not an object", where, header.type_name());
  DuplicateKeys keys;
  nlohmann::json::sax_parse(header_bytes.begin(), header_bytes.end(), &keys);
  CAROUSEL_CHECK(keys.duplicate.empty(),
                 "{} names '{}' twice (corrupt, or written by a faulty tool): which entry holds "
                 "its data is ambiguous; a safetensors header names each tensor once",
                 where, keys.duplicate);
  const std::uint64_t data_size = file_size - data_start_;
  std::vector<std::tuple<std::uint64_t, std::uint64_t, std::string>> starts;  // begin, end, name
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      const std::string meta = fmt::format("'{}': __metadata__", path);
      CAROUSEL_CHECK(value.is_object(), "{} must be an object, found {}", meta, value.type_name());
      for (const auto& [k, v] : value.items()) metadata_[k] = json_string(v, meta, k);
      continue;
    }
    const std::string entry = fmt::format("'{}': tensor '{}'", path, name);
    SafetensorsEntry e;
    const std::string dtype = json_string(json_field(value, "dtype", entry), entry, "dtype");
    CAROUSEL_CHECK(parse_dtype(dtype, e), "{} has dtype '{}'; supported: F32, F64, BF16, F16, I32",
                   entry, dtype);
    const auto& shape = json_field(value, "shape", entry);
    CAROUSEL_CHECK(shape.is_array(), "{}: field 'shape' must be an array, found {}", entry,
                   shape.type_name());
    std::uint64_t expected = e.element_size;
    for (const auto& dim : shape) {
      const std::uint64_t d = json_unsigned(dim, entry, "shape", 1ULL << 48);
      CAROUSEL_CHECK(!__builtin_mul_overflow(expected, d, &expected), "{}: shape {} is too large",
                     entry, shape.dump());
      e.shape.push_back(std::int64_t(d));
    }
    const auto& off = json_field(value, "data_offsets", entry);
    CAROUSEL_CHECK(off.is_array() && off.size() == 2,
                   "{}: field 'data_offsets' must be an array [begin, end], found {}", entry,
                   json_excerpt(off));
    e.begin = json_unsigned(off[0], entry, "data_offsets");
    e.end = json_unsigned(off[1], entry, "data_offsets");
    CAROUSEL_CHECK(e.begin <= e.end && e.end <= data_size,
                   "{} has data_offsets [{}, {}] outside the data section of {} bytes (truncated "
                   "or corrupt)",
                   entry, e.begin, e.end, data_size);
    CAROUSEL_CHECK(e.end - e.begin == expected,
                   "{} ({} {}) needs {} bytes but its data_offsets [{}, {}] hold {} (dtype or "
                   "shape does not match the data)",
                   entry, e.dtype_name, shape_str(e.shape), expected, e.begin, e.end,
                   e.end - e.begin);
    starts.emplace_back(e.begin, e.end, name);
    entries_[name] = e;
  }
  // The format's rule: the tensors cover the data section exactly, no overlaps, no holes, no
  // trailing bytes. A header length a few bytes off (which would shift every tensor) breaks it.
  std::sort(starts.begin(), starts.end());
  std::uint64_t covered = 0;
  std::string previous;
  for (const auto& [begin, end, name] : starts) {
    CAROUSEL_CHECK(begin >= covered,
                   "'{}': tensors '{}' and '{}' overlap at data offset {} (corrupt file)", path,
                   previous, name, begin);
    CAROUSEL_CHECK(begin == covered,
                   "'{}': {} bytes before tensor '{}' (data offset {}) belong to no tensor "
                   "(header length wrong, or corrupt file)",
                   path, begin - covered, name, covered);
    covered = end;
    previous = name;
  }
  CAROUSEL_CHECK(covered == data_size,
                 "'{}': the tensors end at data offset {} but the data section is {} bytes: {} "
                 "trailing bytes (header length {} wrong, or corrupt file)",
                 path, covered, data_size, data_size - covered, n);
}

std::vector<char> SafetensorsFile::read(const std::string& name) const {
  const auto it = entries_.find(name);
  CAROUSEL_CHECK(it != entries_.end(), "'{}' has no tensor '{}'", path_, name);
  const SafetensorsEntry& e = it->second;
  std::vector<char> bytes(e.end - e.begin);
  // Opened per read: a directory of thousands of parts never holds thousands of descriptors.
  read_exactly(ReadOnlyFile("", path_, "safetensors file"), data_start_ + e.begin, bytes.size(),
               bytes.data(), path_);
  return bytes;
}

void check_finite_f32(const void* values, const Shape& shape, const std::string& file,
                      const std::string& tensor) {
  const auto* bytes = static_cast<const unsigned char*>(values);
  const std::int64_t n = numel(shape);
  std::int64_t bad = 0, first = -1;
  float first_value = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes + 4 * i, sizeof(v));
    if (std::isfinite(v)) continue;
    if (bad++ == 0) {
      first = i;
      first_value = v;
    }
  }
  if (bad == 0) return;
  std::string index;  // the flat position as a multi-dimensional index
  for (std::size_t d = shape.size(), rest = std::size_t(first); d-- > 0;) {
    index = fmt::format("{}{}", rest % std::size_t(shape[d]), index.empty() ? "" : ", " + index);
    rest /= std::size_t(shape[d]);
  }
  fail(
      "'{}': tensor '{}' {} holds {} at [{}] ({} non-finite value{} of {}): the file is "
      "corrupt or was saved from a diverged run; load another checkpoint or model",
      file, tensor, shape_str(shape), first_value, index, bad, bad == 1 ? "" : "s", n);
}

}  // namespace carousel
