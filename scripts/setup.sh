#!/usr/bin/env bash
# setup.sh — install every system package carousel's build, tests, benchmarks and scripts use.
#
# Idempotent: when everything is present it only checks (no network, about a second).
# Python packages (PyPI, pinned) go into .venv/ at the repository root (git-ignored), made with
# Debian's /usr/bin/python3: .venv/bin/python runs scripts/prepare_data.py, and its test uses it.
# scripts/setup.sh --fuzz also installs clang for the libFuzzer targets (CAROUSEL_FUZZ=ON,
# docs/reliability.md#fuzzing); the default build and tests do not need it.
# Run as root on Debian 12 (the CI image); elsewhere it prints what is missing and how to get it.
set -euo pipefail

# One line per package: the Debian package and why carousel needs it.
PACKAGES=(
  cmake                 # build system (>= 3.25)
  ninja-build           # fast parallel builds
  g++                   # C++20 compiler
  pkg-config
  libspdlog-dev         # logging
  libfmt-dev            # formatting (spdlog's external fmt)
  libopenblas-openmp-dev  # CPU backend GEMM (cblas_sgemm), OpenMP build: shares our thread pool
  libcli11-dev          # command-line parsing
  nlohmann-json3-dev    # traces, safetensors headers, checkpoint manifests, metrics JSON
  libyaml-cpp-dev       # config files (MaxText-style YAML)
  zlib1g-dev            # CRC32 checksums of checkpoint files
  libgtest-dev          # unit tests
  libgmock-dev
  libbenchmark-dev      # op benchmarks
  python3               # scripts/, test vector tools
  python3-venv          # .venv/ for the PyPI packages below
  python3-matplotlib    # scripts/plot_metrics.py (metrics.jsonl -> PNG curves)
  libopenmpi-dev        # MPI communicator: ranks as separate processes (mpirun)
  openmpi-bin           # mpirun, for the multiproc tests
)
FUZZ_PACKAGES=(
  clang                 # -fsanitize=fuzzer: libFuzzer exists for clang only
  libclang-rt-dev       # clang's sanitizer and libFuzzer runtimes
  libomp-dev            # OpenMP for clang
)
if [ "${1:-}" = "--fuzz" ]; then PACKAGES+=("${FUZZ_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# PyPI packages, pinned, with why: installed into .venv/ (Debian has no python3-tokenizers).
PY_PACKAGES=(
  tokenizers==0.23.3    # scripts/prepare_data.py: train / apply a Hugging Face tokenizer.json
  pyarrow==26.0.1       # scripts/prepare_data.py: Parquet input (read by record batches)
  tensorboard==2.21.0   # read back the trainer's TensorBoard event files (tests); the viewer
  autograd==1.9.1       # tests/end_to_end/moe_oracle.py: the independent MoE model's gradients
  ml_dtypes==0.6.0      # tests/compute/float8_casts.py: the independent float8 casts
)
# Installed without their dependencies: carousel uses only the headers they ship.
PY_HEADER_PACKAGES=(
  nvidia-cudnn-frontend==1.32.0  # cuDNN's graph API (header-only C++): the CUDA fast tier's attention
)
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"

setup_venv() {
  local want
  want=$(printf '%s\n' "${PY_PACKAGES[@]}" "${PY_HEADER_PACKAGES[@]}" | sort)
  if [ -x "$venv/bin/python" ] &&
    [ "$("$venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null |
      grep -Fx -f <(echo "$want") | sort)" = "$want" ]; then
    return 0
  fi
  echo "setup: installing ${PY_PACKAGES[*]} ${PY_HEADER_PACKAGES[*]} into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    "${PY_HEADER_PACKAGES[@]}"
}

if [ ${#missing[@]} -eq 0 ]; then
  setup_venv
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "setup: need root to install: ${missing[*]}" >&2
    echo "       run: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
setup_venv
echo "setup: done"
