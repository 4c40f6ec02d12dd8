#!/usr/bin/env bash
# gpu_bundle.sh — pack the GPU checks for a machine that has CUDA but none of carousel's other
# libraries (the device tool's GPU machines: nothing can be installed there).
#
#   bash scripts/gpu_bundle.sh       # here: build, then write .gpu/ (git-ignored, ~15 MB)
#   device run: command "bash .gpu/run.sh checks", carry [".gpu"]   # there: unpack, run the checks
#   (then "bash .gpu/run.sh llama", "... cpu" and "... cpu_weights": one device call may run 10 min)
#
# .gpu/bundle.tar.xz holds the GPU binaries and the shared libraries they need that a CUDA image
# lacks (OpenBLAS, spdlog, fmt, yaml-cpp, Google Benchmark, Open MPI, ...). CUDA's own libraries
# (cuBLAS, NCCL) are not packed: the machine has them, and they would not fit the 64 MiB carry.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bins=(test_cuda_backend test_pipeline_gpu test_nccl gpu_op_bench carousel pipeline_bench all_reduce_perf
  all_gather_perf sendrecv_perf)
rm -rf .gpu && mkdir -p .gpu/stage/bin .gpu/stage/lib
for b in "${bins[@]}"; do
  if [ -x "build/bin/$b" ]; then cp "build/bin/$b" .gpu/stage/bin/; fi
done
# Every library the binaries load, except the C/C++ runtime (the machine's is as new) and CUDA's.
ldd .gpu/stage/bin/* | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|ld-linux|/cuda/' |
  while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
tar -C .gpu/stage -cJf .gpu/bundle.tar.xz .
rm -rf .gpu/stage
cp scripts/gpu_checks.sh .gpu/run.sh
du -sh .gpu
