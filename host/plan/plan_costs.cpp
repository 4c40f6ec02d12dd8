// plan_costs.cpp — a candidate's schedule costs from the FLOP model or from a measured costs
// file (scaled as plan_costs.h says), and the file's measured_* keys written and read.
#include "host/plan/plan_costs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>

#include "compute/error.h"
#include "host/config/schedule_config.h"
#include "models/params.h"
#include "models/stage.h"

namespace carousel::plan {

namespace {

// The config keys a costs file records about its run. The first ones must equal the planned
// workload's (a layer's work and the head's depend on them); the others say at which mesh the
// costs were measured, so the planner can scale them.
const std::vector<std::string>& matching_keys() {
  static const std::vector<std::string> keys = {
      "decoder_block",        "vocab_size",        "base_emb_dim",
      "base_num_query_heads", "base_num_kv_heads", "base_mlp_dim",
      "logits_via_embedding", "max_target_length", "dtype",
      "remat_policy"};
  return keys;
}
const std::vector<std::string>& descriptive_keys() {
  static const std::vector<std::string> keys = {"device", "base_num_decoder_layers",
                                                "ici_pipeline_parallelism", "ici_fsdp_parallelism"};
  return keys;
}
constexpr const char* kPrefix = "measured_";
const std::vector<std::string> kCostKeys = {
    "schedule_cost_f",   "schedule_cost_b",          "schedule_cost_w",
    "schedule_cost_p2p", "schedule_cost_all_gather", "schedule_cost_reduce_scatter",
    "schedule_cost_head"};

const ConfigKey& config_key(const std::string& name) {
  for (const auto& k : config_keys()) {
    if (k.name == name) return k;
  }
  CAROUSEL_ASSERT(false, "no config key '{}'", name);
  return config_keys().front();
}

double link(const Cluster& c, bool inter) {
  return inter ? c.inter_node_bytes_per_second : c.intra_node_bytes_per_second;
}

// The share of a buffer each member of a ring of `group` sends in an all-gather or
// reduce-scatter: (G-1)/G.
double ring_fraction(std::int64_t group) { return double(group - 1) / double(group); }

// A layer's parameters on one tensor and expert rank, averaged over the layers (dense and MoE
// layers differ).
double layer_elements(const ModelConfig& m, int tensor, int experts) {
  double n = 0;
  for (const auto& spec : table_of(m, tensor, experts))
    n += spec.layer >= 0 ? double(numel(spec.shape)) : 0.0;
  return n / double(m.num_layers);
}

// The share of a layer's forward FLOPs a backward under `policy` recomputes: 0 for none, 1 for
// full, and for a selective policy the GEMMs and attention whose outputs it does not keep.
double recomputed_share(const ModelConfig& m, const std::string& policy) {
  const RematPolicy p = parse_remat_policy(policy);
  if (p == RematPolicy::None) return 0;
  if (p == RematPolicy::Full) return 1;
  const RematKeep keep = remat_keep(p);
  const double E = double(m.emb_dim), hd = double(m.head_dim());
  const double qkv = 2 * E * hd * double(m.num_query_heads + 2 * m.num_kv_heads);
  const double out = 2 * E * hd * double(m.num_query_heads),
               attention = 2.0 * double(m.max_target_length) * E;
  const double mlp_in = 2 * (dense_mlp_matrices(m) - 1) * E * double(m.mlp_dim);  // gate, up
  const double redone = (keep.qkv ? 0 : qkv) + (keep.context ? 0 : attention) +
                        (keep.out_proj ? 0 : out) + (keep.mlp_in ? 0 : mlp_in);
  return redone / layer_forward_flops_per_token(m);
}

}  // namespace

// The seconds a layer's forward waits for its tensor, context and expert groups (their
// collectives sit between its GEMMs), from the bytes plan_traffic counts, plus each
// collective's latency floor: one per tensor-parallel piece of the layer for T > 1
// (tensor_collectives_per_layer: the sequence-parallel gathers and reduce-scatters around
// attention and the MLP), 2 for C > 1 (the keys' and values' gathers), 1
// for E > 1 (the row counts' all-gather; an expert group is on the data axis). The rows'
// exchanges are actions of the schedule (schedule_cost_exchange), which DualPipeV's pairs hide.
LayerWaits layer_waits(const Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  const LayerTraffic t = layer_traffic(cfg);
  LayerWaits w;
  w.tensor = t.tensor / link(cluster, links.tensor_inter) +
             (cfg.ici_tensor_parallelism > 1 ? tensor_collectives_per_layer() : 0) *
                 cluster.message_seconds;
  w.context = t.context / link(cluster, links.context_inter) +
              (cfg.ici_context_parallelism > 1 ? 2 : 0) * cluster.message_seconds;
  w.expert = t.expert_counts / link(cluster, links.data_inter) +
             (cfg.ici_expert_parallelism > 1 ? 1 : 0) * cluster.message_seconds;
  // A backward waits again for the collectives of the forward it recomputes: the FLOP model's
  // for any recomputation, a measured file's for full remat (the measured B holds the rest).
  const bool recomputes = cluster.measured ? cfg.remat_policy == "full"
                                           : recomputed_share(cfg.model, cfg.remat_policy) > 0;
  w.backward_factor = recomputes ? 2 : 1;
  return w;
}

namespace {

// The FLOP model: compute at peak x efficiency, communication over the links' bandwidths. With
// tensor and context parallelism a rank computes 1 / (T x C) of a layer's work on the
// microbatch and waits for their collectives (a backward with remat: twice, the recomputed
// forward's and its own).
void set_flop_model_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  const ModelConfig& m = cfg.model;
  const double tokens = double(context_tokens(cfg)) / double(cfg.ici_tensor_parallelism);
  const double f =
      layer_forward_flops_per_token(m) * tokens / (cluster.peak_flops * cluster.compute_efficiency);
  const bool remat = cfg.remat_policy == "full";
  // A selective policy's backward recomputes the GEMMs (and attention) whose outputs it did not
  // keep: that share of a forward.
  const double recompute = remat ? 1.0 : recomputed_share(m, cfg.remat_policy);
  const LayerWaits waits = layer_waits(cfg, cluster, links);
  // Kernels a Llama layer launches: forward = 2 norms, QKV, RoPE, attention, O, 2 residual adds,
  // gate/up, SwiGLU, down; its backward about twice that; W the 7 weight-gradient GEMMs.
  constexpr double kForwardKernels = 12, kWeightGradientKernels = 7;
  const double launch = cluster.kernel_seconds;
  cfg.schedule_cost_f = f + waits.total() + kForwardKernels * launch;
  cfg.schedule_cost_b = (2 + recompute) * f + waits.backward_factor * waits.total() +
                        (remat ? 3 : 2) * kForwardKernels * launch;
  cfg.schedule_cost_w = f + kWeightGradientKernels * launch;
  const double c = compute_bytes(cfg);
  cfg.schedule_cost_p2p =
      cfg.ici_pipeline_parallelism > 1
          ? double(rank_rows(cfg) * m.emb_dim) * c / link(cluster, links.any_hop_inter()) +
                cluster.message_seconds
          : 0.0;
  const double share =
      ring_fraction(cfg.ici_fsdp_parallelism) *
      layer_elements(m, int(cfg.ici_tensor_parallelism), int(cfg.ici_expert_parallelism)) /
      link(cluster, links.fsdp_inter);
  const double message = cfg.ici_fsdp_parallelism > 1 ? cluster.message_seconds : 0.0;
  cfg.schedule_cost_all_gather = share * c + message;
  cfg.schedule_cost_reduce_scatter = share * 4 + message;  // float32 gradients
  cfg.schedule_cost_exchange =
      cfg.ici_expert_parallelism > 1
          ? expert_rows_bytes(cfg) / link(cluster, links.data_inter) + cluster.message_seconds
          : 0.0;
}

// The measured costs, scaled from the measuring run's microbatch, FSDP degree and links to the
// candidate's; what the run could not measure stays the FLOP model's (set before).
void scale_measured_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  const MeasuredCosts& m = *cluster.measured;
  // A costs file is measured without tensor or context parallelism: a candidate's rank does
  // 1 / (T x C) of that work and waits for those groups' collectives (layer_waits).
  const double rows = double(microbatch_rows(cfg)) / double(m.microbatch_sequences) /
                      double(cfg.ici_tensor_parallelism * cfg.ici_context_parallelism);
  const LayerWaits waits = layer_waits(cfg, cluster, links);
  cfg.schedule_cost_f = m.f * rows + waits.total();
  cfg.schedule_cost_b = m.b * rows + waits.backward_factor * waits.total();
  cfg.schedule_cost_w = m.w * rows;
  // The measuring run's ranks were on one node: its hand-offs and collectives ran at the
  // intra-node speed.
  const double slower = cluster.intra_node_bytes_per_second / cluster.inter_node_bytes_per_second;
  if (cfg.ici_pipeline_parallelism > 1 && m.on.ici_pipeline_parallelism > 1) {
    cfg.schedule_cost_p2p = m.p2p * rows * (links.any_hop_inter() ? slower : 1.0);
  }
  const std::int64_t F = cfg.ici_fsdp_parallelism, F0 = m.on.ici_fsdp_parallelism;
  if (F > 1 && F0 > 1) {
    const double ring = ring_fraction(F) / ring_fraction(F0) / double(cfg.ici_tensor_parallelism) *
                        (links.fsdp_inter ? slower : 1.0);  // a tensor rank gathers its parts
    cfg.schedule_cost_all_gather = m.all_gather * ring;
    cfg.schedule_cost_reduce_scatter = m.reduce_scatter * ring;
  }
}

}  // namespace

