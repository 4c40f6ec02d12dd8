#!/usr/bin/env bash
# cli_users.sh — the user-facing commands of the real binary: `carousel --version` (its form),
# `carousel inspect` (exit codes 0 / 2, stdout report) on a run trained here, then corrupted, and
# `carousel plan --gpu`.
#   tests/end_to_end/cli_users.sh CAROUSEL_BINARY WORK_DIR
set -uo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# --version: 6 lines, "carousel X.Y.Z" then key: value.
out=$("$bin" --version) || fail "--version exited $?"
echo "$out"
[ "$(echo "$out" | wc -l)" -eq 6 ] || fail "--version prints $(echo "$out" | wc -l) lines, not 6"
echo "$out" | sed -n 1p | grep -Eq '^carousel [0-9]+\.[0-9]+\.[0-9]+$' || fail "version line"
echo "$out" | sed -n 2p | grep -Eq '^commit: ([0-9a-f]{4,40}|unknown)$' || fail "commit line"
echo "$out" | sed -n 3p | grep -Eq '^build type: [A-Za-z]+$' || fail "build type line"
for i in 4 5 6; do
  echo "$out" | sed -n ${i}p | grep -Eq '^(cuda|nccl|mpi): (yes|no)$' || fail "line $i"
done

# The progress bar: on a terminal (a pty from `script`) a redrawn line "step N/3 [...]" with the
# step lines in the log file only; through a pipe, or with progress_bar=never, plain step lines.
train3=("$bin" train steps=3 base_num_decoder_layers=2 max_target_length=16 per_device_batch_size=2
  base_output_directory="$work" enable_checkpointing=false)
if command -v script >/dev/null; then
  TERM=xterm script -qec "${train3[*]} run_name=tty" "$work/tty.out" >/dev/null ||
    fail "train on a pty exited $?"
  grep -q $'step 2/3 \\[.*\r\033\\[K' "$work/tty.out" || fail "no progress line redrawn on a pty"
  grep -q "step     2/3 | loss" "$work/tty.out" && fail "step 2's log line went to the terminal"
  grep -q "step     2/3 | loss" "$work/tty/logs/rank0.log" || fail "step 2's line is not in the log"
  TERM=xterm script -qec "${train3[*]} run_name=never progress_bar=never" "$work/never.out" \
    >/dev/null || fail "progress_bar=never exited $?"
  grep -q $'\r\033\\[K' "$work/never.out" && fail "progress_bar=never drew a bar"
  grep -q "step     2/3 | loss" "$work/never.out" || fail "progress_bar=never: no step lines"
else
  echo "skip: no \`script\` to make a terminal; the bar is tested by test_progress_bar"
fi
"${train3[@]}" run_name=pipe 2>&1 | cat >"$work/pipe.out"
grep -q $'\r' "$work/pipe.out" && fail "a bar was drawn into a pipe"
grep -q "step     2/3 | loss" "$work/pipe.out" || fail "no plain step lines through a pipe"

# A reader that goes away (`| head`): SIGPIPE is ignored, the run finishes every step and
# writes every record (the console lines after the reader left are lost, nothing else).
"${train3[@]}" steps=20 log_period=1 run_name=head 2>&1 | head -n 1 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "train into a closed pipe exited $rc (SIGPIPE?)"
[ "$(wc -l <"$work/head/metrics.jsonl")" -eq 20 ] || fail "train into a closed pipe lost records"

# A FIFO where the rank's log file goes: one clear error at once, not a run that hangs before
# its first step.
mkdir -p "$work/fifo_run/logs" && mkfifo "$work/fifo_run/logs/rank0.log"
timeout 60 "$bin" train steps=1 base_num_decoder_layers=2 max_target_length=16 \
  per_device_batch_size=2 base_output_directory="$work" run_name=fifo_run >"$work/fifo.out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "train with a FIFO as its rank log exited $rc, not 2 (124: it hung)"
