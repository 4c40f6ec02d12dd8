#!/usr/bin/env python3
"""gpu_checks_test.py — scripts/gpu_checks.sh's mechanics on a machine without a GPU: the proof
run over stub programs (a crash, hangs, a benchmark killed with its JSON half written) under a
small budget, then scripts/gpu_summary.py on what it left.

    python3 tests/end_to_end/gpu/gpu_checks_test.py SOURCE_DIR WORK_DIR

Checks: a hanging part is killed at its limit and the next part still runs; a crash is recorded
with its exit status and the test it stopped in; parts past the budget are recorded as skipped
and never start; metrics written before a kill come back; a call killed mid-part leaves the
finished parts, the running part's name and its output; the CPU oracle runs with exactly the
GPU runs' keys; the goals are marked met / not met / not measured from that partial output.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time

src, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
shutil.rmtree(work, ignore_errors=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def write(path, text, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


BIN, PATHS, BUNDLE = (os.path.join(work, d) for d in ("bin", "path", "bundle"))
CALLS = os.path.join(work, "calls.jsonl")
LOSS = [4.0 - 0.1 * i for i in range(20)]  # the carried CPU runs' losses, steps 1..20
GPU_LOSS = {"float32": lambda x: x * (1 + 5e-5), "bfloat16": lambda x: x * (1 + 5e-3)}

# carousel: records its arguments; training runs write metrics (the GPU ones off the CPU
# losses by 5e-5 in float32, 5e-3 in bf16, the eager twin bitwise like the graph run); the llama
# writes steps 0-3 (MFU 0.10, 0.90, 0.47, 0.90: step 2 is the replayed one) and then hangs.
write(f"{BIN}/carousel", f"""#!/usr/bin/env python3
import json, os, sys, time
kv = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)
with open({CALLS!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
d = os.path.join(kv["base_output_directory"], kv["run_name"])
os.makedirs(d, exist_ok=True)
m = open(os.path.join(d, "metrics.jsonl"), "w")
if kv["run_name"].startswith("llama"):
    for step, mfu in enumerate([0.10, 0.90, 0.47, 0.90]):
        m.write(json.dumps({{"step": step, "loss": 9.0, "mfu": mfu, "step_ms": 100 / mfu,
                            "tokens_per_s": 8192e3 * mfu / 100, "peak_mem_bytes": 50 << 30}}) + "\\n")
    m.flush()
    time.sleep(300)
gpu = {{"float32": lambda x: x * (1 + 5e-5), "bfloat16": lambda x: x * (1 + 5e-3)}}
for step in range(1, int(kv["steps"]) + 1):
    loss = 4.0 - 0.1 * (step - 1)
    if kv["device"] == "cuda":
        loss = gpu[kv["dtype"]](loss)
    m.write(json.dumps({{"step": step, "loss": loss, "grad_norm": 1.5}}) + "\\n")
""", True)
# The op tests pass one test and abort in the next.
write(f"{BIN}/test_cuda_backend", """#!/usr/bin/env python3
import os, sys
print("[==========] Running 3 tests from 1 test suite.")
print("[ RUN      ] CudaVsCpu.gemm")
print("[       OK ] CudaVsCpu.gemm (3 ms)")
print("[ RUN      ] CudaVsCpu.attention_gqa", flush=True)
os.abort()
""", True)
# gpu_op_bench: Google Benchmark 1.7.1's console lines (captured from a real run of the library,
# FLOP rates set to 87 % and 60 % of 989.4 TFLOP/s), its JSON cut mid-record, then a hang.
write(f"{BIN}/gpu_op_bench", """#!/usr/bin/env python3
import sys, time
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark_out="))
open(out, "w").write('{\\n  "context": {\\n    "date": "2026-11-28T10:46:41+00:00"\\n  },\\n'
                     '  "benchmarks": [\\n    {\\n      "name": "BM_Gemm/fast_bf16/8192/8192/8192/real_time",\\n'
                     '      "real_ti')
print('''---------------------------------------------------------------------------------------------------------------
Benchmark                                                     Time             CPU   Iterations UserCounters...
---------------------------------------------------------------------------------------------------------------
BM_Gemm/fast_bf16/8192/8192/8192/real_time                 1.28 ms        0.028 ms          154 FLOP=860.778T/s fast
BM_Gemm/fast_bf16/8192/2048/2048/real_time                0.058 ms        0.021 ms         3400 FLOP=593.64T/s fast
BM_Attention/fast_forward/4/2048/16/16/128/real_time ERROR OCCURRED: 'cuDNN refused the graph'
BM_RowOp/rmsnorm_forward/fast/8192/2048/real_time           129 us         24.9 us          527 bytes=2.4T/s fast''',
      flush=True)
time.sleep(300)
""", True)
# The executor checks start a test and hang until the budget runs out.
write(f"{BIN}/test_pipeline_gpu", f"""#!/bin/sh
echo $$ > {work}/pipeline_gpu.pid
echo "[ RUN      ] PipelineGpu.Schedules"
sleep 300
""", True)
for name in ("test_nccl", "all_reduce_perf"):  # past the budget: must never start
    write(f"{BIN}/{name}", f"#!/bin/sh\ntouch {work}/ran_{name}\n", True)
write(f"{PATHS}/nvidia-smi", """#!/bin/sh
echo "name, memory.total [MiB], driver_version"
echo "NVIDIA H200, 143771 MiB, 580.95.05"
""", True)
for dtype, tag in (("bfloat16", "bf16"), ("float32", "f32")):
    write(f"{BUNDLE}/oracle/metrics_train_cpu_{tag}.jsonl",
          "".join(json.dumps({"step": i + 1, "loss": x, "grad_norm": 1.5}) + "\n"
                  for i, x in enumerate(LOSS)))
write(f"{BUNDLE}/versions.txt", "cuDNN frontend 1.32.0\ncuDNN headers 9.10.2\n")


def gpu_checks(out, *args, budget=24, timeout=None, **limits):
    env = dict(os.environ, PATH=f"{PATHS}:{os.environ['PATH']}", OUT=out, GPU_CHECKS_BIN=BIN,
               GPU_CHECKS_BUNDLE=BUNDLE, GPU_CHECKS_TMP=os.path.join(work, "tmp"),
               GPU_CHECKS_BUDGET=str(budget), GPU_CHECKS_MIN_PART="3",
               **{f"GPU_CHECKS_LIMIT_{k}": str(v) for k, v in limits.items()})
    cmd = ["bash", os.path.join(src, "scripts/gpu_checks.sh"), *args]
    if timeout:  # the device tool ending the call: the whole process group goes
        cmd = ["timeout", str(timeout)] + cmd
    return subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)


def summary_rows(path):
    rows = {}
    for line in open(path).read().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def tar_names(path):
    with tarfile.open(path) as t:
        return {os.path.basename(m.name) for m in t.getmembers() if m.isfile()}


# 1. The proof under 24 s: libs, the crash, two training runs, the llama killed at 2 s, the
# benchmark killed at 2 s, the float32 run, the executor checks killed when the budget ends (or
# skipped, on a slow machine), the grouped GEMM probe and NCCL skipped.
out = os.path.join(work, "out")
t0 = time.time()
rc = gpu_checks(out, budget=24, llama_1b_bf16=2, gpu_op_bench=2)
took = time.time() - t0
check(rc.returncode == 1, f"proof exit {rc.returncode} (1: parts failed): {rc.stderr[-2000:]}")
check(took < 24 + 15, f"the proof took {took:.0f} s for a 24 s budget")
rows = summary_rows(os.path.join(out, "summary.md"))
order = list(rows)
check(order == ["libs", "gpu_tests", "train_cuda_bf16", "train_cuda_bf16_eager", "llama_1b_bf16",
               "gpu_op_bench", "train_cuda_f32", "pipeline_gpu", "gpu_grouped_probe", "nccl_tests",
               "nccl_all_reduce"],
      f"part order {order}")
check(rows.get("gpu_tests", [""])[0] == "134 (SIGABRT)", f"crash row {rows.get('gpu_tests')}")
for name in ("train_cuda_bf16", "train_cuda_bf16_eager", "train_cuda_f32"):
    check(rows.get(name, [""])[0] == "0", f"{name} row {rows.get(name)}")
for name in ("llama_1b_bf16", "gpu_op_bench"):  # killed at their 2 s, and the next part ran
    r = rows.get(name, ["", "99"])
    check(r[0] == "124 (timed out)" and int(r[1]) <= 4, f"{name} row {r}")
pipe = rows.get("pipeline_gpu", [""])
check(pipe[0] in ("124 (timed out)", "skipped (budget)"), f"pipeline_gpu row {pipe}")
for name, program in (("nccl_tests", "test_nccl"), ("nccl_all_reduce", "all_reduce_perf")):
    check(rows.get(name, [""])[0] == "skipped (budget)", f"{name} row {rows.get(name)}")
    check(not os.path.exists(f"{work}/ran_{program}"), f"{name} started after the budget ran out")
files = sorted(os.listdir(out))
check(files == ["proof.tar.gz", "summary.json", "summary.md", "summary_tables.md"],
      f"$OUT holds {files} (the device tool returns 8 files at most)")
members = tar_names(os.path.join(out, "proof.tar.gz"))
with tarfile.open(os.path.join(out, "proof.tar.gz")) as t:
    read = lambda n: t.extractfile(next(m for m in t.getmembers() if m.name.endswith("/" + n))).read().decode()
    llama_rows = [json.loads(l) for l in read("metrics_llama_1b_bf16.jsonl").splitlines()]
    check(len(llama_rows) == 4, f"the killed llama's metrics: {len(llama_rows)} rows")
    check("FLOP=860.778T/s" in read("gpu_op_bench.log") and "timed out" in read("gpu_op_bench.log"),
          "the killed benchmark's console log")
    check(read("gpu_op_bench.json").endswith('"real_ti'), "the cut JSON is kept as it was")
    check("NVIDIA H200" in read("gpu.txt"), "nvidia-smi's facts")
    check("dlopen libnvrtc.so.13" in read("libs.txt") and
          "dlopen libcudnn_engines_runtime_compiled.so.9" in read("libs.txt"), "dlopen list")
for name in ("metrics_train_cpu_bf16.jsonl", "metrics_train_cpu_f32.jsonl", "build_versions.txt",
             "gpu_tests.log", "pipeline_gpu.log"):
    check(name in members, f"{name} missing from proof.tar.gz ({sorted(members)})")

# 2. The summary of that partial run (written on the machine, after every part).
s = json.load(open(os.path.join(out, "summary.json")))
g = {x["what"]: x for x in s["goals"]}
expect = {"cuBLASLt bf16 GEMM 8192^3": ("met", 0.87),
          "cuBLASLt bf16 GEMM, 1B llama shapes (worst)": ("not met", 0.60),
          "cuDNN causal attention forward T=4096 D=128": ("not measured", None),
          "1B llama bf16 step MFU": ("met", 0.47),
          "train_cuda_bf16 vs train_cpu_bf16 (CPU, carried), relative loss difference": ("met", 5e-3),
          "train_cuda_f32 vs train_cpu_f32 (CPU, carried), relative loss difference": ("met", 5e-5),
          "train_cuda_bf16 vs train_cuda_bf16_eager, bitwise (loss and grad_norm)": ("met", 0.0)}
for what, (status, measured) in expect.items():
    got = g.get(what)
    ok = got is not None and got["status"] == status and (
        measured is None and got["measured"] is None or
        measured is not None and got["measured"] is not None and abs(got["measured"] - measured) < 2e-3 * max(measured, 1e-3))
    check(ok, f"goal {what}: want {status} {measured}, got {got}")
check(any("cut short" in o for o in s["ops_from"]), f"console fallback not said: {s['ops_from']}")
t = s["tests"]["gpu_tests"]
check(t["passed"] == 1 and t["stopped_in"] == "CudaVsCpu.attention_gqa", f"gpu_tests: {t}")
tables = open(os.path.join(out, "summary_tables.md")).read()
check("| gpu_tests | 134 (SIGABRT) |" in tables and "stopped in CudaVsCpu.attention_gqa" in tables,
      "parts table:\n" + tables)

# 3. The device tool ends the call during the executor checks: what finished is in $OUT, and
# summary.md and running.log say which part was running and what it printed.
out2 = os.path.join(work, "out_killed")
rc = gpu_checks(out2, "train_cuda_f32", "pipeline_gpu", budget=100, timeout=5)
check(rc.returncode == 124, f"killed call exit {rc.returncode}")
members = tar_names(os.path.join(out2, "proof.tar.gz"))
check("metrics_train_cuda_f32.jsonl" in members, f"finished part lost: {sorted(members)}")
summary = open(os.path.join(out2, "summary.md")).read()
check("| train_cuda_f32 | 0 |" in summary and "| pipeline_gpu | running since" in summary,
      "killed call's summary.md:\n" + summary)
check("PipelineGpu.Schedules" in open(os.path.join(out2, "running.log")).read(), "running.log")
time.sleep(0.5)
pid = int(open(f"{work}/pipeline_gpu.pid").read())
check(not os.path.exists(f"/proc/{pid}"), "the running part outlived the killed call")

# 4. The CPU oracle (gpu_bundle.sh's part) runs with exactly the GPU runs' keys, device aside.
open(CALLS, "w").close()
rc = gpu_checks(os.path.join(work, "out_oracle"), "cpu_oracle", "train_cuda_bf16", "train_cuda_f32",
                budget=60)
calls = [json.loads(l) for l in open(CALLS)]
strip = lambda argv: sorted(a for a in argv if not a.startswith(("device=", "run_name=")))
by = {next(a for a in c if a.startswith("run_name="))[9:]: c for c in calls}
check(set(by) == {"train_cpu_bf16", "train_cpu_f32", "train_cuda_bf16", "train_cuda_f32"}, f"runs {set(by)}")
check(strip(by.get("train_cpu_bf16", [])) == strip(by.get("train_cuda_bf16", [1])) and
      strip(by.get("train_cpu_f32", [])) == strip(by.get("train_cuda_f32", [1])),
      f"oracle keys differ: {calls}")
check("device=cpu" in by.get("train_cpu_bf16", []), "oracle device")

# 5. Bad input: one line, exit 2, no traceback.
for args, env_budget in ((["checks_and_more"], 24), (["proof"], "ten")):
    rc = gpu_checks(os.path.join(work, "out_bad"), *args, budget=env_budget)
    check(rc.returncode == 2 and rc.stderr.count("\n") == 1 and "gpu_checks.sh:" in rc.stderr,
          f"bad input {args} {env_budget}: {rc.returncode} {rc.stderr!r}")

for f in failures:
    print("FAIL:", f, file=sys.stderr)
print("gpu_checks_test:", "ok" if not failures else f"{len(failures)} failure(s)",
      f"({time.time() - t0:.0f} s)")
sys.exit(1 if failures else 0)
