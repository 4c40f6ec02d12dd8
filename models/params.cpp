// params.cpp — the parameter table of each decoder block, ParamSet allocation and init.
#include "models/params.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "compute/error.h"
#include "compute/hash.h"

namespace carousel {

void check_tensor_split(const ModelConfig& cfg, int size) {
  if (size == 1) return;
  CAROUSEL_CHECK(cfg.is_llama(),
                 "ici_tensor_parallelism={} needs decoder_block=llama: tensor parallelism splits "
                 "attention heads and MLP columns, which decoder_block={} does not have",
                 size, cfg.decoder_block);
  auto divisors = [](std::int64_t n) {
    std::string out;
    for (std::int64_t d = 1; d <= n && d <= 1024; ++d) {
      if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
    }
    return out;
  };
  CAROUSEL_CHECK(cfg.num_query_heads % size == 0,
                 "ici_tensor_parallelism={} does not divide base_num_query_heads={}: each tensor "
                 "rank computes whole heads; valid values: {}",
                 size, cfg.num_query_heads, divisors(cfg.num_query_heads));
  CAROUSEL_CHECK(cfg.num_kv_heads % size == 0 || size % cfg.num_kv_heads == 0,
                 "ici_tensor_parallelism={} and base_num_kv_heads={}: KV heads are split over the "
                 "tensor ranks when base_num_kv_heads is a multiple of T and shared by T / "
                 "base_num_kv_heads ranks when T is a multiple of it; neither holds",
                 size, cfg.num_kv_heads);
  CAROUSEL_CHECK(cfg.vocab_size % size == 0,
                 "ici_tensor_parallelism={} does not divide vocab_size={}: each tensor rank holds "
                 "vocab_size / T rows of the embedding and lm_head (vocabulary parallelism); "
                 "valid values: {} (or pad the vocabulary to a multiple of T)",
                 size, cfg.vocab_size, divisors(cfg.vocab_size));
  CAROUSEL_CHECK(cfg.mlp_dim % size == 0,
                 "ici_tensor_parallelism={} does not divide base_mlp_dim={}: each tensor rank "
                 "holds mlp_dim / T MLP columns; valid values: {}",
                 size, cfg.mlp_dim, divisors(cfg.mlp_dim));
  CAROUSEL_CHECK(!cfg.is_moe() || cfg.expert_mlp_dim() % size == 0,
                 "ici_tensor_parallelism={} does not divide base_moe_mlp_dim={}: each tensor rank "
                 "holds expert_mlp_dim / T columns of every expert; valid values: {}",
                 size, cfg.expert_mlp_dim(), divisors(cfg.expert_mlp_dim()));
}

int kv_replicas(const ModelConfig& cfg, int size) {
  return cfg.num_kv_heads % size == 0 ? 1 : int(size / cfg.num_kv_heads);
}

std::int64_t kv_heads_per_rank(const ModelConfig& cfg, int size) {
  return kv_replicas(cfg, size) == 1 ? cfg.num_kv_heads / size : 1;
}

namespace {

// Rows [begin, begin + length) (dim 0) or columns (dim 1) of a whole tensor on the tensor axis,
// held by `holders` tensor ranks.
ParamSpec slice(ParamSpec whole, int dim, std::int64_t begin, std::int64_t length,
                int holders = 1) {
  whole.whole_shape = whole.shape;
  whole.shape[std::size_t(dim)] = length;
  whole.tensor = Placement::shard(dim, begin, holders);
  return whole;
}

// A mixture-of-experts MLP's parameters (params.h): router, shared experts, routed experts by
// kind (each kind's X matrices consecutive). With tensor parallelism every expert (and the
// shared ones) is split by columns like the dense MLP; the router is whole on every rank, each
// computing its gradient from its own rows.
void add_moe_mlp(const ModelConfig& cfg, int layer, TensorSplit split, ExpertSplit experts,
                 std::vector<ParamSpec>& t) {
  const std::string p = fmt::format("model.layers.{}.mlp.", layer);
  const std::int64_t E = cfg.emb_dim, X = cfg.num_experts, Fe = cfg.expert_mlp_dim();
  const int T = split.size, r = split.rank;
  t.push_back({p + "gate.weight", {X, E}, ParamRole::Router, layer});  // replicated
  // Columns [r F / T, (r + 1) F / T) of a gate or up [F, E] (dim 0) or a down [E, F] (dim 1).
  const auto columns = [&](ParamSpec whole, int dim) {
    const std::int64_t F = whole.shape[std::size_t(dim)];
    return slice(std::move(whole), dim, r * F / T, F / T);
  };
  if (cfg.shared_experts > 0) {
    const std::int64_t Fs = cfg.shared_experts * Fe;
    const std::string shared = p + "shared_experts.";
    t.push_back(columns({shared + "gate_proj.weight", {Fs, E}, ParamRole::WGate, layer}, 0));
    t.push_back(columns({shared + "up_proj.weight", {Fs, E}, ParamRole::WUp, layer}, 0));
    t.push_back(columns({shared + "down_proj.weight", {E, Fs}, ParamRole::WDown, layer}, 1));
  }
  const std::pair<const char*, ParamRole> kinds[] = {{"gate_proj", ParamRole::ExpertGate},
                                                     {"up_proj", ParamRole::ExpertUp},
                                                     {"down_proj", ParamRole::ExpertDown}};
  for (const auto& [name, role] : kinds) {
    const bool down = role == ParamRole::ExpertDown;
    const Shape shape = down ? Shape{E, Fe} : Shape{Fe, E};
    const std::int64_t mine = X / experts.size;  // this expert rank's
    for (std::int64_t j = experts.rank * mine; j < (experts.rank + 1) * mine; ++j) {
      ParamSpec expert = columns(
          {fmt::format("{}experts.{}.{}.weight", p, j, name), shape, role, layer}, down ? 1 : 0);
      expert.expert = Placement::dealt();  // on this expert rank only
      t.push_back(std::move(expert));
    }
  }
}

}  // namespace

std::vector<ParamSpec> param_table(const ModelConfig& cfg, TensorSplit split, ExpertSplit experts) {
  const std::int64_t E = cfg.emb_dim;
  std::vector<ParamSpec> t;
  if (!cfg.is_llama()) {
    for (int i = 0; i < cfg.num_layers; ++i) {
      t.push_back({fmt::format("layers.{}.w", i), {E, E}, ParamRole::SimpleW, i});
    }
    return t;
  }
  check_tensor_split(cfg, split.size);
  const std::int64_t V = cfg.vocab_size, hd = cfg.head_dim(), H = cfg.num_query_heads,
                     Hkv = cfg.num_kv_heads, Fm = cfg.mlp_dim;
  const int T = split.size, r = split.rank;
  // This rank's query heads, KV heads (split, or the one its query heads share) and MLP columns.
  const std::int64_t Hl = H / T, Fl = Fm / T;
  const int kv_shared = kv_replicas(cfg, T);
  const std::int64_t Hkv_l = kv_heads_per_rank(cfg, T);
  const std::int64_t kv_first = kv_shared == 1 ? r * Hkv_l : r / kv_shared;
  // Vocabulary parallelism: rank r holds rows [r V/T, (r + 1) V/T) of the embedding and lm_head.
  const std::int64_t Vl = V / T;
  t.push_back(slice({"model.embed_tokens.weight", {V, E}, ParamRole::Embedding}, 0, r * Vl, Vl));
  for (int i = 0; i < cfg.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    // Norm gains: whole on every tensor rank (replicated), each normalising its own rows.
    auto gain = [&](const std::string& name, ParamRole role) {
      return ParamSpec{p + name, {E}, role, i, false, true};
    };
    t.push_back(gain("input_layernorm.weight", ParamRole::AttnNorm));
    t.push_back(slice({p + "self_attn.q_proj.weight", {H * hd, E}, ParamRole::Wq, i}, 0,
                      r * Hl * hd, Hl * hd));
    t.push_back(slice({p + "self_attn.k_proj.weight", {Hkv * hd, E}, ParamRole::Wk, i}, 0,
                      kv_first * hd, Hkv_l * hd, kv_shared));
    t.push_back(slice({p + "self_attn.v_proj.weight", {Hkv * hd, E}, ParamRole::Wv, i}, 0,
                      kv_first * hd, Hkv_l * hd, kv_shared));
    t.push_back(slice({p + "self_attn.o_proj.weight", {E, H * hd}, ParamRole::Wo, i}, 1,
                      r * Hl * hd, Hl * hd));
    t.push_back(gain("post_attention_layernorm.weight", ParamRole::MlpNorm));
    if (cfg.is_moe_layer(i)) {
      add_moe_mlp(cfg, i, split, experts, t);
      continue;
    }
    t.push_back(slice({p + "mlp.gate_proj.weight", {Fm, E}, ParamRole::WGate, i}, 0, r * Fl, Fl));
    t.push_back(slice({p + "mlp.up_proj.weight", {Fm, E}, ParamRole::WUp, i}, 0, r * Fl, Fl));
    t.push_back(slice({p + "mlp.down_proj.weight", {E, Fm}, ParamRole::WDown, i}, 1, r * Fl, Fl));
  }
  t.push_back({"model.norm.weight", {E}, ParamRole::FinalNorm, -1, false, true});  // as the gains
  if (!cfg.logits_via_embedding) {
    t.push_back(slice({"lm_head.weight", {V, E}, ParamRole::LmHead}, 0, r * Vl, Vl));
  }
  return t;
}

std::int64_t ParamSpec::whole_index(std::int64_t i) const {
  if (tensor.dim < 0) return i;
  if (tensor.dim == 0) return tensor.begin * shape.back() + i;  // rows are contiguous
  const std::int64_t cols = shape.back(), whole_cols = whole().back();
  return i / cols * whole_cols + tensor.begin + i % cols;
}

std::vector<double> part_of_whole(const ParamSpec& spec, const std::vector<double>& whole) {
  CAROUSEL_ASSERT(std::int64_t(whole.size()) == numel(spec.whole()),
                  "'{}': {} values for a whole tensor of {}", spec.name, whole.size(),
                  numel(spec.whole()));
  std::vector<double> part(std::size_t(numel(spec.shape)));
  for (std::size_t i = 0; i < part.size(); ++i) part[i] = whole[spec.whole_index(std::int64_t(i))];
  return part;
}

void place_in_whole(const ParamSpec& spec, const std::vector<float>& part,
                    std::vector<float>& whole) {
  CAROUSEL_ASSERT(std::int64_t(part.size()) == numel(spec.shape) &&
                      std::int64_t(whole.size()) == numel(spec.whole()),
                  "'{}': a part of {} values for {} into a whole tensor of {}", spec.name,
                  part.size(), numel(spec.shape), whole.size());
  for (std::size_t i = 0; i < part.size(); ++i) whole[spec.whole_index(std::int64_t(i))] = part[i];
}

std::int64_t ParamSet::total_numel(const std::vector<ParamSpec>& specs) {
  std::int64_t total = 0;
  for (const auto& s : specs) total += numel(s.shape);
  return total;
}

ParamSet ParamSet::allocate(Backend& backend, const std::vector<ParamSpec>& specs, DType dtype) {
  return over(specs, backend.empty({total_numel(specs)}, dtype));
}

ParamSet ParamSet::over(const std::vector<ParamSpec>& specs, const Tensor& buffer) {
  ParamSet set;
  set.specs = specs;
  set.flat = buffer.view(0, {total_numel(specs)});
  std::int64_t offset = 0;
  for (const auto& s : specs) {
    set.tensors.push_back(set.flat.view(offset, s.shape));
    offset += numel(s.shape);
  }
  return set;
}

bool ParamSet::has(ParamRole role, int layer) const {
  for (const auto& s : specs) {
    if (s.role == role && s.layer == layer) return true;
  }
  return false;
}

const Tensor& ParamSet::at(ParamRole role, int layer) const {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].role == role && specs[i].layer == layer) return tensors[i];
  }
  fail("parameter with role {} of layer {} is not in this parameter set", int(role), layer);
}