double layer_forward_flops_per_token(const ModelConfig& m) {
  double matmul = 0;
  for (const auto& spec : table_of(m)) {
    if (spec.layer == 0 && spec.shape.size() == 2) matmul += double(numel(spec.shape));
  }
  return 2 * matmul + 2.0 * double(m.max_target_length) * double(m.emb_dim);
}

double model_flops_per_token(const ModelConfig& m) {
  double matmul = 0;
  for (const auto& spec : table_of(m)) {
    if (spec.shape.size() != 2 || spec.role == ParamRole::Embedding) continue;
    // A token passes through k of the X routed experts.
    const double active =
        spec.expert.sharded() ? double(m.num_experts_per_tok) / double(m.num_experts) : 1.0;
    matmul += active * double(numel(spec.shape));
  }
  if (m.logits_via_embedding) matmul += double(m.vocab_size * m.emb_dim);  // the tied head
  const double attention =
      m.decoder_block == "simple"
          ? 0.0
          : 6.0 * double(m.num_layers) * double(m.max_target_length) * double(m.emb_dim);
  return 6 * matmul + attention;
}

double head_layers(const ModelConfig& m, const std::string& remat_policy, const Cluster& cluster) {
  if (cluster.measured && cluster.measured->head_measured) return cluster.measured->head;
  // The lm_head GEMM, its input and weight gradients: 6 V E FLOPs per token, in layers of
  // forward + backward, so the last stage's F and B together cost it exactly.
  const double head = 6.0 * double(m.vocab_size) * double(m.emb_dim);
  return head / ((1.0 + (remat_policy == "full" ? 3 : 2)) * layer_forward_flops_per_token(m));
}

