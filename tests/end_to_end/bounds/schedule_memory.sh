#!/usr/bin/env bash
# schedule_memory.sh CAROUSEL WORK_DIR — `carousel schedule` under an address-space or data limit.
# At its own accepted bound (S x M = 2^20 units) the program, its simulation, the listings and the
# Chrome trace need about 7.5 GB; under `ulimit -v 4000000` it ran for 25-32 s, then ended in
# std::terminate (status 134, "terminate called after throwing an instance of 'std::bad_alloc'").
# Now its need is estimated from the generated program against the limit, as `train` does:
#  1. the bound under `ulimit -v 4000000` and under `ulimit -d 4000000`: exit 2 at once with one
#     error naming the limit, its size, the need and what to lower;
#  2. schedules whose estimate is just under the limit (the limit set 16 MiB above it) run to the
#     end: the estimate is not below what the command maps (zb_h1, the most per unit measured;
#     gpipe; interleaved_zb with FSDP);
#  3. a small schedule under the same 4 GB limit runs as before.
#  Skipped (status 77) under the sanitizers (scripts/test_sanitize.sh sets CAROUSEL_SANITIZED):
#  ASan reserves terabytes of address space for its shadow memory, so no ulimit -v lets it start.
set -uo pipefail
carousel=$1 work=$2
if [ -n "${CAROUSEL_SANITIZED:-}" ]; then
  echo "skipped under the sanitizers: the address-space limits (ASan's shadow memory)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
status=0
fail() { echo "FAIL: $*"; status=1; }
tiny=(model_name=tiny per_device_batch_size=8192 "base_output_directory=$work")
bound=("${tiny[@]}" base_num_decoder_layers=16 ici_pipeline_parallelism=16
       num_pipeline_microbatches=65536)

# 1. The bound.
for flag in -v -d; do
  start=$(date +%s)
  out=$(ulimit $flag 4000000; timeout 120 "$carousel" schedule "${bound[@]}" 2>&1 >/dev/null)
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  [ $rc -eq 2 ] || fail "bound under ulimit $flag: exit status $rc (want 2): $(tail -c 300 <<<"$out")"
  [ $elapsed -le 20 ] || fail "bound under ulimit $flag: took $elapsed s"
  [ "$(grep -c . <<<"$out")" -eq 1 ] || fail "bound under ulimit $flag: not one line: $out"
  name="address-space limit (ulimit -v)"
  [ $flag = -d ] && name="data-segment limit (ulimit -d)"
  for part in "the $name is 3906 MiB but \`carousel schedule\` needs about " \
              "for this schedule (S x M x R = 16 x 65536 x 1 = 1048576 " \
              "raise the limit (to unlimited), or use fewer microbatches (num_pipeline_microbatches)"; do
    grep -Fq "$part" <<<"$out" || fail "bound under ulimit $flag: no '$part' in: $out"
  done
  grep -q terminate <<<"$out" && fail "bound under ulimit $flag: std::terminate"
  echo "bound under ulimit $flag: exit $rc after $elapsed s: ${out#*] }"
done

# 2. The estimate holds: set the limit 16 MiB above it, the schedule must run to the end.
for case in "ici_pipeline_parallelism=8 num_pipeline_microbatches=16384 pipeline_schedule=zb_h1" \
            "ici_pipeline_parallelism=8 num_pipeline_microbatches=32768 pipeline_schedule=gpipe" \
            "ici_pipeline_parallelism=2 num_pipeline_microbatches=16384 ici_fsdp_parallelism=2
             pipeline_schedule=interleaved_zb pipeline_microbatch_group_size=2"; do
  read -r -a args <<<"$(tr '\n' ' ' <<<"$case")"
  out=$(ulimit -v 2100000; "$carousel" schedule "${tiny[@]}" "${args[@]}" 2>&1 >/dev/null)
  need=$(grep -o "needs about [0-9]*" <<<"$out" | grep -o "[0-9]*$")
  [ -n "$need" ] || { fail "${args[*]}: no estimate under 2.1 GB: $out"; continue; }
  out=$(ulimit -v $(( (need + 16) * 1024 ))
        "$carousel" schedule "${tiny[@]}" "${args[@]}" 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 0 ] ||
    fail "${args[*]} under its estimate $need MiB + 16: exit status $rc: $(tail -c 300 <<<"$out")"
  echo "${args[*]}: estimated $need MiB; runs under $(( need + 16 )) MiB"
done

# 3. A small schedule under the 4 GB limit.
out=$(ulimit -v 4000000; "$carousel" schedule "${tiny[@]}" ici_pipeline_parallelism=4 \
      num_pipeline_microbatches=64 2>&1 >/dev/null)
rc=$?
[ $rc -eq 0 ] || fail "small schedule under 4 GB: exit status $rc: $out"
exit $status
