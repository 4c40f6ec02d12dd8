#!/usr/bin/env python3
"""moe_oracle.py — carousel's mixture-of-experts training against an independent model.

The oracle is the whole model written again from its formulas in NumPy (float64) — embedding,
RMSNorm, rotate-half RoPE, grouped-query causal attention, SwiGLU, the MoE layer computing every
expert on every token and masking (not carousel's sort / gather / scatter), top-k routing with
softmax or sigmoid scores, the per-sequence balancing loss, the loss-free bias, cross-entropy —
differentiated by `autograd` (reverse mode over NumPy; PyPI's PyTorch wheels carry gigabytes of
CUDA libraries, this is 54 kB and needs nothing but NumPy), then clipped and stepped with AdamW
(PyTorch's semantics) under the cosine schedule. Nothing is shared with carousel but the text:
the initial weights come from this script (a Hugging Face DeepSeekMoE directory written by
hand), and the tokens are windows of a byte file it writes.

For each case carousel trains 5 steps from those weights (`load_parameters_path`), and every
step's loss, balancing loss and gradient norm in its metrics.jsonl must equal the oracle's
within 1e-4 relative (float32 against float64 over five updates).

usage: moe_oracle.py CAROUSEL_BINARY WORK_DIR     (exit 0: equal; 1: a difference; 77: no
autograd here nor in the project's .venv, where scripts/setup.sh installs it)
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

try:
    import autograd.numpy as anp
    import numpy as np
    from autograd import grad
    from autograd.tracer import getval
except ImportError:
    venv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.venv/bin/python")
    if os.path.exists(venv) and os.path.realpath(sys.executable) != os.path.realpath(venv):
        os.execv(venv, [venv] + sys.argv)  # the project's interpreter, which setup.sh fills
    print("SKIP: no autograd in this python or the project's .venv (scripts/setup.sh installs it)")
    sys.exit(77)

V, E, LAYERS, H, HKV, FM, T = 256, 32, 3, 4, 2, 48, 16
B, MICRO, STEPS = 8, 2, 5
HD = E // H
BASE = dict(learning_rate=0.01, warmup_steps_fraction=0.0, learning_rate_final_fraction=0.1,
            adam_b1=0.9, adam_b2=0.95, adam_eps=1e-8, adam_weight_decay=0.1,
            gradient_clipping_threshold=1.0, eps=1e-5, theta=10000.0)

CASES = {
    # Mixtral / Qwen-style: softmax top-2, the balancing loss, a shared expert, a dense layer 0.
    "softmax_aux": dict(X=4, k=2, Fe=16, shared=1, dense=1, score="softmax", norm=False, c=1.0,
                        alpha=0.05, bias_rate=0.0),
    # DeepSeek-V3-style: sigmoid top-2 normalised and scaled, the loss-free bias, no loss.
    "sigmoid_bias": dict(X=4, k=2, Fe=16, shared=0, dense=1, score="sigmoid", norm=True, c=2.5,
                         alpha=0.0, bias_rate=0.2),
}


def param_shapes(m):
    """carousel's parameter names (Hugging Face DeepSeekMoE's) and shapes."""
    shapes = {"model.embed_tokens.weight": (V, E)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (E,)
        shapes[p + "self_attn.q_proj.weight"] = (H * HD, E)
        shapes[p + "self_attn.k_proj.weight"] = (HKV * HD, E)
        shapes[p + "self_attn.v_proj.weight"] = (HKV * HD, E)
        shapes[p + "self_attn.o_proj.weight"] = (E, H * HD)
        shapes[p + "post_attention_layernorm.weight"] = (E,)
        if i < m["dense"]:
            mlp, width = p + "mlp.", FM
        elif m["shared"]:
            mlp, width = p + "mlp.shared_experts.", m["shared"] * m["Fe"]
        else:
            mlp = None
        if mlp:
            shapes[mlp + "gate_proj.weight"] = (width, E)
            shapes[mlp + "up_proj.weight"] = (width, E)
            shapes[mlp + "down_proj.weight"] = (E, width)
        if i >= m["dense"]:
            shapes[p + "mlp.gate.weight"] = (m["X"], E)
            for j in range(m["X"]):
                shapes[p + f"mlp.experts.{j}.gate_proj.weight"] = (m["Fe"], E)
                shapes[p + f"mlp.experts.{j}.up_proj.weight"] = (m["Fe"], E)
                shapes[p + f"mlp.experts.{j}.down_proj.weight"] = (E, m["Fe"])
    shapes["model.norm.weight"] = (E,)
    shapes["lm_head.weight"] = (V, E)
    return shapes


def initial_weights(m, seed):
    """Gains near 1, matrices with spread enough that routing choices are far from ties."""
    rng = np.random.default_rng(seed)
    w = {}
    for name, shape in param_shapes(m).items():
        if len(shape) == 1:
            w[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("mlp.gate.weight"):
            w[name] = 0.5 * rng.standard_normal(shape)
        else:
            w[name] = 0.1 * rng.standard_normal(shape)
        w[name] = w[name].astype(np.float32).astype(np.float64)  # what carousel reads
    return w


def write_hf_directory(path, m, weights):
    """config.json (DeepseekForCausalLM) and model.safetensors (F32), by hand."""
    os.makedirs(path, exist_ok=True)
    config = {
        "architectures": ["DeepseekForCausalLM"], "model_type": "deepseek", "vocab_size": V,
        "hidden_size": E, "intermediate_size": FM, "num_hidden_layers": LAYERS,
        "num_attention_heads": H, "num_key_value_heads": HKV, "max_position_embeddings": T,
        "rms_norm_eps": BASE["eps"], "rope_theta": BASE["theta"], "tie_word_embeddings": False,
        "hidden_act": "silu", "n_routed_experts": m["X"], "num_experts_per_tok": m["k"],
        "moe_intermediate_size": m["Fe"], "n_shared_experts": m["shared"],
        "first_k_dense_replace": m["dense"], "moe_layer_freq": 1, "norm_topk_prob": m["norm"],
        "scoring_func": m["score"], "routed_scaling_factor": m["c"], "seq_aux": True,
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    header, blobs, offset = {}, [], 0
    for name, value in weights.items():
        raw = value.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- the model --------------------------------------------------------------------------------

def rmsnorm(x, g):
    return x / anp.sqrt(anp.mean(x * x, axis=-1, keepdims=True) + BASE["eps"]) * g


def rope(x):  # x [b, T, heads, HD]; the pair (j, j + HD/2) turns by position * theta^(-2j/HD)
    half = HD // 2
    inv = BASE["theta"] ** (-2.0 * np.arange(half) / HD)
    angle = np.arange(T)[:, None] * inv[None, :]
    c, s = np.cos(angle)[None, :, None, :], np.sin(angle)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return anp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def attention(w, p, x):
    b = x.shape[0]
    q = rope(anp.reshape(anp.dot(x, w[p + "q_proj.weight"].T), (b, T, H, HD)))
    k = rope(anp.reshape(anp.dot(x, w[p + "k_proj.weight"].T), (b, T, HKV, HD)))
    v = anp.reshape(anp.dot(x, w[p + "v_proj.weight"].T), (b, T, HKV, HD))
    rep = H // HKV  # query head h reads KV head h // rep
    k = anp.repeat(k, rep, axis=2)
    v = anp.repeat(v, rep, axis=2)
    scores = anp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(HD)
    causal = np.tril(np.ones((T, T), dtype=bool))
    scores = anp.where(causal[None, None], scores, -1e30)
    scores = scores - anp.max(scores, axis=-1, keepdims=True)
    prob = anp.exp(scores)
    prob = prob / anp.sum(prob, axis=-1, keepdims=True)
    out = anp.reshape(anp.einsum("bhqk,bkhd->bqhd", prob, v), (b, T, H * HD))
    return anp.dot(out, w[p + "o_proj.weight"].T)


def swiglu(w, p, x):
    gate = anp.dot(x, w[p + "gate_proj.weight"].T)
    up = anp.dot(x, w[p + "up_proj.weight"].T)
    return anp.dot(gate / (1.0 + anp.exp(-gate)) * up, w[p + "down_proj.weight"].T)


def moe(w, p, x, m, bias, stats):
    """Every expert on every token, weighted by the router's (zero for unchosen) weights."""
    X, k = m["X"], m["k"]
    logits = anp.dot(x, w[p + "gate.weight"].T)  # [b, T, X]
    if m["score"] == "softmax":
        e = anp.exp(logits - anp.max(logits, axis=-1, keepdims=True))
        s = e / anp.sum(e, axis=-1, keepdims=True)
    else:
        s = 1.0 / (1.0 + anp.exp(-logits))
    key = getval(s) + bias[None, None, :]
    order = np.argsort(-key, axis=-1, kind="stable")[..., :k]  # ties to the lower expert
    chosen = np.zeros(key.shape)
    np.put_along_axis(chosen, order, 1.0, axis=-1)
    weight = s * chosen
    if m["norm"]:
        weight = weight / anp.sum(weight, axis=-1, keepdims=True)
    weight = m["c"] * weight
    out = 0.0
    for j in range(X):
        out = out + weight[..., j:j + 1] * swiglu(w, p + f"experts.{j}.", x)
    load = chosen.sum(axis=1)  # [b, X] tokens of each sequence choosing each expert
    stats["load"][p] = stats["load"].get(p, 0.0) + load.sum(axis=0)
    if m["alpha"] > 0:
        f = X * load / (k * T)
        normalized = s if m["score"] == "softmax" else s / anp.sum(s, axis=-1, keepdims=True)
        P = anp.mean(normalized, axis=1)  # [b, X]
        stats["aux"] = stats["aux"] + m["alpha"] * anp.sum(f * P)  # summed over sequences
    return out


