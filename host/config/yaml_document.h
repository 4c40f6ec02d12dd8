// yaml_document.h — a config file's text as its one YAML document, or one error naming the
// file, the line and what is wrong (not YAML, several documents). Split from config_load.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace carousel {

// The first and only document of `text` (an undefined node for an empty file); `path` names the
// file in errors.
YAML::Node load_config_document(const std::string& path, const std::string& text);

}  // namespace carousel
