// config_load.cpp — builds a Config from a YAML file and key=value overrides.
//
// A config file is one flat YAML map of `key: value` lines. yaml-cpp accepts more than that and
// silently drops or merges some of it (a duplicate key keeps one value, a second document is
// ignored, an unterminated quote swallows the next lines into a value), so the file is checked
// here for each of those and refused with its name and line. Every failure is a carousel::Error
// naming the file (and line) or the command line, the key, the value and what is valid. MaxText's
// renamed keys are read under their new names (a warning each); MaxText keys carousel does not
// implement are named as such.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/config_effect.h"
#include "host/config/config_limits.h"
#include "host/config/paths.h"
#include "host/config/yaml_document.h"
#include "host/reliability/fault_injection.h"
#include "host/schedule/registry.h"

namespace carousel {

namespace {

namespace fs = std::filesystem;

// Bigger files or deeper bracket nesting are not configs (and could exhaust yaml-cpp's stack).
constexpr std::size_t kMaxConfigFileBytes = 1 << 20;
constexpr int kMaxNesting = 32;

const ConfigKey& find_key(const std::string& name, const std::string& where) {
  for (const auto& k : config_keys()) {
    if (k.name == name) return k;
  }
  if (const std::string instead = maxtext_equivalent(name); !instead.empty()) {
    fail("MaxText key '{}' is not a carousel key ({}); carousel's equivalent: {}", name, where,
         instead);
  }
  CAROUSEL_CHECK(!is_unsupported_maxtext_key(name),
                 "MaxText key '{}' is not supported by carousel ({}); remove it "
                 "(`carousel train --help-keys` lists the keys carousel implements)",
                 name, where);
  const std::string hint = closest_key(name);
  CAROUSEL_CHECK(hint.empty(),
                 "unknown config key '{}' ({}); did you mean '{}'? (`carousel train --help-keys` "
                 "lists all)",
                 name, where, hint);
  fail("unknown config key '{}' ({}); `carousel train --help-keys` lists all", name, where);
}

struct Assignment {
  std::string key, value;
  std::string source;  // for the printed table: "file PATH" | "command line"
  std::string where;   // for errors: "config file 'PATH' line N" | "command line"
};

// MaxText's old key names become their current ones, with a warning; one source setting both
// is refused (which value would win is not obvious).
void apply_aliases(std::vector<Assignment>& assignments) {
  for (const auto& alias : config_aliases()) {
    for (auto& a : assignments) {
      if (a.key != alias.old_name) continue;
      for (const auto& b : assignments) {
        CAROUSEL_CHECK(b.key != alias.new_name || b.source != a.source,
                       "{}: '{}' is MaxText's old name of '{}', which {} also sets; keep only "
                       "'{}'",
                       a.where, alias.old_name, alias.new_name, b.where, alias.new_name);
      }
      spdlog::warn("{}: config key '{}' is MaxText's old name of '{}'; read as '{}' (rename it)",
                   a.where, alias.old_name, alias.new_name, alias.new_name);
      a.key = alias.new_name;
    }
  }
}

std::string read_config_text(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  CAROUSEL_CHECK(fs::exists(st), "config file '{}' does not exist{}", path, relative_to_note(path));
  CAROUSEL_CHECK(!fs::is_directory(st), "config file '{}' is a directory, not a YAML file", path);
  CAROUSEL_CHECK(fs::is_regular_file(st), "config file '{}' is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  CAROUSEL_CHECK(in.good(), "config file '{}' cannot be read (permissions?)", path);
  std::string text;
  text.resize(kMaxConfigFileBytes + 1);
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(std::size_t(in.gcount()));
  CAROUSEL_CHECK(text.size() <= kMaxConfigFileBytes,
                 "config file '{}' is larger than {} bytes; a config is a short list of `key: "
                 "value` lines",
                 path, kMaxConfigFileBytes);
  int depth = 0;
  for (const char c : text) {
    depth += (c == '[' || c == '{') - (c == ']' || c == '}');
    CAROUSEL_CHECK(depth <= kMaxNesting,
                   "config file '{}' nests brackets deeper than {} levels; a config is a flat map "
                   "of `key: value` lines",
                   path, kMaxNesting);
  }
  return text;
}

const char* kind_of(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "empty";
  return "a single value";
}

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

bool is_list_key(const std::string& name) {
  for (const auto& k : config_keys()) {
    if (k.name == name) return k.type == "[int]";
  }
  return false;
}

// Every line with content must hold a key: a line that does not continues the value of the key
// above it (a quoted or plain value spanning lines, usually an unterminated quote).
void check_every_line_is_a_key(const std::string& path, const std::string& text,
                               const std::map<int, std::string>& key_at_line) {
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    if (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0 || line[0] == '%') continue;
    if (key_at_line.count(n)) continue;
    auto above = key_at_line.lower_bound(n);
    // An item of a block list ("  - 3") under a list key is part of that key's value.
    if (line[first] == '-' && above != key_at_line.begin() && is_list_key(std::prev(above)->second))
      continue;
    CAROUSEL_CHECK(above == key_at_line.begin(),
                   "config file '{}' line {}: '{}' is not a `key: value` line; YAML read it as "
                   "part of the value of '{}' (line {}): an unterminated quote, or a value "
                   "spanning lines? Put each key on its own line",
                   path, n, line, std::prev(above)->second, std::prev(above)->first);
    fail("config file '{}' line {}: '{}' is not a `key: value` line", path, n, line);
  }
}

// A quoted value must close on its own line: yaml-cpp accepts a quote left open at the end of the
// file, and one closed lines later joins those lines into the value.
void check_quote_closes(const std::string& where, const std::string& text, const YAML::Node& value,
                        const std::string& key) {
  if (value.Mark().is_null()) return;
  std::size_t at = 0;
  for (int line = 0; line < value.Mark().line && at != std::string::npos; ++line) {
    at = text.find('\n', at);
    if (at != std::string::npos) ++at;
  }
  if (at == std::string::npos) return;
  at += std::size_t(value.Mark().column);
  if (at >= text.size() || (text[at] != '"' && text[at] != '\'')) return;
  const char quote = text[at];
  for (std::size_t i = at + 1; i < text.size() && text[i] != '\n'; ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
      } else {
        return;
      }
    }
  }
  fail(
      "{}: the value of '{}' opens a {} quote that does not close on that line (an unterminated "
      "quote swallows the next lines into the value); close it on the same line",
      where, key, quote == '"' ? "double" : "single");
}

