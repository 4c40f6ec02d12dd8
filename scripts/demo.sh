#!/usr/bin/env bash
# demo.sh — set up, build and run the main job: the README's first command.
# Trains the tiny Llama on the bundled text for 100 steps on the CPU backend (configs/demo.yml),
# from scratch each time (the previous demo run directory is moved aside, not deleted).
# Extra arguments are config overrides: scripts/demo.sh steps=20 learning_rate=0.001
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
if [ -d out/demo ]; then mv out/demo "out/demo.previous.$(date +%s)"; fi
build/bin/carousel train configs/demo.yml "$@"
# The curves as a PNG (matplotlib from Debian's python3; skipped with a note without it).
plot=none
for py in /usr/bin/python3 python3; do
  if "$py" -c "import matplotlib" 2>/dev/null; then
    "$py" scripts/plot_metrics.py out/demo/metrics.jsonl -o out/demo/metrics.png && plot=out/demo/metrics.png
    break
  fi
done
echo
echo "metrics:    out/demo/metrics.jsonl"
echo "plot:       $plot"
echo "trace:      $(ls out/demo/trace.json 2>/dev/null || echo none)   (chrome://tracing or ui.perfetto.dev)"
echo "checkpoint: $(ls -d out/demo/checkpoints/* 2>/dev/null | tail -1)   (build/bin/carousel inspect out/demo)"