void set_planner_costs(Config& cfg, const Cluster& cluster, const MeshLinks& links) {
  CAROUSEL_CHECK(cluster.peak_flops > 0 && cluster.compute_efficiency > 0 &&
                     cluster.intra_node_bytes_per_second > 0 &&
                     cluster.inter_node_bytes_per_second > 0,
                 "the planner needs a positive peak, efficiency and bandwidths");
  set_flop_model_costs(cfg, cluster, links);
  if (cluster.measured) scale_measured_costs(cfg, cluster, links);
  // The head is split over the tensor ranks by vocabulary as the layers are by heads and
  // columns: the same share of a layer's time whatever T.
  cfg.schedule_cost_head = head_layers(cfg.model, cfg.remat_policy, cluster);
}

std::string measured_on_yaml(const Config& cfg, bool head_measured) {
  std::string out =
      "# What these costs were measured on: `carousel plan --costs-file` checks its workload\n"
      "# against these and scales the costs to each candidate (carousel schedule ignores "
      "them).\n";
  for (const auto* keys : {&matching_keys(), &descriptive_keys()}) {
    for (const auto& name : *keys) {
      out += fmt::format("{}{}: {}\n", kPrefix, name, config_key(name).get(cfg));
    }
  }
  out += fmt::format("{}microbatch_sequences: {}  # per device: B / (M x F x D)\n", kPrefix,
                     microbatch_rows(cfg));
  out += fmt::format("{}head: {}\n", kPrefix, head_measured ? "true" : "false");
  return out;
}

