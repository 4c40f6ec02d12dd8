#!/usr/bin/env python3
"""gpu_summary.py — turn one GPU proof's results (scripts/gpu_checks.sh's, whole or cut short)
into summary.json and summary_tables.md: the tables docs/gpu.md records, each goal marked met,
not met or not measured. Standard library only: it runs on the GPU machine and here.

    python3 scripts/gpu_summary.py SOURCE [DEST]

SOURCE is the folder the parts wrote, the proof.tar.gz they were packed into, or a folder holding
that (the device tool's $OUT); DEST (default: SOURCE's folder) receives the two files. Reads
what is there and says what is not: summary.md (each part's exit and seconds), gpu.txt
(nvidia-smi), libs.txt (libraries found and their versions), the GoogleTest logs, gpu_op_bench's
JSON (or, when a killed benchmark left it truncated, its console log), metrics_<run>.jsonl (the
GPU training runs beside the CPU twins gpu_bundle.sh carried; the 1B llama's tokens/s, MFU and
peak memory) and op_times_llama_1b_bf16.json (its time by op kind).
"""
import json
import math
import os
import re
import statistics
import sys
import tarfile

BF16_PEAK = 989.4e12  # H100/H200 SXM dense bf16 FLOP/s
HBM = {"H100": 3.35e12, "H200": 4.8e12}  # bytes/s
# (GPU run, its twin, relative tolerance, the metrics compared): the GPU against the CPU oracle
# within float32 1e-4 / bf16 1e-2, and a CUDA graph's replays against the eager run, bitwise.
LOSS_PAIRS = [("train_cuda_bf16", "train_cpu_bf16", 1e-2, ("loss",)),
              ("train_cuda_f32", "train_cpu_f32", 1e-4, ("loss",)),
              ("train_cuda_bf16", "train_cuda_bf16_eager", 0.0, ("loss", "grad_norm"))]
# gpu_checks.sh's llama: step 0 eager (plans, cuDNN graphs), 1 captured, 3 and 4 profiled, 5
# re-maps the graph's memory; the other steps are the graph replays the figures are taken from.
LLAMA_SKIP = {"llama_1b_bf16": {0, 1, 3, 4, 5}, "llama_1b_bf16_eager": {0}}
# The goals' benchmarks (gpu_op_bench names).
CUBE = r"BM_Gemm/fast_bf16/8192/8192/8192/"
LLAMA_GEMMS = r"BM_Gemm/fast_bf16[^/]*/(?!8192/8192/8192/)"  # forward, input and weight grads
ATTENTION_4096 = r"BM_Attention/fast_forward/\d+/4096/\d+/\d+/128/"
# Op kinds of the time-by-op table, grouped by what bounds them.
OP_GROUPS = [("matmul (cuBLASLt)", {"gemm", "gemm_strided_batched", "grouped_gemm",
                                    "grouped_weight_gemm"}),
             ("attention (cuDNN)", {"attention_forward", "attention_backward"}),
             ("optimizer and gradient norm", {"adamw_update", "sum_squares"}),
             ("copies, casts, fills", {"upload", "download", "copy", "cast", "fill"})]
OTHER_OPS = "memory-bound kernels (norms, RoPE, SwiGLU, cross-entropy, embedding, ...)"
# The warnings the fast tier gives when it degrades instead of stopping (cuda/fast/): a figure
# measured through one of them is the fallback's, not the fast path's. (phrase, what it means)
DEGRADATIONS = [("gpu_kernels=fast without cuDNN attention", "no cuDNN attention at all"),
                ("runs the reference attention from now on", "cuDNN refused a shape"),
                ("such calls run the reference attention", "misaligned attention operands"),
                ("classic cuBLAS runs this shape instead", "cuBLASLt refused a GEMM")]
# Which parts' figures each goal rests on.
GOAL_PARTS = {"GEMM": ("gpu_op_bench",), "attention": ("gpu_op_bench",),
              "MFU": ("llama_1b_bf16",)}