Tensor ParamSet::stacked(ParamRole role, int layer) const {
  std::int64_t offset = 0, count = 0;
  std::size_t first = specs.size();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].role == role && specs[i].layer == layer) {
      CAROUSEL_ASSERT(count == 0 || i == first + std::size_t(count),
                      "parameters with role {} of layer {} are not consecutive", int(role), layer);
      if (count++ == 0) first = i;
    } else if (count == 0) {
      offset += numel(specs[i].shape);
    }
  }
  CAROUSEL_CHECK(count > 0, "no parameter with role {} of layer {} in this parameter set",
                 int(role), layer);
  Shape shape = specs[first].shape;
  shape.insert(shape.begin(), count);
  return flat.view(offset, shape);
}

int ParamSet::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return int(i);
  }
  return -1;
}

namespace {
// SplitMix64: a well-mixed 64-bit hash, used as a counter-based generator.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// Uniform in (0, 1) from 53 random bits.
double unit(std::uint64_t bits) { return (double(bits >> 11) + 0.5) * 0x1.0p-53; }

// Elements [begin, end) of this rank's part of `spec`, as T. Each value is a pure function of
// (seed, name, whole index): no state is carried from one element to the next, so callers may
// split a tensor over threads in any way and get the same bits (host/runtime/sharded_params.cpp
// does). The arithmetic is in double and rounded once to T, as the values have always been.
template <class T>
void write_initial_values(const ParamSpec& spec, std::uint64_t seed, std::int64_t begin,
                          std::int64_t end, T* out) {
  CAROUSEL_ASSERT(0 <= begin && begin <= end && end <= numel(spec.shape),
                  "'{}': initial values [{}, {}) of a tensor of {} elements", spec.name, begin, end,
                  numel(spec.shape));
  if (spec.init_ones) {
    std::fill(out, out + (end - begin), T(1));
    return;
  }
  const std::uint64_t key = splitmix64(seed ^ splitmix64(fnv1a64(spec.name)));
  constexpr double kStd = 0.02;
  for (std::int64_t local = begin; local < end; ++local) {
    const std::int64_t i = spec.whole_index(local);  // the whole tensor's counter
    // Box-Muller on two uniforms drawn from counters (key, 2i) and (key, 2i+1).
    const double u1 = unit(splitmix64(key + 2 * std::uint64_t(i)));
    const double u2 = unit(splitmix64(key + 2 * std::uint64_t(i) + 1));
    out[local - begin] =
        T(kStd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
}
}  // namespace

void initial_values_into(const ParamSpec& spec, std::uint64_t seed, std::int64_t begin,
                         std::int64_t end, float* out) {
  write_initial_values(spec, seed, begin, end, out);
}

void initial_values_into(const ParamSpec& spec, std::uint64_t seed, std::int64_t begin,
                         std::int64_t end, double* out) {
  write_initial_values(spec, seed, begin, end, out);
}

std::vector<double> initial_values(const ParamSpec& spec, std::uint64_t seed) {
  std::vector<double> v(std::size_t(numel(spec.shape)));
  initial_values_into(spec, seed, 0, numel(spec.shape), v.data());
  return v;
}

void init_params(Backend& backend, const ParamSet& params, std::uint64_t seed) {
  for (std::size_t i = 0; i < params.specs.size(); ++i) {
    const ParamSpec& spec = params.specs[i];
    const Tensor& t = params.tensors[i];
    CAROUSEL_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64,
                   "init_params: parameters must be float32 or float64, '{}' is {}", spec.name,
                   dtype_name(t.dtype()));
    // Straight into the destination dtype: no double copy of a float32 tensor.
    if (t.dtype() == DType::F64) {
      backend.upload(initial_values(spec, seed).data(), t);
    } else {
      std::vector<float> f(std::size_t(t.numel()));
      initial_values_into(spec, seed, 0, t.numel(), f.data());
      backend.upload(f.data(), t);
    }
  }
}

}  // namespace carousel
