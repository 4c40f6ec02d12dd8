#!/usr/bin/env bash
# gpu_bundle.sh — pack .gpu/, everything the GPU proof needs on a machine that has CUDA but none
# of carousel's other libraries (the device tool's GPU machines: nothing can be installed there),
# including the CPU work the proof compares against, done here so no device minute goes to it.
#
#   bash scripts/gpu_bundle.sh     # here: build (under the build lock), CPU oracle runs, pack .gpu/
#   device tool: run(command="bash .gpu/run.sh", carry=[".gpu"], timeout_s=480)   # the proof
#                run(command="bash .gpu/run.sh rest", carry=[".gpu"])             # if time is left
#
# .gpu/ holds: bundle.tar.xz (the binaries and the shared libraries they need that a CUDA image
# lacks: OpenBLAS, spdlog, fmt, yaml-cpp, Google Benchmark, Open MPI, ...; CUDA's own cuBLAS,
# cuDNN, NVRTC and NCCL are the machine's), run.sh (scripts/gpu_checks.sh), oracle/ (the CPU
# training runs' metrics, part cpu_oracle: the GPU runs' very keys on device=cpu) and
# versions.txt (the cuDNN frontend and cuDNN headers built against). The device tool carries at
# most 64 MiB with the working tree: this script fails if .gpu/ and the tree do not fit.
set -euo pipefail
cd "$(dirname "$0")/.."
# GPU_BUNDLE_DIR: where to pack (.gpu, what the device tool's carry names; the CTest gpu_bundle
# packs elsewhere so a test run leaves a developer's .gpu/ alone).
dest=${GPU_BUNDLE_DIR:-.gpu}
fail() {
  echo "gpu_bundle.sh: $*" >&2
  exit 1
}
lock=/tmp/carousel-build.lock
required=(test_cuda_backend test_pipeline_gpu gpu_op_bench carousel)
optional=(test_nccl pipeline_bench all_reduce_perf all_gather_perf sendrecv_perf)

# Build what the bundle packs, under the lock every build here shares (the first configure
# builds everything, as scripts/build.sh does).
if [ ! -f build/CMakeCache.txt ]; then
  flock "$lock" bash scripts/build.sh
fi
targets=$(cmake --build build --target help 2>/dev/null | sed -E 's/^\.\.\. //; s/:.*//' || true)
bins=()
for b in "${required[@]}" "${optional[@]}"; do
  if grep -qx "$b" <<< "$targets"; then
    bins+=("$b")
  elif [[ " ${required[*]} " == *" $b "* ]]; then
    fail "build/ has no target $b: this build has no CUDA (nvcc not found, or CAROUSEL_CUDA=OFF)"
  fi
done
flock "$lock" cmake --build build --target "${bins[@]}" -j "$(nproc)"

# Without the cuDNN frontend headers the fast tier compiles its attention as the reference
# kernel (a CMake STATUS line only): the proof would run and report MFU of a few percent.
cache() { sed -n "s/^$1:[A-Z]*=//p" build/CMakeCache.txt; }
fe=$(cache CUDNN_FRONTEND_INCLUDE_DIR)
cudnn=$(cache CUDNN_INCLUDE_DIR)
if [ -z "$fe" ] || [[ $fe == *NOTFOUND ]] || [ -z "$cudnn" ] || [[ $cudnn == *NOTFOUND ]]; then
  fail "build/CMakeCache.txt has no cuDNN frontend or cudnn.h (CUDNN_FRONTEND_INCLUDE_DIR='$fe'," \
    "CUDNN_INCLUDE_DIR='$cudnn'): the fast tier would run the reference attention; run" \
    "scripts/setup.sh (nvidia-cudnn-frontend in .venv), then delete build/CMakeCache.txt and rerun"
fi
defines() {  # FILE NAME...: the values of those #defines, joined by dots
  local file=$1 v=()
  shift
  for n in "$@"; do v+=("$(awk -v n="$n" '$1 == "#define" && $2 == n { print $3; exit }' "$file")"); done
  (IFS=.; echo "${v[*]}")
}

rm -rf "$dest" && mkdir -p "$dest/stage/bin" "$dest/stage/lib" "$dest/oracle"
{
  echo "cuDNN frontend $(defines "$fe/cudnn_frontend_version.h" CUDNN_FRONTEND_MAJOR_VERSION \
    CUDNN_FRONTEND_MINOR_VERSION CUDNN_FRONTEND_PATCH_VERSION)"
  echo "cuDNN headers $(defines "$cudnn/cudnn_version.h" CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)"
  echo "CUDA toolkit $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$dest/versions.txt"
cat "$dest/versions.txt"
for b in "${bins[@]}"; do cp "build/bin/$b" "$dest/stage/bin/"; done
missing=$(ldd "$dest"/stage/bin/* | grep "not found" | sort -u || true)
[ -z "$missing" ] || fail "libraries the binaries need are not found here: $missing"
# Every library the binaries load, except the C/C++ runtime (the machine's is as new) and CUDA's
# (the toolkit's folder, or by name where a distribution installed them: hundreds of MiB).
ldd "$dest"/stage/bin/* | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|ld-linux|/cuda' |
  grep -v -E '/lib(cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z-]*|cudart|cuda)\.so' |
  while read -r lib; do cp -L "$lib" "$dest/stage/lib/"; done
tar -C "$dest/stage" -cJf "$dest/bundle.tar.xz" .
rm -rf "$dest/stage"
cp scripts/gpu_checks.sh "$dest/run.sh"

# The CPU oracle: gpu_checks.sh's own training parts on device=cpu, here (CPU results do not
# depend on the machine's thread count), so the GPU runs are compared without CPU work there.
oracle=build/gpu_oracle
echo "gpu_bundle.sh: the CPU oracle runs (part cpu_oracle: about 20 s on 2 cores)"
if ! GPU_CHECKS_BIN=$PWD/build/bin GPU_CHECKS_TMP=$PWD/$oracle OUT=$PWD/$oracle/out \
  GPU_CHECKS_BUDGET=${GPU_BUNDLE_ORACLE_BUDGET:-1800} bash scripts/gpu_checks.sh cpu_oracle \
  > "$oracle.log" 2>&1; then
  tail -n 30 "$oracle.log" >&2
  fail "a CPU oracle run failed (above; the whole log: $oracle.log)"
fi
cp "$oracle"/proof/metrics_train_cpu_*.jsonl "$dest/oracle/"

# What the device tool carries: .gpu/ and the working tree (tracked and untracked files git
# does not ignore), 64 MiB in all.
limit=$((64 << 20))
gpu_bytes=$(du -sb "$dest" | cut -f1)
tree_bytes=$(git ls-files -co --exclude-standard -z | du --files0-from=- -cb 2>/dev/null | tail -n 1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
if [ $((gpu_bytes + tree_bytes)) -gt $limit ]; then
  fail "$dest/ is $(mib "$gpu_bytes") and the working tree $(mib "$tree_bytes"): over the device" \
    "tool's 64 MiB carry; pack fewer binaries or libraries"
fi
echo "gpu_bundle.sh: $dest/ is $(mib "$gpu_bytes") (with the working tree $(mib $((gpu_bytes + tree_bytes)))" \
  "of 64 MiB): run \"bash .gpu/run.sh\" with carry [\".gpu\"]"