class Source:
    """The proof's files, from a folder or from inside proof.tar.gz."""

    def __init__(self, path):
        self.files = {}
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "proof.tar.gz")):
            # The device tool's $OUT: its summary.md, newer than the packed one, names the part
            # a killed call was running.
            self.files["summary.md"] = os.path.join(path, "summary.md")
            path = os.path.join(path, "proof.tar.gz")
        if os.path.isdir(path):
            self.folder = path
            for name in os.listdir(path):
                if os.path.isfile(os.path.join(path, name)):
                    self.files[name] = os.path.join(path, name)
        else:
            self.folder = os.path.dirname(os.path.abspath(path))
            with tarfile.open(path) as tar:
                for m in tar.getmembers():
                    if m.isfile() and os.path.basename(m.name) not in self.files:
                        self.files[os.path.basename(m.name)] = tar.extractfile(m).read()

    def text(self, name):
        f = self.files.get(name)
        if f is None or isinstance(f, str) and not os.path.exists(f):
            return None
        if isinstance(f, bytes):
            return f.decode("utf-8", "replace")
        with open(f, encoding="utf-8", errors="replace") as h:
            return h.read()


def number(x):
    """A metrics value as a float; NaN for what json_number wrote as a string ("NaN", ...)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def read_metrics(src, name):
    text = src.text(f"metrics_{name}.jsonl")
    if text is None:
        return None
    rows = []
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if isinstance(r, dict) and "loss" in r and "step" in r:
            rows.append(r)
    return rows


def parts(src):
    """summary.md's rows: part, exit (as written: "0", "124 (timed out)", "skipped (budget)")."""
    rows = []
    for line in (src.text("summary.md") or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] not in ("part", "") and not cells[0].startswith("---"):
            rows.append({"part": cells[0], "exit": cells[1], "seconds": cells[2],
                         "limit": cells[3] if len(cells) > 3 else ""})
    return rows


def part_note(part_rows, name):
    """Why a part left no result: its exit as summary.md says, or that it never ran."""
    row = next((r for r in part_rows if r["part"] == name), None)
    if row is None:
        return f"{name} did not run"
    return f"{name}: exit {row['exit']}" if row["exit"] != "0" else f"{name} left no results"


def gtest_counts(text):
    """Passed, failed and skipped tests of a GoogleTest log, and where a cut-short run stopped."""
    name = r"([A-Za-z_][\w/]*\.[\w/]+)"
    passed = set(re.findall(r"^\[\s+OK \] " + name, text, re.M))
    failed = sorted(set(re.findall(r"^\[\s+FAILED\s+\] " + name, text, re.M)))
    skipped = set(re.findall(r"^\[\s+SKIPPED \] " + name, text, re.M))
    started = re.findall(r"^\[ RUN\s+\] " + name, text, re.M)
    finished = re.search(r"^\[=+\] \d+ tests? from .* ran", text, re.M) is not None
    last = started[-1] if started and not finished else None
    return {"passed": len(passed), "failed": failed, "skipped": len(skipped),
            "finished": finished, "stopped_in": last}


UNITS_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
PREFIX = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
CONSOLE_ROW = re.compile(
    r"^(?P<name>BM_\S+)\s+(?:(?:ERROR OCCURRED|SKIPPED): '(?P<error>.*)'|(?P<real>[\d.]+) "
    r"(?P<unit>ns|us|ms|s)\s+[\d.]+ (?:ns|us|ms|s)\s+\d+(?P<rest>.*))\s*$")


def console_benchmarks(text):
    """Google Benchmark's console lines as its JSON would give them (name, real_time, time_unit,
    counters, label, error): a killed benchmark's JSON is cut, its console log is not."""
    out = []
    for line in text.splitlines():
        m = CONSOLE_ROW.match(line)
        if not m:
            continue
        if m["error"] is not None:
            out.append({"name": m["name"], "error_occurred": True, "error_message": m["error"]})
            continue
        b = {"name": m["name"], "real_time": float(m["real"]), "time_unit": m["unit"]}
        label = []
        for token in m["rest"].split():
            c = re.fullmatch(r"(\w+)=([\d.]+(?:e[+-]?\d+)?)([kMGTPEmunp]?)(?:/s)?", token)
            if c:
                b[c[1]] = float(c[2]) * PREFIX[c[3]]
            else:
                label.append(token)
        b["label"] = " ".join(label)
        out.append(b)
    return out


