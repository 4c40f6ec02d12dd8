#!/usr/bin/env bash
# build.sh — configure (once) and build carousel into build/ (binaries in build/bin/).
#   scripts/build.sh [extra cmake -D options]   e.g. -DCAROUSEL_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD_DIR/Makefile" ]; then generator=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