def loss_sum(w, m, bias, tokens, targets, stats):
    """The microbatch's cross-entropy sum and balancing-loss sum (per sequence)."""
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        x = x + attention(w, p + "self_attn.", rmsnorm(x, w[p + "input_layernorm.weight"]))
        hn = rmsnorm(x, w[p + "post_attention_layernorm.weight"])
        if i < m["dense"]:
            x = x + swiglu(w, p + "mlp.", hn)
            continue
        y = moe(w, p + "mlp.", hn, m, bias[i], stats)
        if m["shared"]:
            y = y + swiglu(w, p + "mlp.shared_experts.", hn)
        x = x + y
    logits = anp.dot(rmsnorm(x, w["model.norm.weight"]), w["lm_head.weight"].T)
    top = anp.max(logits, axis=-1, keepdims=True)
    lse = anp.log(anp.sum(anp.exp(logits - top), axis=-1)) + top[..., 0]
    picked = anp.sum(logits * np.eye(V)[targets], axis=-1)
    return anp.sum(lse - picked)


def learning_rate(step):
    peak, final = BASE["learning_rate"], BASE["learning_rate"] * BASE["learning_rate_final_fraction"]
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * step / STEPS))


def train_oracle(m, weights, data):
    w = dict(weights)
    names = list(w)
    adam_m = {n: np.zeros_like(w[n]) for n in names}
    adam_v = {n: np.zeros_like(w[n]) for n in names}
    bias = [np.zeros(m["X"]) for _ in range(LAYERS)]
    out = []
    b = B // MICRO
    for step in range(STEPS):
        grads = {n: np.zeros_like(w[n]) for n in names}
        ce = aux = 0.0
        loads = [np.zeros(m["X"]) for _ in range(LAYERS)]
        for micro in range(MICRO):
            rows = [data[(step * B + micro * b + j) * T:(step * B + micro * b + j) * T + T + 1]
                    for j in range(b)]
            tokens = np.array([r[:T] for r in rows])
            targets = np.array([r[1:] for r in rows])
            record = {}

            def objective(params):
                stats = {"aux": 0.0, "load": {}}
                total = loss_sum(params, m, bias, tokens, targets, stats)
                record["ce"], record["aux"] = getval(total), getval(stats["aux"])
                record["load"] = stats["load"]
                # The balancing loss enters like T tokens' losses per sequence.
                return (total + T * stats["aux"]) / (B * T)

            g = grad(objective)(w)
            for n in names:
                grads[n] += g[n]
            ce += record["ce"]
            aux += record["aux"]
            for i in range(m["dense"], LAYERS):  # the step's loads move the bias
                loads[i] += record["load"][f"model.layers.{i}.mlp."]
        norm = math.sqrt(sum(float(np.sum(grads[n] ** 2)) for n in names))
        scale = 1.0 if norm <= BASE["gradient_clipping_threshold"] else (
            BASE["gradient_clipping_threshold"] / norm)
        lr = learning_rate(step)
        b1, b2 = BASE["adam_b1"], BASE["adam_b2"]
        for n in names:
            gr = grads[n] * scale
            decay = BASE["adam_weight_decay"] if w[n].ndim == 2 else 0.0
            w[n] = w[n] - lr * decay * w[n]
            adam_m[n] = b1 * adam_m[n] + (1 - b1) * gr
            adam_v[n] = b2 * adam_v[n] + (1 - b2) * gr * gr
            m_hat = adam_m[n] / (1 - b1 ** (step + 1))
            v_hat = adam_v[n] / (1 - b2 ** (step + 1))
            w[n] = w[n] - lr * m_hat / (np.sqrt(v_hat) + BASE["adam_eps"])
        if m["bias_rate"] > 0:
            for i in range(m["dense"], LAYERS):
                bias[i] = bias[i] + m["bias_rate"] * np.sign(loads[i].mean() - loads[i])
        out.append({"loss": ce / (B * T), "moe_lb_loss": aux / B, "grad_norm": norm})
    return out


