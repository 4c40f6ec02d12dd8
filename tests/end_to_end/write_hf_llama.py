#!/usr/bin/env python3
"""write_hf_llama.py — re-write a carousel checkpoint as a Hugging Face Llama directory.

An independent writer for tests/run/test_hf_import.cpp: only the standard library (json, struct,
array), the safetensors layout written by hand from the format description (8-byte
little-endian header length, JSON header with dtype/shape/data_offsets, "__metadata__", then
the tensor bytes back to back), the directory as transformers' save_pretrained lays it out:

    config.json                        LlamaConfig fields (plus the usual extras)
    model.safetensors                  one file, or with --shards N:
    model-0000i-of-0000N.safetensors   the shards, and
    model.safetensors.index.json       {"metadata": {"total_size": bytes}, "weight_map": {...}}

usage: write_hf_llama.py CHECKPOINT_DIR OUT_DIR [--dtype f32|bf16|f16] [--rounded-f32]
         [--shards N] [--drop NAME]... [--set KEY=JSON]... [--unset KEY]...
         [--remove-shard I] [--no-extras] [--arch llama|deepseek|mixtral]

--arch writes a mixture-of-experts checkpoint (whose config.json has DeepSeekMoE's fields) as
DeepseekForCausalLM (the same tensor names) or as MixtralForCausalLM, whose files name the router
block_sparse_moe.gate and expert j's gate, up and down projections block_sparse_moe.experts.j.w1,
w3 and w2.

--dtype bf16 rounds float32 to nearest-even by its bits; f16 uses struct's 'e' (IEEE half,
round-half-even). --rounded-f32 stores those rounded values as F32 (the exact reference).
Unless --no-extras, each layer also gets the rotary_emb.inv_freq buffer older transformers
saved, which a loader must ignore. --drop, --set/--unset and --remove-shard make broken
directories for the error tests.
"""
import argparse
import array
import json
import math
import os
import re
import struct
import sys


def read_safetensors(path):
    """{name: (dtype, shape, list of floats)} of an F32 safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            sys.exit(f"{path}: tensor {name} is {e['dtype']}, expected F32")
        begin, end = e["data_offsets"]
        values = array.array("f")
        values.frombytes(data[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (e["shape"], list(values))
    return tensors


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest, ties to even (NaN stays a quiet NaN)."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return (u >> 16) | 0x0040
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def encode(values, dtype, rounded_f32):
    """(safetensors dtype, bytes) of a list of float32 values."""
    if dtype == "bf16":
        bits = [bf16_bits(v) for v in values]
        if rounded_f32:
            return "F32", struct.pack(f"<{len(bits)}I", *[b << 16 for b in bits])
        return "BF16", struct.pack(f"<{len(bits)}H", *bits)
    if dtype == "f16":
        raw = struct.pack(f"<{len(values)}e", *values)
        if rounded_f32:
            return "F32", struct.pack(f"<{len(values)}f", *struct.unpack(f"<{len(values)}e", raw))
        return "F16", raw
    return "F32", struct.pack(f"<{len(values)}f", *values)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes), written in that order."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
    return offset


def mixtral_name(name):
    """Mixtral's name of a tensor DeepSeekMoE names `name`."""
    m = re.match(r"(model\.layers\.\d+\.)mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$", name)
    if m:
        w = {"gate": "w1", "up": "w3", "down": "w2"}[m.group(3)]
        return f"{m.group(1)}block_sparse_moe.experts.{m.group(2)}.{w}.weight"
    m = re.match(r"(model\.layers\.\d+\.)mlp\.gate\.weight$", name)
    return f"{m.group(1)}block_sparse_moe.gate.weight" if m else name


def moe_fields(ours, arch):
    """The expert fields of a DeepseekConfig or MixtralConfig for our MoE config.json."""
    if arch == "deepseek":
        keys = ["n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                "moe_intermediate_size", "first_k_dense_replace", "norm_topk_prob",
                "scoring_func", "routed_scaling_factor", "aux_loss_alpha", "seq_aux"]
        fields = {k: ours[k] for k in keys}
        fields.update({"architectures": ["DeepseekForCausalLM"], "model_type": "deepseek",
                       "moe_layer_freq": 1, "topk_method": "greedy"})
        return fields
    return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "num_local_experts": ours["n_routed_experts"],
            "num_experts_per_tok": ours["num_experts_per_tok"],
            "intermediate_size": ours["moe_intermediate_size"],
            "router_aux_loss_coef": ours["aux_loss_alpha"], "sliding_window": None,
            "output_router_logits": False}


