// files.h — the one way carousel opens a file it writes (OutputFile: logs, metrics, TensorBoard
// events, traces, measured costs, the run lock, checkpoint files, `carousel schedule`'s files),
// writing a whole text file through it, the CRC32 that checkpoint manifests and `carousel
// inspect` use, and the read-only file that token shards and safetensors files are read from
// with pread (no shared cursor: safe from several threads; no mapping: a file changed underneath
// is an error, not a SIGBUS).
//
// Outputs live in a run directory that a cluster's users, cleanup jobs and stray scripts share,
// so an output path may hold anything: a symlink to another user's file (writing through it
// would truncate or append to that file), a FIFO (opening it blocks until a reader comes: a run
// that hangs, deaf to SIGTERM), a directory, a device. Every output is opened without following
// a symlink at its last component (and, given the run directory, at any directory below it),
// non-blocking, and kept only when it is a regular file; anything else is one error:
//   <what> '<path>' is a FIFO (named pipe): carousel writes only regular files in the run
//   directory; remove it
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

namespace carousel {

enum class OutputMode {
  Replace,  // created, or emptied (only once it is known to be a regular file)
  Append,   // created, or appended to
  Update,   // created, or opened read-write with its contents kept (the run lock)
};

// A regular file open for writing (closed on destruction; movable, not copyable).
class OutputFile {
 public:
  // Opens `path` for `mode`. `what` names it in errors ("metrics file"). With `within` (the run
  // directory) and `path` below it, each directory between them is opened without following a
  // symlink too, relative to the one above (openat): `within` itself may be a symlink the user
  // made, the directories carousel makes inside it may not. Errors: the refusal above for
  // anything but a regular file; "cannot create <what> '<path>': <reason>" (Replace) or
  // "<what> '<path>' cannot be opened for appending: <reason>" for the system's refusals.
  OutputFile(const std::filesystem::path& path, std::string what, OutputMode mode,
             const std::filesystem::path& within = {});
  ~OutputFile();
  OutputFile(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  OutputFile& operator=(OutputFile&&) = delete;

  // Writes all `n` bytes (short writes and EINTR retried), or throws "writing <what> '<path>'
  // failed<when>: <reason> (disk full?)"; `when` as " at step 3".
  void write(const void* data, std::size_t n, const std::string& when = "");
  void write(std::string_view bytes, const std::string& when = "") {
    write(bytes.data(), bytes.size(), when);
  }
  void sync();    // fsync, or throws naming the file
  int release();  // the descriptor, now the caller's to close
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& what() const { return what_; }
  // (device, inode) of the opened file: whether the path still names it (lost_output).
  std::pair<std::uint64_t, std::uint64_t> id() const { return id_; }

 private:
  int fd_ = -1;
  std::string path_, what_;
  std::pair<std::uint64_t, std::uint64_t> id_{};
};

// The kind of what is at `path`, unfollowed: "" for a regular file or nothing, else "a symlink
// (to '…')", "a FIFO (named pipe)", "a directory", "a character device", "a block device" or "a
// socket".
std::string output_kind(const std::filesystem::path& path);
// Checks an output before anything is written (a run's outputs, found before step 1): the
// refusal above when `path` exists and is not a regular file.
void check_output_path(const std::filesystem::path& path, const std::string& what);
// A directory carousel writes into (checkpoints/, tensorboard/, logs/): when it exists, a real
// directory, not a symlink to one elsewhere nor a file.
void check_output_directory(const std::filesystem::path& path, const std::string& what);

// Writes `text` to `path` through OutputFile (Replace). Throws carousel::Error naming `what`,
// the path and the system's reason when the file cannot be created or written (a full disk).
void write_text_file(const std::filesystem::path& path, const std::string& text,
                     const std::string& what = "file", const std::filesystem::path& within = {});

// zlib's CRC32 of `bytes` bytes at `data` (any size), continuing from `crc` (0 to start).
std::uint32_t crc32_of(const void* data, std::uint64_t bytes, std::uint32_t crc = 0);
// The CRC32 of a file's contents, read in blocks (of the bytes read: 0 for a file that cannot
// be opened).
std::uint32_t file_crc32(const std::filesystem::path& path);

// A file open for reading (closed on destruction; movable, not copyable).
class ReadOnlyFile {
 public:
  // Errors: "<key>: cannot open <what> '<path>': <reason>" (no "<key>: " when key is empty).
  ReadOnlyFile(const std::string& key, const std::string& path, const char* what);
  ~ReadOnlyFile();
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  std::uint64_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset`, or returns false (the file is shorter now, or EIO).
  bool read_at(std::uint64_t offset, std::size_t n, void* out) const;

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;  // when opened
};

}  // namespace carousel
