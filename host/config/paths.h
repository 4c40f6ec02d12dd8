// paths.h — checks and wording for the file paths a user gives (dataset, tokenizer, checkpoints,
// outputs, config files), shared so every such error reads the same.
#pragma once

#include <string>

namespace carousel {

// Refuses a remote URL (gs://, s3://, http(s)://, any scheme://) as the value of `key`: carousel
// reads and writes local paths only. The error names the key and the value.
void check_local_path(const std::string& key, const std::string& value);

// For errors about a path a user gave: "" when it is absolute, else " (relative to the working
// directory '<cwd>')", so a relative path that does not resolve says where it was looked for.
std::string relative_to_note(const std::string& path);

// Refuses what is not a regular file before it is opened (a FIFO would block, a directory has no
// size): one error naming the key, what the file was for, the path and what it is instead.
void check_regular(const std::string& key, const std::string& path, const char* what);

// Refuses an existing output that is not a regular file or a character device (a FIFO would
// block the run before its first step, a directory or socket cannot be written): one error
// naming the key, what the file is for, the path and what it is. A missing file is fine.
void check_output_file(const std::string& key, const std::string& path, const char* what);

}  // namespace carousel
