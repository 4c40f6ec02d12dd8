#!/usr/bin/env bash
# gpu_checks.sh — the GPU proof: carousel's checks on a GPU machine, part by part under one time
# budget, each part's results written to $OUT as it ends, so a call cut short still returns what
# was done. Packed as .gpu/run.sh by scripts/gpu_bundle.sh; run from the repository root.
#
#   bash .gpu/run.sh [proof | rest | cpu | cpu_weights | cpu_oracle | PART...]   (default: proof)
#
# proof — one device call of at most 8 minutes (450 s of parts plus the machine's start-up), in
#   the order that yields the most if cut short (limit in seconds; "need": skipped with less left):
#     libs                  nvidia-smi, ldd of every binary, dlopen of cuDNN (and its graph and
#                           run-time-compiled engine libraries), NVRTC, cuBLASLt, cudart  (60)
#     gpu_tests             test_cuda_backend: every op, fast tier vs reference vs CPU  (170)
#     train_cuda_bf16       demo model on one GPU, bf16, CUDA graphs; against the CPU metrics
#                           gpu_bundle.sh computed here and carried in .gpu/oracle/  (60)
#     train_cuda_bf16_eager the same with step_graphs=off: graph vs eager, bitwise  (45)
#     llama_1b_bf16         the 1.1B llama in bf16: tokens/s, MFU, peak memory, op_times.json
#                           (200; need 90)
#     gpu_op_bench          cuBLASLt GEMM and cuDNN attention TFLOP/s, the goals' shapes only  (90)
#     train_cuda_f32        float32 against its carried CPU twin (the op tests check float32
#                           already: this one runs if it fits)  (45)
#     pipeline_gpu          test_pipeline_gpu: the executor on logical devices of the GPU  (150)
#     gpu_grouped_probe     whether cuBLAS's grouped GEMM takes bf16 into float32 in one call
#                           (alone: a sticky error must not spoil other tests)  (30)
#     nccl_tests            test_nccl  (60)
#     nccl_all_reduce       all_reduce_perf over NCCL  (40)
# rest — a second call for what the proof leaves out: libs, llama_1b_bf16_eager (what the graph
#   saves), gpu_op_bench_rest (every other benchmark: reference tier, row kernels, float32, GQA),
#   trace_logical_bsw (a measured BSW trace on 4 logical devices). A part the proof skipped or
#   that failed reruns by name: bash .gpu/run.sh libs pipeline_gpu
# cpu, cpu_weights — CPU only (never on a GPU lease unless its CPUs are the point): pipeline_bench
#   on the machine's cores, every schedule at S = 2 and 4 / the weight modes at F = 2.
# cpu_oracle — CPU only, run on the development machine by gpu_bundle.sh: the CPU twins of the
#   training parts (train_cpu_bf16, train_cpu_f32), with the very keys the GPU runs use.
#
# $OUT (the device tool brings back at most 8 files) receives: summary.md (a row per part),
# summary_tables.md and summary.json (scripts/gpu_summary.py: the goals met / not met / not
# measured), proof.tar.gz (every log, metrics file and benchmark JSON), all rewritten after each
# part, and running.log, the output of the part in progress (what a killed call leaves of it).
#
# Environment: GPU_CHECKS_BUDGET (seconds for all parts, 450), GPU_CHECKS_LIMIT_<part> (a part's
# limit), GPU_CHECKS_MIN_PART (15: a part is skipped with less left), GPU_CHECKS_BIN (binaries to
# use instead of unpacking the bundle), GPU_CHECKS_BUNDLE (.gpu), GPU_CHECKS_TMP (/tmp/carousel).
# Exit status: 0 when every part passed, 1 when one failed or was skipped, 2 on bad usage.
set -uo pipefail

declare -A limit=([libs]=60 [gpu_tests]=170 [train_cuda_bf16]=60 [train_cuda_bf16_eager]=45
  [train_cuda_f32]=45 [llama_1b_bf16]=200 [gpu_op_bench]=90 [pipeline_gpu]=150 [nccl_tests]=60
  [nccl_all_reduce]=40 [gpu_grouped_probe]=30 [llama_1b_bf16_eager]=200 [gpu_op_bench_rest]=150 [trace_logical_bsw]=90
  [pipeline_bench_cpu]=560 [pipeline_bench_cpu_weights]=560 [train_cpu_bf16]=900
  [train_cpu_f32]=900)