// A YAML list of plain values as the key's text form "a,b,c" (its parser checks each value).
std::string joined_list(const std::string& where, const std::string& key, const YAML::Node& list) {
  std::string text;
  for (const auto& item : list) {
    CAROUSEL_CHECK(item.IsScalar(),
                   "{}: key '{}' takes a list of integers such as [1, 3], but "
                   "one of its entries is {}",
                   where, key, kind_of(item));
    CAROUSEL_CHECK(!item.Scalar().empty(),
                   "{}: key '{}' takes a list of integers such as [1, 3], but one of its entries "
                   "is empty",
                   where, key);
    text += (text.empty() ? "" : ",") + item.Scalar();
  }
  return text;
}

std::vector<Assignment> read_yaml(const std::string& path) {
  const std::string text = read_config_text(path);
  const YAML::Node root = load_config_document(path, text);
  std::vector<Assignment> out;
  if (!root.IsDefined() || root.IsNull()) return out;
  CAROUSEL_CHECK(root.IsMap(),
                 "config file '{}' must be a map of `key: value` lines, but its top level is {} "
                 "(line {})",
                 path, kind_of(root), line_of(root));
  std::map<std::string, int> line_of_key;
  std::map<int, std::string> key_at_line;
  for (const auto& item : root) {
    const int line = line_of(item.first);
    const std::string where = fmt::format("config file '{}' line {}", path, line);
    CAROUSEL_CHECK(item.first.IsScalar() && !item.first.Scalar().empty(),
                   "{}: a key must be a plain name, not {}", where, kind_of(item.first));
    const std::string k = item.first.Scalar();
    CAROUSEL_CHECK(!line_of_key.count(k),
                   "config file '{}': key '{}' is set twice (lines {} and {}); remove one (YAML "
                   "would keep one of them silently)",
                   path, k, line_of_key[k], line);
    line_of_key[k] = line;
    key_at_line[line] = k;
    if (item.second.IsSequence() && is_list_key(k)) {  // `key: [1, 3]`: read as "1,3"
      out.push_back({k, joined_list(where, k, item.second), "file " + path, where});
      continue;
    }
    CAROUSEL_CHECK(item.second.IsScalar() || item.second.IsNull(),
                   "{}: key '{}' must have a single value, not {} (the config is flat: write "
                   "`{}: VALUE`; `carousel train --help-keys` lists each key's type)",
                   where, k, kind_of(item.second), k);
    check_quote_closes(where, text, item.second, k);
    out.push_back({k, item.second.IsNull() ? "" : item.second.Scalar(), "file " + path, where});
  }
  check_every_line_is_a_key(path, text, key_at_line);
  return out;
}