def run_carousel(binary, work, name, m, hf_dir, data_path):
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    keys = [
        "model_name=tiny", f"vocab_size={V}", f"base_emb_dim={E}", f"base_num_decoder_layers={LAYERS}",
        f"base_num_query_heads={H}", f"base_num_kv_heads={HKV}", f"base_mlp_dim={FM}",
        f"max_target_length={T}", f"num_experts={m['X']}", f"num_experts_per_tok={m['k']}",
        f"base_moe_mlp_dim={m['Fe']}", f"shared_experts={m['shared']}",
        f"first_num_dense_layers={m['dense']}", f"routed_score_func={m['score']}",
        f"norm_topk_prob={'true' if m['norm'] else 'false'}", f"routed_scaling_factor={m['c']}",
        f"load_balance_loss_weight={m['alpha']}",
        f"routed_bias={'true' if m['bias_rate'] > 0 else 'false'}",
        f"routed_bias_update_rate={m['bias_rate']}", f"normalization_layer_epsilon={BASE['eps']}",
        f"per_device_batch_size={B}", f"num_pipeline_microbatches={MICRO}", f"steps={STEPS}",
        "dataset_type=text", f"dataset_path={data_path}", f"load_parameters_path={hf_dir}",
        "enable_checkpointing=false", f"base_output_directory={out}", "run_name=oracle",
        f"metrics_file={out}/metrics.jsonl", "progress_bar=never", "log_level=warn",
    ] + [f"{k}={v}" for k, v in BASE.items() if k not in ("eps", "theta")]
    result = subprocess.run([binary, "train"] + keys, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: carousel train exited {result.returncode}: {result.stderr[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    # Text with structure to learn: the losses fall.
    text = "carousel trains mixtures of experts on circular pipelines, step after step. " * 12
    data = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
    assert len(data) > STEPS * B * T + 1  # no window wraps
    data_path = os.path.join(work, "corpus.txt")
    with open(data_path, "w") as f:
        f.write(text)
    failures = 0
    for seed, (name, m) in enumerate(CASES.items(), start=1):
        weights = initial_weights(m, seed)
        hf_dir = os.path.join(work, name + "_hf")
        write_hf_directory(hf_dir, m, weights)
        ours = run_carousel(binary, work, name, m, hf_dir, data_path)
        oracle = train_oracle(m, weights, data)
        if len(ours) != STEPS:
            sys.exit(f"FAIL: {name}: carousel reported {len(ours)} steps, not {STEPS}")
        for step, (a, b) in enumerate(zip(ours, oracle)):
            for field in ("loss", "moe_lb_loss", "grad_norm"):
                if field not in a:
                    sys.exit(f"FAIL: {name}: carousel's metrics.jsonl has no {field}: {a}")
                got, want = float(a[field]), b[field]
                ok = abs(got - want) <= 1e-4 * max(abs(want), 1e-12)
                failures += not ok
                print(f"{name} step {step + 1} {field}: carousel {got:.9g} oracle {want:.9g}"
                      f" rel {abs(got - want) / max(abs(want), 1e-12):.2e}{'' if ok else '  FAIL'}")
        if oracle[-1]["loss"] >= oracle[0]["loss"]:
            failures += 1
            print(f"FAIL: {name}: the oracle's loss did not fall")
        if m["bias_rate"] > 0:  # the bias changes the routing, so the comparison can see it
            fixed = train_oracle(dict(m, bias_rate=0.0), weights, data)
            moved = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(fixed, oracle))
            print(f"{name}: without the bias's updates the losses differ by up to {moved:.1e}")
            failures += moved < 1e-3
    checks = sum(3 * STEPS + 1 + (m["bias_rate"] > 0) for m in CASES.values())
    print(f"{checks - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
