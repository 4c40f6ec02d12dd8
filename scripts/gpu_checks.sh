#!/usr/bin/env bash
# gpu_checks.sh — the checks that need a GPU, run from the repository root on the GPU machine
# (copied to .gpu/run.sh by scripts/gpu_bundle.sh, which packs the binaries it runs). Writes
# every log to $OUT (the device tool brings that folder back), else to .gpu/out.
set -uo pipefail
out=${OUT:-.gpu/out}
mkdir -p "$out" /tmp/carousel
tar -C /tmp/carousel -xJf .gpu/bundle.tar.xz
bin=/tmp/carousel/bin
# The machine's CUDA libraries (cuBLAS, NCCL): the toolkit's, or the pip wheels PyTorch uses.
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
py_libs=$(python3 - 2>/dev/null <<'PY'
import glob, site
print(":".join(d for p in site.getsitepackages() for d in sorted(glob.glob(p + "/nvidia/*/lib"))))
PY
)
export LD_LIBRARY_PATH=/tmp/carousel/lib:${cuda_libs}${py_libs}:${LD_LIBRARY_PATH:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}

run() {  # run NAME COMMAND...: log to $out/NAME.log, print its tail
  echo "== $1"
  local name=$1
  shift
  "$@" >"$out/$name.log" 2>&1
  echo "exit $?"
  tail -n 25 "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
export CAROUSEL_TEST_DATA_DIR=$PWD/tests/data
run gpu_tests "$bin/test_cuda_backend"
run pipeline_gpu "$bin/test_pipeline_gpu"
run nccl_tests "$bin/test_nccl"
run op_bench "$bin/op_bench" --benchmark_filter=Cuda --benchmark_min_time=0.5s
run train_cuda_f32 "$bin/carousel" train configs/demo.yml ici_pipeline_parallelism=1 \
  ici_fsdp_parallelism=1 per_device_batch_size=8 num_pipeline_microbatches=1 device=cuda \
  steps=20 log_period=5 base_output_directory=/tmp/carousel/out run_name=f32
run train_cuda_bf16 "$bin/carousel" train configs/demo.yml ici_pipeline_parallelism=1 \
  ici_fsdp_parallelism=1 per_device_batch_size=8 num_pipeline_microbatches=1 device=cuda \
  dtype=bfloat16 steps=20 log_period=5 base_output_directory=/tmp/carousel/out run_name=bf16
run nccl_all_reduce "$bin/all_reduce_perf" --backend nccl -g 1 -b 8 -e 256M -f 4