grep -q "is a FIFO (named pipe)" "$work/fifo.out" || fail "no FIFO error: $(cat "$work/fifo.out")"

# One run per run directory: a second run on a directory a running one holds is refused at once
# naming the first's pid; after the first is killed with SIGKILL (no chance to clean up) the
# directory is free again (the kernel released the lock: never a stale lock).
locked=("$bin" train base_num_decoder_layers=2 max_target_length=16 per_device_batch_size=2
  base_output_directory="$work" run_name=locked enable_checkpointing=false)
"${locked[@]}" steps=1000000 >"$work/locked_first.out" 2>&1 &
first=$!
for _ in $(seq 100); do grep -q "pid $first" "$work/locked/.carousel.lock" 2>/dev/null && break; sleep 0.1; done
timeout 60 "${locked[@]}" steps=1 >"$work/locked_second.out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a second run on a held run directory exited $rc, not 2"
grep -q "is in use by another run (pid $first on host" "$work/locked_second.out" ||
  fail "no lock error naming pid $first: $(cat "$work/locked_second.out")"
kill -9 $first 2>/dev/null
wait $first 2>/dev/null
timeout 60 "${locked[@]}" steps=1 >"$work/locked_third.out" 2>&1 ||
  fail "the run directory stayed locked after its holder was killed: $(tail -3 "$work/locked_third.out")"

# --log-level applies to every subcommand: `--log-level off train` prints nothing at all (the
# config table and step lines are info), `--log-level error schedule` nothing but its report.
"$bin" --log-level off train steps=2 base_num_decoder_layers=2 max_target_length=16 \
  per_device_batch_size=2 base_output_directory="$work" run_name=quiet >"$work/quiet.out" 2>&1 ||
  fail "--log-level off train exited $?"
[ -s "$work/quiet.out" ] && fail "--log-level off train printed: $(head -c 300 "$work/quiet.out")"
"$bin" --log-level off schedule ici_pipeline_parallelism=2 base_output_directory="$work" \
  run_name=quiet_schedule 2>"$work/quiet_schedule.err" >/dev/null ||
  fail "--log-level off schedule exited $?"
[ -s "$work/quiet_schedule.err" ] && fail "--log-level off schedule logged: $(head -c 300 "$work/quiet_schedule.err")"

# inspect: a 2-step run, its checkpoint verified (exit 0), then one flipped byte (exit 2).
"$bin" train steps=2 base_num_decoder_layers=2 max_target_length=16 per_device_batch_size=2 \
  base_output_directory="$work" run_name=run >"$work/train.log" 2>&1 || fail "train exited $?"
"$bin" inspect "$work/run" >"$work/ok.out" 2>"$work/ok.err"
rc=$?
[ $rc -eq 0 ] || fail "inspect of a good checkpoint exited $rc"
grep -q '^manifest: verified$' "$work/ok.out" || fail "no 'manifest: verified' on stdout"
grep -q '^step: 2$' "$work/ok.out" || fail "no 'step: 2'"
grep -q 'manifest' "$work/ok.err" && fail "the report went to stderr"

cp -r "$work/run/checkpoints/2" "$work/bad"
python3 - "$work/bad/state.json" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
i = b.index(b'"step"')  # a byte of the key: still JSON-looking, but not what the manifest says
b[i + 1] ^= 0x20
open(p, "wb").write(bytes(b))
PY
"$bin" inspect "$work/bad" >"$work/bad.out" 2>"$work/bad.err"
rc=$?
[ $rc -eq 2 ] || fail "inspect of a corrupt checkpoint exited $rc, not 2"
grep -q "manifest: FAILED: .*'state.json' fails its CRC32 check" "$work/bad.out" ||
  fail "the corrupt file is not named: $(tail -1 "$work/bad.out")"

"$bin" inspect "$work/nonexistent" >/dev/null 2>"$work/none.err"
rc=$?
[ $rc -eq 2 ] || fail "inspect of a missing directory exited $rc, not 2"
grep -q "does not exist" "$work/none.err" || fail "no error line for a missing directory"