# The llama spends its first minute on host initialisation and plans: with less left it would
# only be killed, so the cheaper parts after it run instead.
declare -A need=([llama_1b_bf16]=90 [llama_1b_bf16_eager]=90)
declare -A group=(
  [proof]="libs gpu_tests train_cuda_bf16 train_cuda_bf16_eager llama_1b_bf16 gpu_op_bench
           train_cuda_f32 pipeline_gpu gpu_grouped_probe nccl_tests nccl_all_reduce"
  [rest]="libs llama_1b_bf16_eager gpu_op_bench_rest trace_logical_bsw"
  [cpu]=pipeline_bench_cpu [cpu_weights]=pipeline_bench_cpu_weights
  [cpu_oracle]="train_cpu_bf16 train_cpu_f32")

[ $# -eq 0 ] && set -- proof
parts=()
for arg in "$@"; do
  if [ -n "${group[$arg]:-}" ]; then
    # shellcheck disable=SC2206  # a group's part names, split on whitespace on purpose
    parts+=(${group[$arg]})
  elif [ -n "${limit[$arg]:-}" ]; then
    parts+=("$arg")
  else
    echo "gpu_checks.sh: unknown part '$arg'; use proof, rest, cpu, cpu_weights, cpu_oracle or" \
      "a part name: $(printf '%s\n' "${!limit[@]}" | sort | paste -sd ' ')" >&2
    exit 2
  fi
done
budget=${GPU_CHECKS_BUDGET:-450}
min_part=${GPU_CHECKS_MIN_PART:-15}
bundle=${GPU_CHECKS_BUNDLE:-.gpu}
tmp=${GPU_CHECKS_TMP:-/tmp/carousel}
out=${OUT:-$bundle/out}
work=$tmp/proof   # everything the parts leave; packed into $out/proof.tar.gz after each part
runs=$tmp/runs    # the training runs' output directories
for v in GPU_CHECKS_BUDGET GPU_CHECKS_MIN_PART $(compgen -v GPU_CHECKS_LIMIT_); do
  [[ ${!v:-0} =~ ^[0-9]+$ ]] || { echo "gpu_checks.sh: $v is whole seconds, not '${!v}'" >&2; exit 2; }
done
rm -rf "$work" && mkdir -p "$out" "$work" "$runs" || exit 2
if [ -n "${GPU_CHECKS_BIN:-}" ]; then
  bin=$GPU_CHECKS_BIN
else
  mkdir -p "$tmp" && tar -C "$tmp" -xJf "$bundle/bundle.tar.xz" || {
    echo "gpu_checks.sh: cannot unpack $bundle/bundle.tar.xz (run scripts/gpu_bundle.sh here first)" >&2
    exit 2
  }
  bin=$tmp/bin
fi
# The CPU runs gpu_bundle.sh made on the development machine (the GPU runs' oracle) and the
# versions it built against.
cp "$bundle"/oracle/metrics_*.jsonl "$work"/ 2>/dev/null
cp "$bundle/versions.txt" "$work/build_versions.txt" 2>/dev/null
# The machine's CUDA libraries (cuBLAS, NCCL, cuDNN, NVRTC): the toolkit's, or the pip wheels
# PyTorch uses (found through python3's site-packages, and at the image's usual venv should
# python3 be another one).
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
py_libs=$(python3 - 2>/dev/null <<'PY'
import glob, site
print(":".join(d for p in site.getsitepackages() for d in sorted(glob.glob(p + "/nvidia/*/lib"))))
PY
)
venv_libs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | tr '\n' ':')
lib_path=$tmp/lib:${cuda_libs}${py_libs}:${venv_libs}${LD_LIBRARY_PATH:-}
# No empty entries: the loader reads one as the working directory.
export LD_LIBRARY_PATH=$(echo "$lib_path" | tr -s ':' | sed 's/^://; s/:$//')
cores=$(nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$((cores < 8 ? cores : 8))}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL says why when it fails
export CAROUSEL_TEST_DATA_DIR=$PWD/tests/data
export bin work