// A config file with MaxText's inheritance: `base_config: PATH` (relative to the file's folder)
// reads that file first, and this file's keys override it; bases may have bases. `chain` holds
// the files being read, for the cycle error.
std::vector<Assignment> read_config_file(const std::string& path,
                                         std::vector<std::string> chain = {}) {
  constexpr std::size_t kMaxDepth = 16;
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  for (const std::string& seen : chain) {
    CAROUSEL_CHECK(seen != canonical,
                   "config file '{}' inherits from itself through base_config ({} -> {}); a "
                   "base_config chain must end in a file without one",
                   path, fmt::join(chain, " -> "), canonical);
  }
  CAROUSEL_CHECK(chain.size() < kMaxDepth, "config file '{}': base_config chains are at most {} "
                 "files deep ({})", path, kMaxDepth, fmt::join(chain, " -> "));
  chain.push_back(canonical);
  std::vector<Assignment> own = read_yaml(path), out;
  for (const Assignment& a : own) {
    if (a.key != "base_config") continue;
    CAROUSEL_CHECK(!a.value.empty(), "{}: base_config needs a path (the file this one extends)",
                   a.where);
    const fs::path base = fs::path(a.value).is_absolute()
                              ? fs::path(a.value)
                              : fs::path(path).parent_path() / a.value;
    CAROUSEL_CHECK(fs::exists(base, ec),
                   "{}: base_config '{}' does not exist (looked for '{}': a relative base_config "
                   "is relative to the file that names it)",
                   a.where, a.value, base.string());
    out = read_config_file(base.string(), chain);
  }
  for (Assignment& a : own) {
    if (a.key != "base_config") out.push_back(std::move(a));
  }
  return out;
}

std::vector<Assignment> read_overrides(const std::vector<std::string>& overrides) {
  std::vector<Assignment> out;
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::error_code ec;
      CAROUSEL_CHECK(!fs::exists(o, ec),
                     "command-line argument '{}' is a file, not key=value; config files must "
                     "come first (carousel train config.yml key=value ...)",
                     o);
      fail("command-line argument '{}' is not key=value (e.g. steps=100)", o);
    }
    // MaxText's inheritance belongs to a file; on the command line the file itself comes first.
    CAROUSEL_CHECK(o.substr(0, eq) != "base_config",
                   "command-line argument '{}': base_config is read from a config file (the file "
                   "it extends); on the command line give that file itself before the overrides: "
                   "carousel train {} key=value ...",
                   o, o.substr(eq + 1));
    out.push_back({o.substr(0, eq), o.substr(eq + 1), "command line", "command line"});
  }
  return out;
}

}  // namespace