# Resource limits met at start-up (host/cli/startup_limits.cpp): an address-space limit below
# what start-up needs is one error line and status 2 (it hung forever inside OpenBLAS), within
# seconds; a small soft stack limit is raised (the threads segfaulted) and the run trains.
# Not under the sanitizers (scripts/test_sanitize.sh sets CAROUSEL_SANITIZED): ASan reserves
# terabytes of address space for its shadow memory, so no ulimit -v lets the binary start.
if [ -z "${CAROUSEL_SANITIZED:-}" ]; then
  out=$( (ulimit -v 1000000 && timeout 60 "$bin" --version) 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "under ulimit -v 1000000 carousel exited $rc, not 2"
  grep -q "the address-space limit (ulimit -v) is 1000000 KiB" <<<"$out" ||
    fail "no address-space error under ulimit -v: $out"
  [ "$(grep -c . <<<"$out")" -eq 1 ] || fail "more than one line under ulimit -v: $out"
  # Around the run's own estimate (host/run/run_setup.cpp, with glibc's arenas capped under a
  # limit): the demo's 4 ranks either train or get the one error naming the limit, never a hang
  # (before: 2.2 GB passed the estimate, then OpenBLAS retried its buffer forever).
  for mib in 2100 2200 2300 2500 2800; do
    out=$( (ulimit -v $((mib * 1024)) && timeout -k 5 120 "$bin" train "$src/configs/demo.yml" \
            "dataset_path=$src/tests/data/tiny_corpus.txt" steps=2 enable_checkpointing=false \
            "base_output_directory=$work" run_name=limited_$mib) 2>&1)
    rc=$?
    if [ $rc -eq 2 ]; then
      grep -q "the address-space limit (ulimit -v) is $mib MiB but this run needs about" <<<"$out" ||
        fail "under ulimit -v of $mib MiB: status 2 without the limit named: $(tail -2 <<<"$out")"
    elif [ $rc -ne 0 ]; then
      fail "under ulimit -v of $mib MiB the demo exited $rc (a hang is 124 or 137)"
    fi
  done
else
  echo "skipped under the sanitizers: the address-space limits (ASan's shadow memory)"
fi
if (ulimit -S -s 64) 2>/dev/null; then
  out=$( (ulimit -S -s 64 && timeout 120 "${train3[@]}" steps=1 run_name=small_stack) 2>&1)
  rc=$?
  [ $rc -eq 0 ] || fail "under ulimit -S -s 64 training exited $rc: $(tail -3 <<<"$out")"
  grep -q "the stack limit (ulimit -s) was 64 KiB; raised to 8192 KiB" <<<"$out" ||
    fail "no note that the stack limit was raised: $(head -3 <<<"$out")"
  # A hard limit that forbids raising it: one error line naming what to set, status 2.
  out=$( (ulimit -s 64 && timeout 60 "$bin" --version) 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "under a hard ulimit -s 64 carousel exited $rc, not 2"
  grep -q "its hard limit forbids more.*ulimit -s 8192" <<<"$out" ||
    fail "no hard stack limit error: $out"
else
  echo "skip: this shell cannot lower its soft stack limit"
fi

# --log-level off, before or after the subcommand: a run prints nothing, `info` still prints its
# report (stdout), and an error that ends a command is still one line on stderr.
for where in before after; do
  if [ $where = before ]; then pre=(--log-level off train); else pre=(train --log-level off); fi
  out=$("$bin" "${pre[@]}" steps=1 base_num_decoder_layers=2 max_target_length=16 \
    per_device_batch_size=2 base_output_directory="$work" enable_checkpointing=false \
    run_name="quiet_$where" 2>&1) || fail "train with --log-level off ($where) exited $?"
  [ -z "$out" ] || fail "--log-level off ($where the subcommand) printed: $(head -2 <<<"$out")"
done
"$bin" info --log-level off | grep -q "^carousel .* build: CUDA backend" || fail "info with --log-level off"
out=$("$bin" inspect --log-level off /nonexistent 2>&1)
[ $? -eq 2 ] && [ "$out" = "error: '/nonexistent' does not exist" ] ||
  fail "inspect with --log-level off: want one error line and status 2, got: $out"

# carousel plan --gpu: the preset is exactly its flags (each overridable), the launch line runs
# the best candidate, S = 1 rows say gradient accumulation, and missing or unknown GPUs are one
# error each (status 2).
plan=("$bin" plan --model tiny --devices 8 --global-batch 64 --top 40)
a=$("${plan[@]}" --gpu h100 --json 2>&1) || fail "plan --gpu h100 exited $?: $a"
b=$("${plan[@]}" --device-memory 79.6GiB --peak-tflops 989 --intra-node-bandwidth 450GB/s \
  --inter-node-bandwidth 400Gbit/s --json 2>&1) || fail "plan with explicit flags exited $?"
[ "$a" = "$b" ] || fail "--gpu h100 differs from its flags"
c=$("${plan[@]}" --gpu h100 --peak-tflops 500 --json 2>&1)
[ "$a" != "$c" ] || fail "--peak-tflops did not override the preset"
out=$("${plan[@]}" --gpu b200 2>&1) || fail "plan --gpu b200 exited $?"
grep -q "^  mpirun -np 8 --map-by ppr:8:node build/bin/carousel train device=cuda model_name=tiny .*pipeline_schedule=" <<<"$out" ||
  fail "no launch line: $(tail -3 <<<"$out")"
grep -Eq "^ *[0-9]+ +1 +.* grad-accum " <<<"$out" || fail "no S = 1 row named grad-accum"
tokens=$("${plan[@]}" --gpu h100 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["best"][0]["tokens_per_second"])')
python3 -c "import sys; sys.exit(0 if float('$tokens') < 1e8 else 1)" ||
  fail "a tiny model predicted at $tokens tokens/s on 8 GPUs (the latency floor is missing)"
out=$("$bin" plan --model tiny --devices 8 --global-batch 64 2>&1)
[ $? -eq 2 ] || fail "plan without --gpu or device flags did not exit 2"
grep -q "carousel plan needs --device-memory, --peak-tflops, --intra-node-bandwidth, --inter-node-bandwidth: give --gpu h100|h200|a100|b200 or these flags" <<<"$out" ||
  fail "no error naming the missing flags: $out"
out=$("${plan[@]}" --gpu v100 2>&1)
[ $? -eq 2 ] || fail "--gpu v100 did not exit 2"
grep -q "gpu=v100 is not a preset; use one of h100, h200, a100, b200" <<<"$out" || fail "bad --gpu: $out"

# Ctrl-C (SIGINT) during a long search (Llama 3 405B on 16,384 H100s lists candidates for
# seconds): it stops, prints where it was (the best so far when it had simulated some, marked
# INTERRUPTED) and exits 130.
cat >"$work/l405.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":16384,"intermediate_size":53248,"num_hidden_layers":126,"num_attention_heads":128,"num_key_value_heads":8,"vocab_size":128256,"max_position_embeddings":8192,"rms_norm_eps":1e-05,"rope_theta":500000.0,"tie_word_embeddings":false,"hidden_act":"silu"}
JSON
out=$(timeout --preserve-status -s INT 3 "$bin" plan --model "$work/l405.json" --devices 16384 \
  --gpu h100 --global-batch-tokens 16M --seq-len 8192 2>&1)
rc=$?
[ $rc -eq 130 ] || fail "plan interrupted by SIGINT exited $rc, not 130: $(tail -3 <<<"$out")"
grep -Eq "^carousel plan: interrupted while|^INTERRUPTED \(Ctrl-C\)" <<<"$out" ||
  fail "an interrupted plan did not say so: $(tail -3 <<<"$out")"

[ $fails -eq 0 ] && echo "cli_users: all checks passed"
exit $((fails > 0))