def bench_rows(src, stem, hbm):
    """One benchmark run's rows and where they came from (the JSON, else the console log)."""
    benchmarks, origin = None, None
    text = src.text(f"{stem}.json")
    if text is not None:
        try:
            benchmarks, origin = json.loads(text).get("benchmarks", []), f"{stem}.json"
        except ValueError:
            pass
    if benchmarks is None and src.text(f"{stem}.log") is not None:
        benchmarks = console_benchmarks(src.text(f"{stem}.log"))
        origin = f"{stem}.log (console" + (", the JSON was cut short)" if text is not None else ")")
    rows = []
    for b in benchmarks or []:
        if b.get("error_occurred"):
            rows.append({"name": b["name"], "error": b.get("error_message", "")})
            continue
        row = {"name": b["name"], "tier": b.get("label", ""),
               "ms": b["real_time"] * UNITS_MS.get(b.get("time_unit"), math.nan)
               / b.get("calls_per_iteration", 1)}  # an iteration queues that many calls
        if "FLOP" in b:
            row["tflops"] = b["FLOP"] / 1e12
            row["of_peak"] = b["FLOP"] / BF16_PEAK
        if "bytes" in b:
            row["gbytes_per_s"] = b["bytes"] / 1e9
            if hbm:
                row["of_hbm"] = b["bytes"] / hbm
        rows.append(row)
    return rows, origin


def compare_runs(src, gpu, twin, rtol, keys):
    """The worst relative difference over the steps both runs have, and whether they cover the
    twin's steps (the CPU oracle's; for the bitwise pair, both runs' every step)."""
    a, b = read_metrics(src, gpu), read_metrics(src, twin)
    result = {"gpu": gpu, "twin": twin, "rtol": rtol, "keys": list(keys)}
    missing = [f"metrics_{n}.jsonl" for n, r in ((gpu, a), (twin, b)) if r is None]
    if missing:
        return {**result, "missing": missing, "steps": 0, "max_rel_diff": None}
    ra, rb = ({r["step"]: r for r in rows} for rows in (a, b))
    steps = sorted(set(ra) & set(rb))
    worst = None
    for s in steps:
        for k in keys:
            x, y = number(ra[s].get(k)), number(rb[s].get(k))
            d = 0.0 if x == y else abs(x - y) / max(abs(y), 1e-30)
            d = math.inf if math.isnan(d) else d
            worst = d if worst is None else max(worst, d)
    expected = max(len(ra), len(rb)) if rtol == 0 else len(rb)
    return {**result, "steps": len(steps), "expected_steps": expected, "max_rel_diff": worst}


def llama_figures(src, name):
    """Medians over the replayed steps (LLAMA_SKIP), peak memory over all of them."""
    rows = read_metrics(src, name)
    if not rows:
        return None
    kept = [r for r in rows if r["step"] not in LLAMA_SKIP[name]]
    if not kept:
        return None
    med = lambda key: statistics.median(number(r[key]) for r in kept if key in r) \
        if any(key in r for r in kept) else None
    return {"steps": [r["step"] for r in kept], "step_ms": med("step_ms"),
            "tokens_per_s": med("tokens_per_s"), "mfu": med("mfu"),
            "peak_mem_bytes": max(int(r.get("peak_mem_bytes", 0)) for r in rows)}