MeasuredCosts read_measured_costs(const std::string& path) {
  MeasuredCosts m;
  m.path = path;
  Config costs;
  try {  // the loader's checks: a local file, valid YAML, only schedule_cost_* and measured_*
    costs = load_config("", {"schedule_costs_file=" + path}).config;
  } catch (const Error& e) {
    fail("--costs-file: {}", e.what());
  }
  std::map<std::string, std::string> measured;
  std::set<std::string> present;
  for (const auto& item : YAML::LoadFile(path)) {
    const std::string key = item.first.Scalar();
    present.insert(key);
    if (key.rfind(kPrefix, 0) == 0)
      measured[key.substr(std::string(kPrefix).size())] = item.second.Scalar();
  }
  std::vector<std::string> missing;
  for (const auto& key : kCostKeys) {
    if (!present.count(key)) missing.push_back(key);
  }
  std::vector<std::string> known = matching_keys();
  known.insert(known.end(), descriptive_keys().begin(), descriptive_keys().end());
  known.push_back("microbatch_sequences");
  known.push_back("head");
  for (const auto& name : known) {
    if (!measured.count(name)) missing.push_back(kPrefix + name);
  }
  CAROUSEL_CHECK(missing.empty(),
                 "--costs-file='{}' lacks {}: the planner needs every schedule_cost_* key and "
                 "what they were measured on (measured_* keys); a profiled run "
                 "(profiler_steps=N) writes them all to <run dir>/schedule_costs.yml",
                 path, fmt::join(missing, ", "));
  for (const auto& [name, value] : measured) {
    CAROUSEL_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
                   "--costs-file='{}' sets '{}{}', which is not a measured_* key; they are {}{}",
                   path, kPrefix, name, kPrefix, fmt::join(known, fmt::format(", {}", kPrefix)));
  }
  auto bad = [&](const std::string& name, const std::string& why) {
    fail("--costs-file='{}': {}{}={} is not valid: {}", path, kPrefix, name, measured.at(name),
         why);
  };
  for (const auto* keys : {&matching_keys(), &descriptive_keys()}) {
    for (const auto& name : *keys) {
      try {
        config_key(name).set(m.on, measured.at(name));
      } catch (const Error& e) {
        bad(name, e.what());
      }
    }
  }
  try {
    m.microbatch_sequences = std::stoll(measured.at("microbatch_sequences"));
  } catch (const std::exception&) {
    bad("microbatch_sequences", "it must be a whole number of sequences");
  }
  if (m.microbatch_sequences < 1) bad("microbatch_sequences", "it must be at least 1");
  const std::string head = measured.at("head");
  if (head != "true" && head != "false") bad("head", "it must be true or false");
  m.head_measured = head == "true";
  if (m.on.ici_pipeline_parallelism < 1) bad("ici_pipeline_parallelism", "it must be at least 1");
  if (m.on.ici_fsdp_parallelism < 1) bad("ici_fsdp_parallelism", "it must be at least 1");
  CAROUSEL_CHECK(costs.schedule_cost_f > 0 && costs.schedule_cost_b > 0,
                 "--costs-file='{}' has schedule_cost_f={} and schedule_cost_b={}; a measured "
                 "layer takes some time (both must be positive)",
                 path, costs.schedule_cost_f, costs.schedule_cost_b);
  // The file is in microseconds, the planner in seconds.
  m.f = costs.schedule_cost_f * 1e-6;
  m.b = costs.schedule_cost_b * 1e-6;
  m.w = costs.schedule_cost_w * 1e-6;
  m.p2p = costs.schedule_cost_p2p * 1e-6;
  m.all_gather = costs.schedule_cost_all_gather * 1e-6;
  m.reduce_scatter = costs.schedule_cost_reduce_scatter * 1e-6;
  m.head = costs.schedule_cost_head;
  return m;
}

void check_measured_on(const MeasuredCosts& m, const ModelConfig& model, const std::string& dtype,
                       const std::string& remat_policy) {
  Config planned;
  planned.model = model;
  planned.dtype = dtype;
  planned.remat_policy = remat_policy;
  // What the planner's flags can change to match, and what needs another measurement.
  const std::map<std::string, std::string> flag = {
      {"max_target_length", "--seq-len"}, {"dtype", "--dtype"}, {"remat_policy", "--remat"}};
  std::vector<std::string> differences, flags, measure;
  for (const auto& name : matching_keys()) {
    const ConfigKey& k = config_key(name);
    const std::string was = k.get(m.on), is = k.get(planned);
    if (was == is) continue;
    differences.push_back(fmt::format("{}={} (this plan: {})", name, was, is));
    if (flag.count(name)) flags.push_back(fmt::format("{}={}", flag.at(name), was));
    measure.push_back(fmt::format("{}={}", name, is));
  }
  if (differences.empty()) return;
  fail(
      "--costs-file='{}' was measured on another workload: {}. Its per-layer costs scale to "
      "other microbatch sizes, FSDP degrees and layer counts, not to other layer shapes, "
      "vocabularies, sequence lengths, dtypes or remat policies; {}measure this workload: a "
      "profiled run (profiler_steps=N) with {} (fewer layers will do) writes "
      "<run dir>/schedule_costs.yml",
      m.path, fmt::join(differences, ", "),
      flags.size() == differences.size() ? fmt::format("plan with {}, or ", fmt::join(flags, " "))
                                         : std::string(),
      fmt::join(measure, " "));
}

}  // namespace carousel::plan