def hf_config(ours, dtype, arch="llama"):
    """A config.json as transformers writes it for LlamaForCausalLM (or the MoE `arch`)."""
    heads = ours["num_attention_heads"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": ours["hidden_size"] // heads,
        "hidden_act": "silu",
        "hidden_size": ours["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": ours["intermediate_size"],
        "max_position_embeddings": ours["max_position_embeddings"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": ours["num_hidden_layers"],
        "num_key_value_heads": ours["num_key_value_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": ours["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": ours["rope_theta"],
        "tie_word_embeddings": ours["tie_word_embeddings"],
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[dtype],
        "transformers_version": "4.44.0",
        "use_cache": True,
        "vocab_size": ours["vocab_size"],
    }
    if arch != "llama":
        config.update(moe_fields(ours, arch))
    return config


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("out")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--rounded-f32", action="store_true")
    p.add_argument("--shards", type=int, default=0)
    p.add_argument("--drop", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--unset", action="append", default=[])
    p.add_argument("--remove-shard", type=int, default=0)
    p.add_argument("--no-extras", action="store_true")
    p.add_argument("--arch", choices=["llama", "deepseek", "mixtral"], default="llama")
    # NAME=INDEX=VALUE: element INDEX (flat) of tensor NAME becomes VALUE (nan, inf, -inf, ...).
    p.add_argument("--poke", action="append", default=[])
    a = p.parse_args()

    with open(os.path.join(a.checkpoint, "config.json")) as f:
        ours = json.load(f)
    weights = read_safetensors(os.path.join(a.checkpoint, "model.safetensors"))
    tensors = []
    for name in sorted(weights):
        if name in a.drop:
            continue
        shape, values = weights[name]
        for poke in a.poke:
            target, index, value = poke.rsplit("=", 2)
            if target == name:
                values[int(index)] = float(value)
        dtype, raw = encode(values, a.dtype, a.rounded_f32)
        tensors.append((mixtral_name(name) if a.arch == "mixtral" else name, dtype, shape, raw))
    if not a.no_extras:
        hd = ours["hidden_size"] // ours["num_attention_heads"]
        inv_freq = [1.0 / ours["rope_theta"] ** (2 * j / hd) for j in range(hd // 2)]
        for i in range(ours["num_hidden_layers"]):
            name = f"model.layers.{i}.self_attn.rotary_emb.inv_freq"
            tensors.append((name, "F32", [hd // 2], struct.pack(f"<{hd // 2}f", *inv_freq)))

    os.makedirs(a.out, exist_ok=True)
    config = hf_config(ours, a.dtype, a.arch)
    for kv in a.set:
        key, value = kv.split("=", 1)
        config[key] = json.loads(value)
    for key in a.unset:
        config.pop(key, None)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    if a.shards <= 0:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
        return
    # Contiguous groups of about equal bytes, as save_pretrained's max_shard_size does.
    total = sum(len(t[3]) for t in tensors)
    per_shard = math.ceil(total / a.shards)
    groups, current, size = [], [], 0
    for t in tensors:
        if current and size + len(t[3]) > per_shard and len(groups) < a.shards - 1:
            groups.append(current)
            current, size = [], 0
        current.append(t)
        size += len(t[3])
    groups.append(current)
    n = len(groups)
    weight_map = {}
    for i, group in enumerate(groups, 1):
        file = f"model-{i:05d}-of-{n:05d}.safetensors"
        write_safetensors(os.path.join(a.out, file), group)
        for t in group:
            weight_map[t[0]] = file
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    if a.remove_shard:
        os.remove(os.path.join(a.out, f"model-{a.remove_shard:05d}-of-{n:05d}.safetensors"))


if __name__ == "__main__":
    main()
