#!/usr/bin/env bash
# demo.sh — set up, build and run the main job: the README's first command.
# For now: show what this build can run on, then measure the CPU backend's GEMM and attention
# throughput. (Once training lands, this becomes a short training run on simulated devices.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/bin/carousel info --cpu-devices 2
build/bin/op_bench --benchmark_min_time=0.2 \
  --benchmark_filter='GemmLinear/(512|1024)/|Attention/(forward|backward)/8/64'
