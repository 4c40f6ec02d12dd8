// tensorboard.h — TensorBoard event files written as the run goes (docs/training.md#dashboards).
//
// <run dir>/tensorboard/events.out.tfevents.<unix time>.<host>.<pid>.carousel, one file per
// process start (TensorBoard reads every file of the directory; a resume adds one). Each record
// is TFRecord-framed (length, masked CRC-32C of the length, data, masked CRC-32C of the data)
// and holds one serialized tensorboard Event: the first says "brain.Event:2", a resumed run's
// second is SessionLog START at its first step, the others one scalar
// (Summary.Value.simple_value) with its step and wall time.
//
// Written by hand: the three messages need a dozen bytes of protobuf encoding each, and neither
// Debian nor PyPI has a C++ event writer without libprotobuf and generated code for TensorBoard's
// .proto files; CRC-32C (Castagnoli) is not in zlib.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/io/files.h"

namespace carousel {

// CRC-32C of `data` (polynomial 0x1EDC6F41, reflected), TFRecord's checksum before masking.
std::uint32_t crc32c(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates `directory` and a new event file in it; throws an Error naming it if it cannot (a
  // symlink, FIFO or file where the directory or the file goes: host/io/files.h). A run resumed
  // at `start_step` > 0 also writes SessionLog START at that step, so TensorBoard drops the
  // earlier files' events from that step on (steps a crash made run twice).
  TensorBoardWriter(const std::string& directory, std::int64_t start_step);
  // One scalar event per (tag, value) of `step`, written and flushed together; a failed write
  // throws an Error naming the file.
  void scalars(std::int64_t step, double wall_time,
               const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }
  // Empty while the event file is still at its path; otherwise what happened to it (removed,
  // with its directory perhaps, or replaced): later events would go nowhere TensorBoard looks.
  std::string lost() const;

 private:
  void append_record(const std::string& event);  // framed into pending_
  void flush();                                  // pending_ to the file
  std::string pending_;
  std::string path_;
  std::optional<OutputFile> out_;
};

}  // namespace carousel