# put FILE...: copy into $out whole (a copy then a rename: a call killed meanwhile leaves the
# previous version, never half a file).
put() {
  for f in "$@"; do
    [ -f "$f" ] && cp "$f" "$out/.put" && mv "$out/.put" "$out/$(basename "$f")"
  done
}
# publish: the tables from what is there so far, and everything packed, into $out.
publish() {
  python3 scripts/gpu_summary.py "$work" > /dev/null 2> "$work/summary_errors.log" ||
    echo "(gpu_summary.py failed: $(tail -n 1 "$work/summary_errors.log"))"
  put "$work/summary.md" "$work/summary_tables.md" "$work/summary.json"
  tar -C "$work" -czf "$out/proof.tar.gz.part" . && mv "$out/proof.tar.gz.part" "$out/proof.tar.gz"
}
row() { echo "| $1 | $2 | $3 | $4 |" >> "$work/summary.md"; }
# Ended from outside (the device tool's limit, Ctrl-C): the running part goes too (timeout passes
# the signal on to its process group, which our own process group does not include).
child=
trap 'echo "gpu_checks.sh: stopped by a signal"; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 143' TERM INT HUP
echo "| part | exit | seconds | limit |" > "$work/summary.md"
echo "|---|---|---|---|" >> "$work/summary.md"
failed=0