def op_times(src):
    """Rank 0's time by op kind in the llama's profiled steps, largest first, and by group."""
    text = src.text("op_times_llama_1b_bf16.json")
    if text is None:
        return None
    rank = json.loads(text)[0]
    ops = sorted(rank["ops"].items(), key=lambda kv: -kv[1]["seconds"])
    groups = {}
    for op, v in ops:
        g = next((g for g, members in OP_GROUPS if op in members), OTHER_OPS)
        groups[g] = groups.get(g, 0.0) + v["seconds"]
    elapsed = rank["elapsed_seconds"]
    groups["(between ops: launch gaps, host work, waits)"] = elapsed - sum(groups.values())
    return {"elapsed_seconds": elapsed,
            "ops": [{"op": k, "calls": v["calls"], "seconds": v["seconds"]} for k, v in ops],
            "groups": sorted(({"group": g, "seconds": s} for g, s in groups.items()),
                             key=lambda g: -g["seconds"])}


def goal(what, measured, target, at_least, status, note=""):
    return {"what": what, "measured": measured, "goal": target,
            "direction": ">=" if at_least else "<=", "status": status, "note": note}


def bench_goal(what, rows, pattern, target, part_rows):
    matching = [r for r in rows if re.match(pattern, r["name"])]
    vals = [r["of_peak"] for r in matching if "of_peak" in r]
    errors = [r for r in matching if "error" in r]
    if not vals:
        why = f"error: {errors[0]['error']}" if errors else part_note(part_rows, "gpu_op_bench")
        return goal(what, None, target, True, "not measured", why)
    worst = min(vals)
    note = f"worst of {len(vals)}" + (f"; {len(errors)} failed: {errors[0]['error']}" if errors
                                      else "")
    return goal(what, worst, target, True, "met" if worst >= target and not errors else "not met",
                note)


def pair_goal(p, part_rows):
    what = (f"{p['gpu']} vs {p['twin']}, bitwise ({' and '.join(p['keys'])})" if p["rtol"] == 0
            else f"{p['gpu']} vs {p['twin']} (CPU, carried), relative loss difference")
    if "missing" in p:
        why = "; ".join(part_note(part_rows, n) for n in (p["gpu"], p["twin"])
                        if f"metrics_{n}.jsonl" in p["missing"])
        if p["twin"].startswith("train_cpu") and f"metrics_{p['twin']}.jsonl" in p["missing"]:
            why = "no carried CPU metrics (run scripts/gpu_bundle.sh)"
        return goal(what, None, p["rtol"], False, "not measured", why)
    worst, note = p["max_rel_diff"], f"{p['steps']} of {p['expected_steps']} steps"
    if worst is not None and worst > p["rtol"]:
        return goal(what, worst, p["rtol"], False, "not met", note)
    if p["steps"] == 0 or p["steps"] < p["expected_steps"]:
        return goal(what, worst, p["rtol"], False, "not measured",
                    note + " compared; " + part_note(part_rows, p["gpu"]))
    return goal(what, worst, p["rtol"], False, "met", note)


def goals(s, part_rows):
    ops = s["ops"]
    rows = [bench_goal("cuBLASLt bf16 GEMM 8192^3", ops, CUBE, 0.85, part_rows),
            bench_goal("cuBLASLt bf16 GEMM, 1B llama shapes (worst)", ops, LLAMA_GEMMS, 0.70,
                       part_rows),
            bench_goal("cuDNN causal attention forward T=4096 D=128", ops, ATTENTION_4096, 0.50,
                       part_rows)]
    llama = s["llama"]
    if llama and llama["mfu"] is not None:
        rows.append(goal("1B llama bf16 step MFU", llama["mfu"], 0.45, True,
                         "met" if llama["mfu"] >= 0.45 else "not met",
                         f"median of steps {', '.join(map(str, llama['steps']))}"))
    else:
        rows.append(goal("1B llama bf16 step MFU", None, 0.45, True, "not measured",
                         part_note(part_rows, "llama_1b_bf16")))
    return rows + [pair_goal(p, part_rows) for p in s["losses"]]


