// tensorboard.cpp — CRC-32C, the protobuf encoding of tensorboard's Event, TFRecord framing.
#include "host/report/tensorboard.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "compute/error.h"

namespace carousel {

namespace {

constexpr std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// TFRecord's masking: a checksum of data that holds checksums is itself hard to checksum.
std::uint32_t masked_crc(std::string_view data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protobuf wire format: field keys and values (little-endian fixed widths, base-128 varints).
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += char((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += char(v);
}
template <class T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as protobuf is
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_varint(out, std::uint64_t(field) << 3 | 2);  // wire type 2: length-delimited
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event_head(double wall_time, std::int64_t step) {
  std::string e;
  put_varint(e, 1 << 3 | 1);  // wire type 1: 64-bit
  put_fixed(e, wall_time);
  put_varint(e, 2 << 3 | 0);  // wire type 0: varint
  put_varint(e, std::uint64_t(step));
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  static constexpr auto table = crc32c_table();
  std::uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& directory, std::int64_t start_step) {
  check_output_directory(directory, "the TensorBoard directory");
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  CAROUSEL_CHECK(!ec, "cannot create the TensorBoard directory '{}': {} (enable_tensorboard=false "
                 "turns the event files off)", directory, ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const double now = now_seconds();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}.carousel", directory, std::int64_t(now),
                      host, ::getpid());
  // Opened below the run directory: the TensorBoard directory is not followed through a symlink
  // either.
  out_.emplace(path_, "TensorBoard event file", OutputMode::Append,
               std::filesystem::path(directory).parent_path());
  std::string first = event_head(now, 0);
  put_bytes(first, 3, "brain.Event:2");
  append_record(first);
  if (start_step > 0) {  // Event.session_log (field 7) = SessionLog { status (1) = START (1) }
    std::string session;
    put_varint(session, 1 << 3 | 0);
    put_varint(session, 1);
    std::string resumed = event_head(now, start_step);
    put_bytes(resumed, 7, session);
    append_record(resumed);
  }
  flush();
}

void TensorBoardWriter::scalars(std::int64_t step, double wall_time,
                                const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [tag, value] : values) {
    std::string v;  // Summary.Value { string tag = 1; float simple_value = 2; }
    put_bytes(v, 1, tag);
    put_varint(v, 2 << 3 | 5);  // wire type 5: 32-bit
    put_fixed(v, float(value));
    std::string summary;  // Summary { repeated Value value = 1; }
    put_bytes(summary, 1, v);
    std::string event = event_head(wall_time, step);
    put_bytes(event, 5, summary);
    append_record(event);
  }
  flush();
}

void TensorBoardWriter::append_record(const std::string& event) {
  std::string length;
  put_fixed(length, std::uint64_t(event.size()));
  pending_ += length;
  put_fixed(pending_, masked_crc(length));
  pending_ += event;
  put_fixed(pending_, masked_crc(event));
}

void TensorBoardWriter::flush() {
  std::string records = std::exchange(pending_, {});
  out_->write(records);  // one write: TensorBoard never reads half a step's events
}

std::string TensorBoardWriter::lost() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    return fmt::format(
        "TensorBoard event file '{}' was removed during the run ({}; with the TensorBoard "
        "directory '{}'?): the events written since went nowhere",
        path_, std::strerror(errno), std::filesystem::path(path_).parent_path().string());
  }
  if (std::pair{std::uint64_t(st.st_dev), std::uint64_t(st.st_ino)} != out_->id()) {
    return fmt::format(
        "TensorBoard event file '{}' was replaced by another file during the run: the events "
        "written since went to the old one",
        path_);
  }
  return "";
}

}  // namespace carousel