// schedule_costs_file: the schedule_cost_* keys a profiled run measured (schedule_costs.yml)
// replace the defaults; a key the config file or the command line set keeps its value.
namespace {

// MaxText's dcn_* factors multiply the ici_* ones. carousel orders ranks data, pipeline, fsdp,
// context, tensor from the outermost (host/mesh/mesh.h) and a node's processes are
// consecutive ranks, so each axis's dcn factor sits outside its ici factor; across axes, an axis
// with a dcn factor must not lie inside one with an ici factor (that would put the inner axis's
// nodes between one node's ranks). Folded, the run and its saved config hold the products.
void fold_dcn_axes(Config& cfg, std::map<std::string, std::string>& source) {
  struct Axis {
    const char* name;
    std::int64_t* ici;
    std::int64_t* dcn;
  };
  std::int64_t no_dcn = 1;  // expert ranks sit inside the data axis; no dcn_expert factor
  const Axis axes[] = {{"data", &cfg.ici_data_parallelism, &cfg.dcn_data_parallelism},
                       {"expert", &cfg.ici_expert_parallelism, &no_dcn},
                       {"pipeline", &cfg.ici_pipeline_parallelism, &cfg.dcn_pipeline_parallelism},
                       {"fsdp", &cfg.ici_fsdp_parallelism, &cfg.dcn_fsdp_parallelism},
                       {"context", &cfg.ici_context_parallelism, &cfg.dcn_context_parallelism},
                       {"tensor", &cfg.ici_tensor_parallelism, &cfg.dcn_tensor_parallelism}};
  std::string outer_ici;  // the outermost axis with an ici factor > 1 so far
  std::string allowed;    // axes a dcn factor may take: down to the outermost ici factor
  CAROUSEL_CHECK(
      cfg.dcn_tensor_parallelism == 1,
      "dcn_tensor_parallelism={}: carousel keeps a tensor group within a node (its ranks "
      "exchange activations at every layer); valid: 1, with ici_tensor_parallelism "
      "inside the node",
      cfg.dcn_tensor_parallelism);
  for (const Axis& axis : axes) {
    CAROUSEL_CHECK(*axis.dcn >= 1 && *axis.dcn <= kMaxMeshAxis,
                   "dcn_{}_parallelism={} is not valid; it must be in [1, {}]", axis.name,
                   *axis.dcn, kMaxMeshAxis);
    CAROUSEL_CHECK(*axis.dcn == 1 || (*axis.ici >= 1 && *axis.ici <= kMaxMeshAxis),
                   "ici_{}_parallelism={} is not valid with dcn_{}_parallelism={}; it must be in "
                   "[1, {}]",
                   axis.name, *axis.ici, axis.name, *axis.dcn, kMaxMeshAxis);
    if (outer_ici.empty() && std::string(axis.name) != "tensor" && axis.dcn != &no_dcn)
      allowed += (allowed.empty() ? "" : ", ") + std::string(axis.name);
    if (*axis.dcn > 1 && !outer_ici.empty() && outer_ici != axis.name) {
      fail(
          "dcn_{}_parallelism={} with ici_{}_parallelism > 1: carousel orders ranks data, "
          "expert, pipeline, fsdp, context, tensor (outermost first) with each node's ranks "
          "consecutive, so a {} axis across nodes cannot sit inside a {} axis within a node; "
          "valid: dcn_* on {} only (or move the {} factor across nodes too)",
          axis.name, *axis.dcn, outer_ici, axis.name, outer_ici, allowed, outer_ici);
    }
    if (*axis.ici > 1 && outer_ici.empty()) outer_ici = axis.name;
  }
  for (const Axis& axis : axes) {
    if (*axis.dcn == 1) continue;
    const std::string ici = fmt::format("ici_{}_parallelism", axis.name);
    // The product is the axis: bounded as one (validation would name only the folded product,
    // as if the user had set ici_*_parallelism to it).
    CAROUSEL_CHECK(*axis.ici <= kMaxMeshAxis / *axis.dcn,
                   "{}={} x dcn_{}_parallelism={} = {} ranks on the {} axis; an axis (ici x dcn) "
                   "has at most {} ranks: lower either factor",
                   ici, *axis.ici, axis.name, *axis.dcn, *axis.ici * *axis.dcn, axis.name,
                   kMaxMeshAxis);
    source[ici] = fmt::format("{} x dcn_{}_parallelism={}", *axis.ici, axis.name, *axis.dcn);
    source[fmt::format("dcn_{}_parallelism", axis.name)] = fmt::format("folded into {}", ici);
    *axis.ici *= *axis.dcn;
    *axis.dcn = 1;
  }
}

}  // namespace

// A schedule with one stage per rank (its registry row: no repeats) and no stage layout given:
// L = N / S, so that R = 1, instead of the default L = 1 and a refusal of the R = N / S that it
// implies. Layouts the user gave (L, R, uneven stages) are kept and checked as they are.
void derive_layers_per_stage(Config& cfg, std::map<std::string, std::string>& source) {
  if (source.count("num_layers_per_pipeline_stage") || source.count("num_pipeline_repeats") ||
      cfg.uneven_stages() || cfg.ici_pipeline_parallelism < 1 || cfg.pipelined_layers() < 1 ||
      cfg.pipelined_layers() > cfg.model.num_layers ||
      cfg.pipelined_layers() % cfg.ici_pipeline_parallelism != 0) {
    return;
  }
  const schedule::ScheduleInfo* row = nullptr;
  try {
    row = &schedule::find_schedule(cfg.pipeline_schedule);
  } catch (const Error&) {
    return;  // validation names the unknown schedule
  }
  if (row->repeats) return;
  cfg.num_layers_per_pipeline_stage = cfg.pipelined_layers() / cfg.ici_pipeline_parallelism;
  source["num_layers_per_pipeline_stage"] =
      fmt::format("derived: {} layers / S={} (pipeline_schedule={} runs one stage per rank)",
                  cfg.pipelined_layers(), cfg.ici_pipeline_parallelism, cfg.pipeline_schedule);
}