def degradations(src):
    """Each part's fast-tier fallback warnings (DEGRADATIONS) in its log, one entry per distinct
    line."""
    found = []
    for part in sorted(n[:-len(".log")] for n in src.files if n.endswith(".log")):
        seen = set()
        for line in (src.text(f"{part}.log") or "").splitlines():
            for phrase, meaning in DEGRADATIONS:
                if phrase in line and line not in seen:
                    seen.add(line)
                    found.append({"part": part, "meaning": meaning, "line": line.strip()})
    return found


def flag_degraded(goal_rows, degraded):
    """A goal whose part degraded is not met by the fast path: its note says what ran instead."""
    for g in goal_rows:
        parts = next((p for k, p in GOAL_PARTS.items() if k in g["what"]), ())
        hits = [d for d in degraded if d["part"] in parts]
        if hits and g["status"] != "not measured":
            g["status"] = "not met"
            g["note"] = (g["note"] + "; " if g["note"] else "") + "degraded: " + "; ".join(
                sorted({d["meaning"] for d in hits})) + " (see the degradations below)"
    return goal_rows


def libraries(src):
    """libs.txt: the libraries not found, and the versions of those opened."""
    text = src.text("libs.txt")
    if text is None:
        return None
    lines = text.splitlines()
    return {"not_found": [l for l in lines if "not found" in l],
            "opened": [l[len("dlopen "):] for l in lines if l.startswith("dlopen ") and ": ok" in l]}


