#!/usr/bin/env bash
# mpirun.sh NP PROGRAM [ARGS...] — runs PROGRAM as NP MPI processes on this machine, for the
# multiproc tests. Adds what a CI container needs: more processes than cores (--oversubscribe),
# root (--allow-run-as-root, only when root), and no CMA single-copy (ptrace is often forbidden
# in containers; shared-memory copy-in/out works everywhere).
set -euo pipefail
np=$1
shift
flags=(--oversubscribe --mca btl_vader_single_copy_mechanism none)
if [ "$(id -u)" -eq 0 ]; then flags+=(--allow-run-as-root); fi
exec mpirun -np "$np" "${flags[@]}" "$@"
