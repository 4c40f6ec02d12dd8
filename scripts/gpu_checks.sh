#!/usr/bin/env bash
# gpu_checks.sh — the checks that need a GPU, run from the repository root on the GPU machine
# (copied to .gpu/run.sh by scripts/gpu_bundle.sh, which packs the binaries it runs). Writes
# every log to $OUT (the device tool brings that folder back), else to .gpu/out.
#
#   bash .gpu/run.sh [checks|llama|cpu|all]     (default: checks)
#
# One device call may run 10 minutes, so the work comes in parts of a few minutes each:
#   checks  the GPU op tests, the executor on logical GPU devices, NCCL (ordering included),
#           cuBLAS GEMM TFLOP/s, single-GPU training f32/bf16, all_reduce_perf, a BSW trace
#   llama   a ~1.1B-parameter llama in bfloat16 on one GPU: step time, tokens/s, MFU
#   cpu     pipeline_bench on the machine's CPU cores (16: S = 4 without oversubscription),
#           every schedule at S = 2 and 4
#   cpu_weights   the same for the weight modes (F = 2)
set -uo pipefail
part=${1:-checks}
case $part in checks | llama | cpu | cpu_weights | all) ;; *)
  echo "gpu_checks.sh: unknown part '$part'; use checks, llama, cpu, cpu_weights or all" >&2
  exit 2
  ;;
