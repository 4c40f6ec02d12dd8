// yaml_document.cpp — a config file's one YAML document (yaml_document.h).
//
// Why not YAML::LoadAll: yaml-cpp 0.7 never ends some malformed input (`,x`): its parser reports
// an empty document at the same place again and again, and LoadAll collects them until memory
// runs out (found by fuzz_config). The documents' starts are walked first through the event API,
// stopping at the third document or at a start that did not move (the text is then not YAML),
// and only the first document is loaded.
#include "host/config/yaml_document.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "compute/error.h"

namespace carousel {

namespace {

// Records where each document starts; every other event is ignored.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Where the first documents of `text` start (3 at most): a start that did not move is not YAML.
std::vector<YAML::Mark> document_starts(const std::string& path, const std::string& text) {
  std::stringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts d;
  while (d.starts.size() < 3 && parser.HandleNextDocument(d)) {
    const auto& s = d.starts;
    if (s.size() >= 2 && s[s.size() - 1].pos == s[s.size() - 2].pos) {
      fail("config file '{}' is not valid YAML: line {}, column {}: the YAML parser cannot get "
           "past this point (a stray character such as ',' where a key should start?)",
           path, s.back().line + 1, s.back().column + 1);
    }
  }
  return d.starts;
}

}  // namespace

YAML::Node load_config_document(const std::string& path, const std::string& text) {
  try {
    const std::vector<YAML::Mark> starts = document_starts(path, text);
    CAROUSEL_CHECK(starts.size() <= 1,
                   "config file '{}' holds {}{} YAML documents (a '---' line starts another, "
                   "from line {}); a config file is one map of `key: value` lines",
                   path, starts.size() > 2 ? "more than " : "",
                   std::min<std::size_t>(starts.size(), 2),
                   starts.size() > 1 ? starts[1].line + 1 : 0);
    return starts.empty() ? YAML::Node() : YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail("config file '{}' is not valid YAML: line {}, column {}: {}", path, e.mark.line + 1,
         e.mark.column + 1, e.msg);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("config file '{}' cannot be parsed as YAML: {}", path, e.what());
  }
}

}  // namespace carousel
