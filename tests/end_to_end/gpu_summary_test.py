#!/usr/bin/env python3
"""gpu_summary_test.py — scripts/gpu_summary.py on a hand-made proof folder: fractions of peak,
loss comparisons and goals against values worked out here by hand, and a missing file named.

    python3 tests/end_to_end/gpu_summary_test.py SOURCE_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

src, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def write_metrics(name, losses, **extra):
    with open(os.path.join(work, f"metrics_{name}.jsonl"), "w") as f:
        for step, loss in enumerate(losses):
            f.write(json.dumps({"step": step, "loss": loss, **extra}) + "\n")


with open(os.path.join(work, "gpu.txt"), "w") as f:
    f.write("name, memory.total [MiB], driver_version\nNVIDIA H100 80GB HBM3, 81559 MiB, 580.159\n")
# Google Benchmark's JSON: FLOP and bytes are rates (per second), as kIsIterationInvariantRate.
bench = {"benchmarks": [
    {"name": "BM_Gemm/fast_bf16/8192/8192/8192/real_time", "label": "fast", "real_time": 1.6,
     "time_unit": "ms", "FLOP": 0.9 * 989.4e12},                     # 90 % of peak: met
    {"name": "BM_Gemm/fast_bf16/8192/2048/2048/real_time", "label": "fast", "real_time": 0.2,
     "time_unit": "ms", "FLOP": 0.75 * 989.4e12},                    # 75 %
    {"name": "BM_Gemm/fast_bf16/8192/5632/2048/real_time", "label": "fast", "real_time": 0.5,
     "time_unit": "ms", "FLOP": 0.65 * 989.4e12},                    # 65 %: the worst, not met
    {"name": "BM_Attention/fast_forward/2/4096/16/16/128/real_time", "label": "fast",
     "real_time": 1.0, "time_unit": "ms", "FLOP": 0.55 * 989.4e12},  # 55 %: met
    {"name": "BM_RowOp/rmsnorm_forward/fast/8192/2048/real_time", "label": "fast",
     "real_time": 30.0, "time_unit": "us", "bytes": 0.5 * 3.35e12},  # half of HBM
    {"name": "BM_Attention/fast_backward/2/4096/16/16/128/real_time", "error_occurred": True,
     "error_message": "cuDNN attention backward failed"},
]}
with open(os.path.join(work, "gpu_op_bench.json"), "w") as f:
    json.dump(bench, f)
# float32 pair: worst step differs by 5e-5 relative (loss 2.0 vs 2.0001): within 1e-4.
write_metrics("train_cuda_f32", [4.0, 3.0, 2.0001])
write_metrics("train_cpu_f32", [4.0, 3.0, 2.0])
# bf16: the GPU run only (the CPU one is missing).
write_metrics("train_cuda_bf16", [4.0, 3.1])
# The eager twin of the graph-replayed bf16 run differs in its last bit at step 1: not bitwise.
write_metrics("train_cuda_bf16_eager", [4.0, 3.1 * (1 + 2**-52)])
# llama: the first step is dropped; median MFU of 0.40, 0.44, 0.50 is 0.44: not met.
with open(os.path.join(work, "metrics_llama_1b_bf16.jsonl"), "w") as f:
    for mfu, ms in [(0.1, 9000), (0.40, 1000), (0.50, 800), (0.44, 900)]:
        f.write(json.dumps({"step": 0, "loss": 1.0, "mfu": mfu, "step_ms": ms,
                            "tokens_per_s": 8192e3 / ms, "peak_mem_bytes": 40 << 30}) + "\n")

# Time by op kind: gemm 0.6 s and attention 0.3 s of 1.2 s; 0.3 s between ops (25 %).
with open(os.path.join(work, "op_times_llama_1b_bf16.json"), "w") as f:
    json.dump([{"rank": 0, "steps": 2, "elapsed_seconds": 1.2,
                "ops": {"attention_backward": {"calls": 40, "seconds": 0.3},
                        "gemm": {"calls": 280, "seconds": 0.6}}}], f)

rc = subprocess.run([sys.executable, os.path.join(src, "scripts/gpu_summary.py"), work],
                    capture_output=True, text=True)
check(rc.returncode == 0, f"exit {rc.returncode}: {rc.stderr}")
s = json.load(open(os.path.join(work, "summary.json")))
goals = {g["what"]: g for g in s["goals"]}
check(abs(goals["cuBLASLt bf16 GEMM 8192^3"]["measured"] - 0.9) < 1e-12 and
      goals["cuBLASLt bf16 GEMM 8192^3"]["met"], f"8192^3: {goals['cuBLASLt bf16 GEMM 8192^3']}")
llama_gemm = goals["cuBLASLt bf16 GEMM, 1B llama shapes (worst)"]
check(abs(llama_gemm["measured"] - 0.65) < 1e-12 and not llama_gemm["met"], f"llama gemm: {llama_gemm}")
att = goals["cuDNN causal attention forward T=4096 D=128"]
check(abs(att["measured"] - 0.55) < 1e-12 and att["met"], f"attention: {att}")
mfu = goals["1B llama bf16 step MFU"]
check(abs(mfu["measured"] - 0.44) < 1e-12 and not mfu["met"], f"mfu: {mfu}")
rms = [r for r in s["ops"] if r["name"].startswith("BM_RowOp/rmsnorm_forward")][0]
check(abs(rms["of_hbm"] - 0.5) < 1e-12, f"rmsnorm of HBM: {rms}")
check(any("error" in r and "backward failed" in r["error"] for r in s["ops"]), "error row kept")
f32, bf16, graphs = s["losses"]
check(f32["steps"] == 3 and abs(f32["max_rel_diff"] - 5e-5) < 1e-9 and f32["met"], f"f32: {f32}")
check(bf16.get("missing") == ["metrics_train_cpu_bf16.jsonl"], f"bf16: {bf16}")
check(graphs["steps"] == 2 and graphs["max_rel_diff"] > 0 and not graphs["met"], f"graphs: {graphs}")
check(abs(s["llama"]["step_ms"] - 900) < 1e-9, f"llama: {s['llama']}")
tables = open(os.path.join(work, "summary_tables.md")).read()
check("NVIDIA H100 80GB HBM3" in tables and "| 1B llama bf16 step MFU | 44.0 % | 45.0 % | no |" in tables,
      "tables:\n" + tables)
check(s["op_times"]["ops"][0]["op"] == "gemm", f"op times: {s['op_times']}")
check("| gemm | 280 | 0.6000 | 50.0 % |" in tables and "| (between ops) | | 0.3000 | 25.0 % |" in tables,
      "op table:\n" + tables)
# No folder: exit 2 with the usage.
rc = subprocess.run([sys.executable, os.path.join(src, "scripts/gpu_summary.py"),
                     os.path.join(work, "absent")], capture_output=True, text=True)
check(rc.returncode == 2 and "usage" in rc.stderr, f"absent folder: {rc.returncode} {rc.stderr}")

for f in failures:
    print("FAIL:", f, file=sys.stderr)
print("gpu_summary_test:", "ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