def finite(x):
    """x for JSON: an infinite or NaN difference as its name (JSON has no such numbers)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def fmt(x, pct=False):
    if x is None:
        return "—"
    return f"{100 * x:.1f} %" if pct else f"{x:.3g}"


def table(header, rows):  # Markdown, an empty cell as "| |"
    line = lambda cells: "|" + "".join(f" {c} |" if str(c) else " |" for c in cells)
    return ["", line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]


def tests_cell(t):
    if not t:
        return ""
    cell = f"{t['passed']} passed, {len(t['failed'])} failed, {t['skipped']} skipped"
    if t["failed"]:
        cell += " (" + ", ".join(t["failed"][:6]) + (", ..." if len(t["failed"]) > 6 else "") + ")"
    if t["stopped_in"]:
        cell += f"; stopped in {t['stopped_in']}"
    return cell


def markdown(s):
    facts = s["facts"]
    md = [f"Device: {s['device']}" + (f"; {facts}" if facts else "")]
    if s["build_versions"]:
        md += ["", "Built with: " + "; ".join(s["build_versions"])]
    if s["libraries"]:
        md += ["", "Libraries: " + ("; ".join(s["libraries"]["opened"]) or "none opened")]
        md += [f"Not found: {l}" for l in s["libraries"]["not_found"]]
    md += table(["part", "exit", "seconds", "limit", "tests"],
                [[p["part"], p["exit"], p["seconds"], p["limit"], tests_cell(s["tests"].get(p["part"]))]
                 for p in s["parts"]])
    md += table(["goal", "measured", "target", "status", "note"],
                [[g["what"], fmt(g["measured"], g["direction"] == ">="),
                  f"{g['direction']} {fmt(g['goal'], g['direction'] == '>=')}", g["status"], g["note"]]
                 for g in s["goals"]])
    md += table(["benchmark", "tier", "ms a call", "TFLOP/s", "of bf16 peak", "GB/s", "of HBM"],
                [[r["name"], f"error: {r['error']}", "", "", "", "", ""] if "error" in r else
                 [r["name"], r["tier"], fmt(r["ms"]), fmt(r.get("tflops")),
                  fmt(r.get("of_peak"), True), fmt(r.get("gbytes_per_s")),
                  fmt(r.get("of_hbm"), True)] for r in s["ops"]])
    if s["degraded"]:
        md += ["", "Degradations (the fast tier fell back instead of stopping; figures through "
                   "them are the fallback's):"]
        md += table(["part", "what", "log line"],
                    [[d["part"], d["meaning"], d["line"]] for d in s["degraded"]])
    if s["ops_from"]:
        md += ["", "Benchmarks read from: " + ", ".join(s["ops_from"])]
    for key, how in (("llama", "graph-replayed"), ("llama_eager", "eager")):
        l = s[key]
        if l and l["step_ms"] is not None:
            md += ["", f"1B llama bf16, {how}: {l['step_ms']:.0f} ms/step, "
                       f"{fmt(l['tokens_per_s'])} tokens/s, MFU {fmt(l['mfu'], True)}, "
                       f"peak {l['peak_mem_bytes'] / 2**30:.1f} GiB "
                       f"(median of steps {', '.join(map(str, l['steps']))})"]
    t = s["op_times"]
    if t:
        e = t["elapsed_seconds"]
        md += ["", f"Time by op kind, 1B llama bf16 (rank 0, profiled steps, {e:.3f} s):"]
        md += table(["group", "seconds", "share"],
                    [[g["group"], f"{g['seconds']:.4f}", fmt(g["seconds"] / e, True)]
                     for g in t["groups"]])
        md += table(["op", "calls", "seconds", "share"],
                    [[o["op"], o["calls"], f"{o['seconds']:.4f}", fmt(o["seconds"] / e, True)]
                     for o in t["ops"]])
    return md


def main(argv):
    if len(argv) not in (2, 3) or not os.path.exists(argv[1]):
        print("usage: gpu_summary.py SOURCE [DEST] (SOURCE: the folder gpu_checks.sh wrote, or "
              "its proof.tar.gz)", file=sys.stderr)
        return 2
    try:
        src = Source(argv[1])
    except (tarfile.TarError, OSError) as e:
        why = str(e).splitlines()[0].rstrip(":")
        print(f"gpu_summary.py: {argv[1]} is neither a folder nor a readable proof.tar.gz ({why})",
              file=sys.stderr)
        return 2
    dest = argv[2] if len(argv) == 3 else src.folder
    gpu_txt = src.text("gpu.txt")  # nvidia-smi's CSV: a header, then the GPU
    device = (gpu_txt.strip().splitlines() or ["?"])[-1] if gpu_txt else "unknown (no gpu.txt)"
    hbm = next((v for k, v in HBM.items() if k in device), None)
    s = {"device": device,
         "facts": " ".join(l for l in (src.text("facts.txt") or "").splitlines()
                           if l.startswith("date ")),
         "build_versions": (src.text("build_versions.txt") or "").strip().splitlines(),
         "libraries": libraries(src), "parts": parts(src), "ops": [], "ops_from": []}
    s["tests"] = {name: gtest_counts(src.text(f"{name}.log"))
                  for name in ("gpu_tests", "pipeline_gpu", "nccl_tests")
                  if src.text(f"{name}.log") is not None}
    for stem in ("gpu_op_bench", "gpu_op_bench_rest"):
        rows, origin = bench_rows(src, stem, hbm)
        s["ops"] += rows
        if origin:
            s["ops_from"].append(origin)
    s["losses"] = [compare_runs(src, g, t, r, k) for g, t, r, k in LOSS_PAIRS]
    s["llama"] = llama_figures(src, "llama_1b_bf16")
    s["llama_eager"] = llama_figures(src, "llama_1b_bf16_eager")
    s["op_times"] = op_times(src)
    s["degraded"] = degradations(src)
    s["goals"] = flag_degraded(goals(s, s["parts"]), s["degraded"])
    md = markdown(s)
    try:
        os.makedirs(dest, exist_ok=True)
        with open(os.path.join(dest, "summary.json"), "w") as f:
            json.dump(finite(s), f, indent=1)
        with open(os.path.join(dest, "summary_tables.md"), "w") as f:
            f.write("\n".join(md) + "\n")
    except OSError as e:
        print(f"gpu_summary.py: cannot write to {dest}: {e} (name a DEST folder)", file=sys.stderr)
        return 2
    try:
        print("\n".join(md))
    except BrokenPipeError:  # a reader such as `head` that stopped early
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
