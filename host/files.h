// files.h — writing a whole text file, with one error wording for every file carousel writes
// (checkpoint metadata, traces, measured costs, tokenizer configs, `carousel schedule`'s files,
// benchmark reports).
#pragma once

#include <filesystem>
#include <string>

namespace carousel {

// Writes `text` to `path`, replacing the file. Throws carousel::Error naming the path and the
// system's reason when the file cannot be created or written (a full disk).
void write_text_file(const std::filesystem::path& path, const std::string& text);

}  // namespace carousel