esac
wants() { [ "$part" = "$1" ] || [ "$part" = all ]; }
out=${OUT:-.gpu/out}
mkdir -p "$out" /tmp/carousel
tar -C /tmp/carousel -xJf .gpu/bundle.tar.xz || {
  echo "gpu_checks.sh: cannot unpack .gpu/bundle.tar.xz (run scripts/gpu_bundle.sh here first)" >&2
  exit 2
}
bin=/tmp/carousel/bin
# The machine's CUDA libraries (cuBLAS, NCCL): the toolkit's, or the pip wheels PyTorch uses
# (found through python3's site-packages, and at the image's usual venv should python3 be
# another one).
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
py_libs=$(python3 - 2>/dev/null <<'PY'
import glob, site
print(":".join(d for p in site.getsitepackages() for d in sorted(glob.glob(p + "/nvidia/*/lib"))))
PY
)
venv_libs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | tr '\n' ':')
lib_path=/tmp/carousel/lib:${cuda_libs}${py_libs}:${venv_libs}${LD_LIBRARY_PATH:-}
# No empty entries: the loader reads one as the working directory.
export LD_LIBRARY_PATH=$(echo "$lib_path" | tr -s ':' | sed 's/^://; s/:$//')
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL says why when it fails
# Which cuBLAS / NCCL each binary loads, and any library not found (a binary that cannot load
# fails every part that runs it: say so first).
for b in "$bin"/*; do
  ldd "$b" | grep -E "not found|cublas|nccl" | sed "s|^|$(basename "$b"): |"
done > "$out/libs.txt"
# Libraries opened at run time, not linked: cuDNN (the fast tier's attention) and the CUDA runtime
# its frontend loads for itself.
for lib in libcudnn.so.9 libcudart.so.13; do
  python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" $lib 2>/dev/null &&
    echo "dlopen $lib: ok" >> "$out/libs.txt" || echo "dlopen $lib: not found" >> "$out/libs.txt"
done
grep "not found" "$out/libs.txt" && echo "gpu_checks.sh: libraries missing (above)"

# run NAME SECONDS COMMAND...: log to $out/NAME.log with a time limit (a hang costs its part, not
# the device call), print the log's tail, and add a row to $out/summary.md. The parts share one
# budget (a device call may run 600 s): a part gets at most what is left, and none when under
# 15 s are.
budget=${GPU_CHECKS_BUDGET:-570}
echo "| part | exit | seconds |" > "$out/summary.md"
echo "|---|---|---|" >> "$out/summary.md"
run() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS))
  if [ $left -lt 15 ]; then
    echo "== $name: skipped, ${left} s of the ${budget} s budget left"
    echo "| $name | skipped (budget) | 0 |" >> "$out/summary.md"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit} s)"
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo "(timed out after $limit s)" >> "$out/$name.log"
  echo "exit $rc"
  tail -n 25 "$out/$name.log"
  echo "| $name | $rc | $((SECONDS - start)) |" >> "$out/summary.md"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
lscpu > "$out/cpu.txt" 2>&1
export CAROUSEL_TEST_DATA_DIR=$PWD/tests/data
if wants checks; then
run gpu_tests 90 "$bin/test_cuda_backend"
run pipeline_gpu 180 "$bin/test_pipeline_gpu"
run nccl_tests 120 "$bin/test_nccl"
run gpu_op_bench 150 "$bin/gpu_op_bench" --benchmark_min_time=0.2 \
  --benchmark_out="$out/gpu_op_bench.json" --benchmark_out_format=json
# Single-GPU training in float32 and bfloat16, and the same runs on the CPU (the oracle): the
# summary compares their losses step by step (float32 1e-4, bf16 1e-2 relative).
for dtype in float32 bfloat16; do
  tag=$([ $dtype = float32 ] && echo f32 || echo bf16)
  for device in cuda cpu; do
    run train_${device}_$tag 120 "$bin/carousel" train configs/demo.yml ici_pipeline_parallelism=1 \
      ici_fsdp_parallelism=1 per_device_batch_size=8 num_pipeline_microbatches=1 device=$device \
      dtype=$dtype steps=20 log_period=1 base_output_directory=/tmp/carousel/out \
      run_name=${device}_$tag
    cp /tmp/carousel/out/${device}_$tag/metrics.jsonl "$out/metrics_train_${device}_$tag.jsonl" 2>/dev/null
  done
done
# The GPU runs above replay a captured CUDA graph from their third step (step_graphs=auto); the
# same bf16 run stepped eagerly must give the same bits (the summary compares them).
run train_cuda_bf16_eager 120 "$bin/carousel" train configs/demo.yml ici_pipeline_parallelism=1 \
  ici_fsdp_parallelism=1 per_device_batch_size=8 num_pipeline_microbatches=1 device=cuda \
  dtype=bfloat16 steps=20 log_period=1 step_graphs=off base_output_directory=/tmp/carousel/out \
  run_name=cuda_bf16_eager
cp /tmp/carousel/out/cuda_bf16_eager/metrics.jsonl "$out/metrics_train_cuda_bf16_eager.jsonl" 2>/dev/null
run nccl_all_reduce 90 "$bin/all_reduce_perf" --backend nccl -g 1 -b 8 -e 256M -f 4
# The executor on 4 logical devices of one GPU (in-process transport): the Buffer Sliding
# Window's gathers against compute in a measured trace (profiler_steps), copied to $out.
run trace_logical_bsw 90 "$bin/carousel" train configs/demo.yml device=cuda steps=4 \
  profiler_steps=2 enable_checkpointing=false base_output_directory=/tmp/carousel/out run_name=trace
cp /tmp/carousel/out/trace/trace.json "$out/trace_logical_bsw.json" 2>/dev/null
fi
if wants llama; then
# A llama of about 1.1B parameters (E 2048, 20 layers, 16 heads of 128, F 5504, vocab 32000) in
# bfloat16 on one GPU (one rank: the in-process transport, no NCCL): 8192 tokens per step in one
# microbatch (GEMMs with M = 8192), no recomputation (remat costs FLOPs MFU does not count);
# tokens/s, MFU and peak memory in the metrics, steps 3-4 profiled for the time by op kind. Twice:
# replaying a captured CUDA graph (the default; steps 1 and the profiled ones run eagerly) and
# stepped eagerly (step_graphs=off), for what the graph saves.
llama=(model_name=tiny vocab_size=32000 base_emb_dim=2048 base_num_decoder_layers=20
  base_num_query_heads=16 base_num_kv_heads=16 base_mlp_dim=5504 max_target_length=2048
  per_device_batch_size=4 num_pipeline_microbatches=1 remat_policy=none dtype=bfloat16 device=cuda
  log_period=1 enable_checkpointing=false base_output_directory=/tmp/carousel/out)
run llama_1b_bf16 330 "$bin/carousel" train "${llama[@]}" steps=10 profiler_steps=2 \
  skip_first_n_steps_for_profiler=3 run_name=llama1b
cp /tmp/carousel/out/llama1b/op_times.json "$out/op_times_llama_1b_bf16.json" 2>/dev/null
cp /tmp/carousel/out/llama1b/metrics.jsonl "$out/metrics_llama_1b_bf16.jsonl" 2>/dev/null
run llama_1b_bf16_eager 200 "$bin/carousel" train "${llama[@]}" steps=6 step_graphs=off \
  run_name=llama1b_eager
cp /tmp/carousel/out/llama1b_eager/metrics.jsonl "$out/metrics_llama_1b_bf16_eager.jsonl" 2>/dev/null
fi
# pipeline_bench's compute-dominated model (a microbatch's F is tens of ms, a hand-off ~0.1 ms,
# as on GPUs), on CPU ranks with cores to spare: issue 14's S <= 4 prediction check, which the
# 2-core development VM cannot make at S = 4.
bench_model=(-- max_target_length=256 base_emb_dim=512)
if wants cpu; then
run pipeline_bench_cpu 560 "$bin/pipeline_bench" \
  --schedules all \
  --stages 2,4 --factors 1,2,4 --batch 16 --json "$out/pipeline_bench_cpu.json" "${bench_model[@]}"
fi
if wants cpu_weights; then
run pipeline_bench_cpu_weights 560 "$bin/pipeline_bench" --schedules 1f1b,circular,zbv --stages 2,4 \
  --factors 2 --weight-modes none,per_use,bsw,once --batch 16 \
  --json "$out/pipeline_bench_cpu_weights.json" "${bench_model[@]}"
fi
cat "$out/summary.md"
# The tables docs/gpu.md records, each goal of the proof marked met or not.
python3 scripts/gpu_summary.py "$out" > /dev/null && echo "tables: $out/summary_tables.md"