# run NAME COMMAND...: the part's command under its limit (a hang costs the part, never the
# call): its output goes to $out/running.log while it runs, then to $work/NAME.log, and a row
# to summary.md. A part gets at most what is left of the budget (less 5 s for the summary), and
# is skipped when that is under its need.
run() {
  local name=$1
  shift
  local var=GPU_CHECKS_LIMIT_$name
  local lim=${!var:-${limit[$name]}} left=$((budget - SECONDS - 5))
  local needs=${need[$name]:-$min_part}
  [ "$needs" -gt "$lim" ] && needs=$lim  # a part never needs more than its own limit
  if [ $left -lt "$needs" ]; then
    echo "== $name: skipped, $((budget - SECONDS)) s of the $budget s budget left"
    row "$name" "skipped (budget)" 0 "$lim"
    failed=1
    return
  fi
  if [[ $1 == */* && ! -x $1 ]]; then
    echo "== $name: $1 is not in this bundle (not built here)"
    row "$name" "not built" 0 "$lim"
    failed=1
    return
  fi
  [ "$lim" -gt $left ] && lim=$left
  echo "== $name (limit $lim s)"
  # $out/summary.md names the part in progress, should the call end during it.
  { cat "$work/summary.md"; echo "| $name | running since $SECONDS s | | $lim |"; } > "$out/.put" &&
    mv "$out/.put" "$out/summary.md"
  local start=$SECONDS
  # In the background, waited for, so that a signal to this script is handled at once.
  timeout -k 10 "$lim" "$@" > "$out/running.log" 2>&1 &
  child=$!
  wait $child
  local rc=$?
  child=
  local how=$rc
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    how="$rc (timed out)"
    echo "(timed out after $lim s)" >> "$out/running.log"
  elif [ $rc -gt 128 ]; then
    how="$rc (SIG$(kill -l $((rc - 128)) 2>/dev/null))"
  fi
  [ $rc -ne 0 ] && failed=1
  # A runaway log keeps its head and tail (the bundle comes back through a 16 MiB file).
  if [ "$(stat -c %s "$out/running.log")" -gt 4194304 ]; then
    { head -c 1048576 "$out/running.log"; echo; echo "[... cut ...]"; tail -c 2097152 "$out/running.log"; } > "$work/$name.log"
    rm -f "$out/running.log"
  else
    mv "$out/running.log" "$work/$name.log"
  fi
  echo "exit $how after $((SECONDS - start)) s"
  tail -n 12 "$work/$name.log"
  row "$name" "$how" $((SECONDS - start)) "$lim"
}

# The library and device facts (run under `run` through bash -c, hence exported).
libs_facts() {
  timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$work/gpu.txt" 2>&1
  timeout 20 nvidia-smi > "$work/nvidia-smi.txt" 2>&1
  lscpu > "$work/cpu.txt" 2>&1
  { date -u +"date %Y-%m-%dT%H:%M:%SZ"; echo "host $(hostname)"; uname -a; } > "$work/facts.txt"
  for b in "$bin"/*; do echo "== $(basename "$b")"; ldd "$b" 2>&1; done > "$work/ldd.txt"
  # Which cuBLAS / NCCL each binary loads, and any library not found (a binary that cannot
  # load fails every part that runs it).
  for b in "$bin"/*; do
    ldd "$b" 2>&1 | grep -E "not found|cublas|nccl" | sed "s|^|$(basename "$b"): |"
  done > "$work/libs.txt"
  # Libraries opened at run time, not linked: cuDNN and what its run-time-compiled Hopper
  # attention engines load (NVRTC and its builtins), cuBLASLt, the CUDA runtime the frontend
  # loads itself. Each one's file and, where it says, its version.
  python3 - >> "$work/libs.txt" 2>&1 <<'PY'
import ctypes, glob, os
names = ["libcudart.so.13", "libnvrtc.so.13", None, "libcublasLt.so.13", "libcublas.so.13",
         "libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_engines_runtime_compiled.so.9",
         "libnccl.so.2"]
found = sorted(os.path.basename(p) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d
               for p in glob.glob(os.path.join(d, "libnvrtc-builtins.so.13*")))
names[2] = found[0] if found else "libnvrtc-builtins.so.13.0"
def version(lib, name):
    if name.startswith("libcudnn.so"):
        lib.cudnnGetVersion.restype = ctypes.c_size_t
        return lib.cudnnGetVersion()
    if name.startswith("libcublasLt"):
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        return lib.cublasLtGetVersion()
    if name.startswith("libnvrtc.so"):
        a, b = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
        return f"{a.value}.{b.value}"
    if name.startswith("libcudart"):
        r, d = ctypes.c_int(), ctypes.c_int()
        lib.cudaRuntimeGetVersion(ctypes.byref(r))
        lib.cudaDriverGetVersion(ctypes.byref(d))
        return f"runtime {r.value}, driver {d.value}"
    return None
for name in names:
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        print(f"dlopen {name}: not found ({e})")
        continue
    stem = name.split(".so")[0] + ".so"
    path = next((l.split()[-1] for l in open("/proc/self/maps") if "/" + stem in l), "?")
    try:
        v = version(lib, name)
    except Exception as e:  # a symbol missing: the library is there, its version unknown
        v = f"? ({e})"
    print(f"dlopen {name}: ok {path}" + (f" version {v}" if v is not None else ""))
PY
  cat "$work/gpu.txt" "$work/libs.txt"
  ! grep -q "not found" "$work/libs.txt"
}
export -f libs_facts

# The single-GPU training runs and their CPU twins: the same keys, device= aside (the CPU ones
# run on the development machine: part cpu_oracle, from gpu_bundle.sh). 20 steps of the demo
# model on one rank; no profiled steps, so the graph run replays a CUDA graph from its third step.
train_keys=(configs/demo.yml ici_pipeline_parallelism=1 ici_fsdp_parallelism=1
  per_device_batch_size=8 num_pipeline_microbatches=1 steps=20 log_period=1 profiler_steps=0
  enable_checkpointing=false)
train() {  # NAME DEVICE DTYPE [KEY=VALUE...]
  local name=$1 device=$2 dtype=$3
  shift 3
  rm -rf "${runs:?}/$name"
  run "$name" "$bin/carousel" train "${train_keys[@]}" device="$device" dtype="$dtype" \
    base_output_directory="$runs" run_name="$name" "$@"
  cp "$runs/$name/metrics.jsonl" "$work/metrics_$name.jsonl" 2>/dev/null
}
# A llama of about 1.1B parameters (E 2048, 20 layers, 16 heads of 128, F 5504, vocab 32000) in
# bfloat16 on one GPU (one rank: the in-process transport, no NCCL): 8192 tokens per step in one
# microbatch (GEMMs with M = 8192), no recomputation (remat costs FLOPs MFU does not count).
# 8 steps: 0 eager, 1 captured, 3-4 profiled (op_times.json), 5 re-maps the graph's memory, so
# 2, 6 and 7 are the replayed steps gpu_summary.py takes the median of (3 cost well under 1 s).
llama_keys=(model_name=tiny vocab_size=32000 base_emb_dim=2048 base_num_decoder_layers=20
  base_num_query_heads=16 base_num_kv_heads=16 base_mlp_dim=5504 max_target_length=2048
  per_device_batch_size=4 num_pipeline_microbatches=1 remat_policy=none dtype=bfloat16 device=cuda
  log_period=1 enable_checkpointing=false steps=8 base_output_directory="$runs")
llama() {  # NAME [KEY=VALUE...]
  local name=$1
  shift
  rm -rf "${runs:?}/$name"
  run "$name" "$bin/carousel" train "${llama_keys[@]}" run_name="$name" "$@"
  cp "$runs/$name/metrics.jsonl" "$work/metrics_$name.jsonl" 2>/dev/null
  cp "$runs/$name/op_times.json" "$work/op_times_$name.json" 2>/dev/null
}
# The benchmarks behind the goals: cuBLASLt bf16 GEMMs (8192^3, the llama's forward and weight-
# gradient shapes) and cuDNN attention at the llama's shape and at T 4096 / D 128.
goal_benches='^BM_Gemm/fast_bf16|^BM_Attention/fast_(forward|backward)/(4/2048/16/16/128|2/4096/16/16/128)/'
bench() {  # NAME FILTER
  run "$1" "$bin/gpu_op_bench" --benchmark_filter="$2" --benchmark_min_time=0.2 \
    --benchmark_color=false --benchmark_out="$work/$1.json" --benchmark_out_format=json
}
# pipeline_bench's compute-dominated model (a microbatch's F is tens of ms, a hand-off ~0.1 ms,
# as on GPUs), on CPU ranks with cores to spare: issue 14's S <= 4 prediction check.
bench_model=(-- max_target_length=256 base_emb_dim=512)

part() {
  case $1 in
    libs) run libs bash -c libs_facts ;;
    # The mixed-type grouped GEMM probe runs alone: googletest runs plain TESTs before the
    # parameterised op cases, and an illegal address from a call cuBLAS may not support is sticky.
    gpu_tests) run gpu_tests "$bin/test_cuda_backend" --gtest_filter=-CudaGroupedGemm.* ;;
    gpu_grouped_probe) run gpu_grouped_probe "$bin/test_cuda_backend" --gtest_filter=CudaGroupedGemm.* ;;
    train_cuda_bf16) train train_cuda_bf16 cuda bfloat16 ;;
    train_cuda_bf16_eager) train train_cuda_bf16_eager cuda bfloat16 step_graphs=off ;;
    train_cuda_f32) train train_cuda_f32 cuda float32 ;;
    train_cpu_bf16) train train_cpu_bf16 cpu bfloat16 ;;
    train_cpu_f32) train train_cpu_f32 cpu float32 ;;
    llama_1b_bf16) llama llama_1b_bf16 profiler_steps=2 skip_first_n_steps_for_profiler=3 ;;
    llama_1b_bf16_eager) llama llama_1b_bf16_eager step_graphs=off ;;
    gpu_op_bench) bench gpu_op_bench "$goal_benches" ;;
    gpu_op_bench_rest) bench gpu_op_bench_rest "-$goal_benches" ;;
    pipeline_gpu) run pipeline_gpu "$bin/test_pipeline_gpu" ;;
    nccl_tests) run nccl_tests "$bin/test_nccl" ;;
    nccl_all_reduce) run nccl_all_reduce "$bin/all_reduce_perf" --backend nccl -g 1 -b 8 -e 256M -f 4 ;;
    trace_logical_bsw)  # the demo's BSW layout on 4 logical devices of the GPU, measured
      rm -rf "${runs:?}/trace"
      run trace_logical_bsw "$bin/carousel" train configs/demo.yml device=cuda steps=4 \
        profiler_steps=2 enable_checkpointing=false base_output_directory="$runs" run_name=trace
      cp "$runs/trace/trace.json" "$work/trace_logical_bsw.json" 2>/dev/null ;;
    pipeline_bench_cpu)
      run pipeline_bench_cpu "$bin/pipeline_bench" --schedules all --stages 2,4 --factors 1,2,4 \
        --batch 16 --json "$work/pipeline_bench_cpu.json" "${bench_model[@]}" ;;
    pipeline_bench_cpu_weights)
      run pipeline_bench_cpu_weights "$bin/pipeline_bench" --schedules 1f1b,circular,zbv \
        --stages 2,4 --factors 2 --weight-modes none,per_use,bsw,once --batch 16 \
        --json "$work/pipeline_bench_cpu_weights.json" "${bench_model[@]}" ;;
  esac
}

echo "gpu_checks.sh $*: ${parts[*]} (budget $budget s)"
for p in "${parts[@]}"; do
  part "$p"
  publish
done
rm -f "$out/running.log"
echo
cat "$work/summary.md"
[ -f "$work/summary_tables.md" ] && { echo; cat "$work/summary_tables.md"; }
echo
echo "gpu_checks.sh: done in $SECONDS s; results in $out (summary.md, summary_tables.md," \
  "summary.json, proof.tar.gz)$([ $failed -ne 0 ] && echo '; some parts failed or were skipped')"
exit $failed