void apply_schedule_costs_file(Config& cfg, std::map<std::string, std::string>& source) {
  if (cfg.schedule_costs_file.empty()) return;
  check_local_path("schedule_costs_file", cfg.schedule_costs_file);
  std::vector<Assignment> costs;
  try {
    costs = read_yaml(cfg.schedule_costs_file);
  } catch (const Error& e) {
    fail("schedule_costs_file: {}", e.what());
  }
  for (const auto& a : costs) {
    // measured_* keys say what the costs were measured on: for the planner (host/plan/
    // plan_costs.h), which scales them; a schedule of one config takes them as they are.
    if (a.key.rfind("measured_", 0) == 0) continue;
    CAROUSEL_CHECK(a.key.rfind("schedule_cost_", 0) == 0,
                   "schedule_costs_file: {} sets '{}'; the file may set only schedule_cost_* keys "
                   "and the measured_* keys describing its run (a profiled run writes it as "
                   "<run dir>/schedule_costs.yml)",
                   a.where, a.key);
    if (source.count(a.key)) continue;
    try {
      find_key(a.key, a.where).set(cfg, a.value);
    } catch (const Error& e) {
      fail("{}: {}", a.where, e.what());
    }
    source[a.key] = a.source;
  }
}

LoadedConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  return load_config(yaml_path.empty() ? std::vector<std::string>{}
                                        : std::vector<std::string>{yaml_path},
                     overrides);
}

LoadedConfig load_config(const std::vector<std::string>& yaml_paths,
                         const std::vector<std::string>& overrides) {
  std::vector<Assignment> assignments;
  for (const std::string& path : yaml_paths) {  // later files override earlier ones
    for (auto& a : read_config_file(path)) assignments.push_back(std::move(a));
  }
  for (auto& a : read_overrides(overrides)) assignments.push_back(std::move(a));
  apply_aliases(assignments);
  for (const auto& a : assignments) find_key(a.key, a.where);  // unknown keys first

  LoadedConfig out;
  Config& cfg = out.config;
  std::map<std::string, std::string> source;
  // The model preset first, so explicit model keys override it.
  std::string preset_where = "default";
  for (const auto& a : assignments) {
    if (a.key == "model_name") {
      cfg.model_name = a.value;
      source["model_name"] = a.source;
      preset_where = a.where;
    }
  }
  try {
    cfg.model = model_preset(cfg.model_name);
  } catch (const Error& e) {
    fail("{}: {}", preset_where, e.what());
  }
  if (cfg.model_name != "tiny") {
    for (const auto& k : config_keys()) {
      if (k.resume == ResumeClass::Model) source[k.name] = "preset " + cfg.model_name;
    }
  }
  for (const auto& a : assignments) {
    if (a.key == "model_name") continue;
    try {
      find_key(a.key, a.where).set(cfg, a.value);
    } catch (const Error& e) {
      fail("{}: {}", a.where, e.what());
    }
    source[a.key] = a.source;
  }
  apply_schedule_costs_file(cfg, source);
  fold_dcn_axes(cfg, source);
  derive_layers_per_stage(cfg, source);
  for (const auto& k : config_keys()) {
    out.table.push_back({k.name, k.get(cfg), source.count(k.name) ? source[k.name] : "default"});
  }
  // A validation message starting with "key=" is about that key: name the file and line that
  // set it (a key from the command line is plain to see, and keeps the message the same as the
  // one of the check itself, e.g. the schedule registry's).
  std::map<std::string, std::string> where;
  for (const auto& a : assignments) {
    if (a.where != "command line") where[a.key] = a.where;
  }
  // The layer of each key the user gave: each file starts one, and so does each command-line
  // argument (a script's common arguments, then `enable_checkpointing=false`, turns a feature off).
  std::map<std::string, GivenKey> given;
  int layer = 0;
  for (std::size_t i = 0; i < assignments.size(); ++i) {
    if (i == 0 || assignments[i].source != assignments[i - 1].source ||
        assignments[i].source == "command line")
      ++layer;
    given[assignments[i].key] = {layer, assignments[i].where};
  }
  try {
    cfg.validate();
    check_keys_have_effect(cfg, given);
  } catch (const Error& e) {
    const std::string message = e.what();
    const auto eq = message.find('=');
    const auto it = eq == std::string::npos ? where.end() : where.find(message.substr(0, eq));
    if (it == where.end()) throw;
    fail("{} (from {})", message, it->second);
  }
  // CAROUSEL_FAULT (faults tests provoke) against this run: one that could never fire (a rank
  // the run lacks, a step it never reaches) is an error, not a test run silently without it.
  if (const char* faults = std::getenv("CAROUSEL_FAULT"); faults && *faults) {
    check_faults_for_run(parse_faults(faults),
                         {int(cfg.num_devices()), cfg.steps, cfg.enable_checkpointing,
                          cfg.checkpoint_period});
  }
  return out;
}

}  // namespace carousel
