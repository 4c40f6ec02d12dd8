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
