// params.cpp — the parameter table of each decoder block, ParamSet allocation and init.
#include "models/params.h"

#include <cmath>
#include <numbers>

#include "compute/error.h"
#include "compute/hash.h"

namespace carousel {

std::vector<ParamSpec> param_table(const ModelConfig& cfg) {
  const std::int64_t E = cfg.emb_dim;
  std::vector<ParamSpec> t;
  if (!cfg.is_llama()) {
    for (int i = 0; i < cfg.num_layers; ++i) {
      t.push_back({fmt::format("layers.{}.w", i), {E, E}, ParamRole::SimpleW, i});
    }
    return t;
  }
  const std::int64_t V = cfg.vocab_size, hd = cfg.head_dim(), H = cfg.num_query_heads,
                     Hkv = cfg.num_kv_heads, Fm = cfg.mlp_dim;
  t.push_back({"model.embed_tokens.weight", {V, E}, ParamRole::Embedding});
  for (int i = 0; i < cfg.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    t.push_back({p + "input_layernorm.weight", {E}, ParamRole::AttnNorm, i, 0, false, true});
    t.push_back({p + "self_attn.q_proj.weight", {H * hd, E}, ParamRole::Wq, i});
    t.push_back({p + "self_attn.k_proj.weight", {Hkv * hd, E}, ParamRole::Wk, i});
    t.push_back({p + "self_attn.v_proj.weight", {Hkv * hd, E}, ParamRole::Wv, i});
    t.push_back({p + "self_attn.o_proj.weight", {E, H * hd}, ParamRole::Wo, i});
    t.push_back(
        {p + "post_attention_layernorm.weight", {E}, ParamRole::MlpNorm, i, 0, false, true});
    t.push_back({p + "mlp.gate_proj.weight", {Fm, E}, ParamRole::WGate, i});
    t.push_back({p + "mlp.up_proj.weight", {Fm, E}, ParamRole::WUp, i});
    t.push_back({p + "mlp.down_proj.weight", {E, Fm}, ParamRole::WDown, i});
  }
  t.push_back({"model.norm.weight", {E}, ParamRole::FinalNorm, -1, 0, false, true});
  if (!cfg.logits_via_embedding) t.push_back({"lm_head.weight", {V, E}, ParamRole::LmHead});
  return t;
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
}  // namespace

std::vector<double> initial_values(const ParamSpec& spec, std::uint64_t seed) {
  const std::int64_t n = numel(spec.shape);
  std::vector<double> v(n, 1.0);
  if (spec.init_ones) return v;
  const std::uint64_t key = splitmix64(seed ^ splitmix64(fnv1a64(spec.name)));
  constexpr double kStd = 0.02;
  for (std::int64_t i = 0; i < n; ++i) {
    // Box-Muller on two uniforms drawn from counters (key, 2i) and (key, 2i+1).
    const double u1 = unit(splitmix64(key + 2 * std::uint64_t(i)));
    const double u2 = unit(splitmix64(key + 2 * std::uint64_t(i) + 1));
    v[i] = kStd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  return v;
}

void init_params(Backend& backend, const ParamSet& params, std::uint64_t seed) {
  for (std::size_t i = 0; i < params.specs.size(); ++i) {
    const auto values = initial_values(params.specs[i], seed);
    const Tensor& t = params.tensors[i];
    if (t.dtype() == DType::F64) {
      backend.upload(values.data(), t);
    } else {
      CAROUSEL_CHECK(t.dtype() == DType::F32,
                     "init_params: parameters must be float32 or "
                     "float64, '{}' is {}",
                     params.specs[i].name, dtype_name(t.dtype()));
      const std::vector<float> f(values.begin(), values.end());
      backend.upload(f.data(), t);
    }
  }
}

}  // namespace carousel
