#!/usr/bin/env bash
# multiproc_train.sh CAROUSEL SOURCE_DIR WORK_DIR — `carousel train` as 4 MPI processes must train
# exactly as 4 threads do: the same losses and gradient norms at every step, and byte-identical
# model and optimizer checkpoints (every process writing its own part); without a run_name they
# share one new run directory. The process run stops after 3 steps and resumes (checkpoint load
# with ranks in processes), the threaded run goes straight through. Uneven stages, layers outside
# the pipeline, tensor, context and expert parallelism are compared the same way. Then a job of
# the wrong size must fail with the error that names both sizes.
set -euo pipefail
carousel=$1 src=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
common=("$src/configs/demo.yml" "dataset_path=$src/tests/data/tiny_corpus.txt"
        "base_output_directory=$work" checkpoint_period=3 log_level=warn
        learning_rate_schedule_steps=6)  # the same schedule for the 3-step and 6-step runs

"$carousel" train "${common[@]}" steps=6 run_name=threads
"$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=3 run_name=processes
"$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=6 run_name=processes

status=0
# The data files of two checkpoints (PREFIX: model, optimizer; their parts and the index), byte
# for byte: the same layout writes the same parts whether its ranks are threads or processes.
#   same_checkpoint LABEL DIR_A DIR_B PREFIX...
same_checkpoint() {
  local label=$1 a=$2 b=$3 prefix f found=0
  shift 3
  for prefix in "$@"; do
    for f in "$a/$prefix"*.safetensors "$a/$prefix.safetensors.index.json"; do
      [ -e "$f" ] || continue
      found=1
      if ! cmp "$f" "$b/$(basename "$f")"; then
        echo "FAIL: $label: $(basename "$f") differs between threads and processes"
        status=1
      fi
    done
  done
  [ "$found" = 1 ] || { echo "FAIL: $label: no checkpoint files in $a"; status=1; }
}
same_checkpoint "6 steps" "$work/threads/checkpoints/6" "$work/processes/checkpoints/6" model optimizer
# 2 stages x 2 FSDP ranks: each of the 4 processes wrote its own part.
for k in 1 2 3 4; do
  [ -s "$work/processes/checkpoints/6/model-0000$k-of-00004.safetensors" ] ||
    { echo "FAIL: no part $k of 4 in the processes' checkpoint"; status=1; }
done
python3 - "$work/threads/metrics.jsonl" "$work/processes/metrics.jsonl" <<'PY' || status=1
import json, sys
runs = [[json.loads(line) for line in open(path)] for path in sys.argv[1:]]
pick = lambda run: [(r["step"], r["loss"], r["grad_norm"]) for r in run]
threads, processes = map(pick, runs)
assert len(threads) == 6, threads
if threads != processes:
    sys.exit(f"FAIL: (step, loss, grad norm) differ\n threads   {threads}\n processes {processes}")
print(f"6 steps equal, bitwise: final loss {threads[-1][1]!r}")
PY

# No run_name: the 4 processes agree on one new directory (rank 0's clock), each logs into it.
fresh="$work/unnamed"
mkdir -p "$fresh"
"$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=1 run_name= \
  base_output_directory="$fresh" enable_checkpointing=false
dirs=("$fresh"/*)
if [ "${#dirs[@]}" -ne 1 ]; then
  echo "FAIL: 4 processes without a run_name made ${#dirs[@]} run directories: ${dirs[*]}"
  status=1
else
  for r in 0 1 2 3; do
    [ -s "${dirs[0]}/logs/rank$r.log" ] || { echo "FAIL: no ${dirs[0]}/logs/rank$r.log"; status=1; }
  done
fi

# A 2-step run as 4 threads and as 4 mpirun processes (named LABEL in messages): the
# checkpoint files named after the keys and the (step, loss, grad norm) records are equal.
#   threads_equal_processes LABEL NAME "FILE..." KEY...
threads_equal_processes() {
  local label=$1 name=$2 files=$3
  shift 3
  "$carousel" train "${common[@]}" steps=2 "$@" run_name="${name}_threads"
  "$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=2 "$@" run_name="${name}_processes"
  # shellcheck disable=SC2086  # $files: the prefixes, one word each
  same_checkpoint "$label" "$work/${name}_threads/checkpoints/2" \
    "$work/${name}_processes/checkpoints/2" $files
  python3 - "$label" "$work/${name}_threads/metrics.jsonl" \
    "$work/${name}_processes/metrics.jsonl" <<'PY' || status=1
import json, sys
threads, processes = ([(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))]
                      for p in sys.argv[2:])
assert len(threads) == 2, threads
if threads != processes:
    sys.exit(f"FAIL: {sys.argv[1]}: (step, loss, grad norm) differ\n {threads}\n {processes}")
print(f"{sys.argv[1]}: 2 steps equal, bitwise: final loss {threads[-1][1]!r}")
PY
}

# Uneven stages ([1, 3, 3, 1]: S = 2, R = 2, FSDP slots shared by a 1- and a 3-layer stage): the
# processes hold and train the same stages as the threads, bitwise, checkpoints included.
threads_equal_processes "uneven stages" uneven model "pipeline_stage_layers=[1,3,3,1]"

# Layers outside the pipeline (layers 4-7 after a gpipe of 2 stages, FSDP 2): the last stage
# sends each microbatch's output to another process and gets its gradient back, and the stage
# ranks sum the outside layers' gradients over MPI, exactly as the threads.
threads_equal_processes "layers outside the pipeline" outside "model optimizer" \
  pipeline_schedule=gpipe pipeline_parallel_layers=4

# Tensor and context parallelism (T = 2 with S = 2; T = 4 with KV heads shared by two ranks;
# T = 2 x C = 2; C = 2 with S = 2): the processes' tensor and context groups exchange
# activations, keys and values over MPI and train exactly as the threads, checkpoints too.
for mesh in "ici_fsdp_parallelism=1 ici_tensor_parallelism=2" \
            "ici_pipeline_parallelism=1 ici_fsdp_parallelism=1 ici_tensor_parallelism=4" \
            "ici_pipeline_parallelism=1 ici_fsdp_parallelism=1 ici_tensor_parallelism=2 ici_context_parallelism=2" \
            "ici_fsdp_parallelism=1 ici_context_parallelism=2"; do
  read -ra keys <<<"$mesh"
  threads_equal_processes "$mesh" "t_${mesh//[ =]/_}" "model optimizer" "${keys[@]}"
done

# Expert parallelism (E = 2 with F = 2; E = 2 with S = 2; E = 2 on dualpipev, whose F&B pairs
# take turns at their exchanges on two threads of each process; E = 2 with MoE layers outside
# the pipeline, exchanging in their OUTSIDE actions): each MoE layer's rows travel to
# their experts' process and back over MPI; the processes train exactly as the threads, the
# loss-free bias and the checkpoint parts of the experts each process holds included.
moe=(num_experts=4 num_experts_per_tok=2 base_moe_mlp_dim=32 shared_experts=1
     first_num_dense_layers=1 load_balance_loss_weight=0.01 routed_bias=true
     routed_bias_update_rate=0.01)
for mesh in "ici_pipeline_parallelism=1 ici_expert_parallelism=2 num_pipeline_microbatches=2" \
            "ici_fsdp_parallelism=1 ici_expert_parallelism=2 num_pipeline_microbatches=2" \
            "ici_fsdp_parallelism=1 ici_expert_parallelism=2 pipeline_schedule=dualpipev num_pipeline_repeats=2 num_layers_per_pipeline_stage=2 num_pipeline_microbatches=4" \
            "ici_fsdp_parallelism=1 ici_expert_parallelism=2 pipeline_schedule=gpipe pipeline_parallel_layers=4 num_pipeline_microbatches=2"; do
  read -ra keys <<<"$mesh"
  threads_equal_processes "moe $mesh" "e_${mesh//[ =]/_}" "model optimizer" "${moe[@]}" "${keys[@]}"
done

# Profiled under mpirun: each process writes trace-rank<P>.json on its own clock origin;
# scripts/merge_traces.py puts them on one clock. Every SEND's arrow (one file) meets its RECV
# (another file), no two slices overlap on a row, and each step starts within 0.5 s on all ranks.
"$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=3 run_name=traced profiler_steps=2 \
  skip_first_n_steps_for_profiler=1 enable_checkpointing=false
python3 "$src/scripts/merge_traces.py" "$work"/traced/trace-rank*.json -o "$work/traced/merged.json" || status=1
# The run's log says how to join the per-process traces.
grep -q "scripts/merge_traces.py $work/traced/trace-rank\*.json" "$work/traced/logs/rank0.log" ||
  { echo "FAIL: the log does not name merge_traces.py"; status=1; }
python3 - "$work/traced/merged.json" <<'PY' || status=1
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
measured = [e for e in events if e["pid"] < 1000]
assert {e["pid"] for e in measured} == {0, 1, 2, 3}, {e["pid"] for e in measured}
flows = collections.Counter((e["id"], e["ph"]) for e in measured if e["ph"] in "sf")
ids = {i for i, _ in flows}
assert ids and all(flows[(i, "s")] == 1 and flows[(i, "f")] == 1 for i in ids), "unpaired arrows"
assert max(ids) < 2 ** 53
rows = collections.defaultdict(list)
for e in measured:
    if e["ph"] == "X":
        rows[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
for row, spans in rows.items():
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"overlap on {row}"
starts = collections.defaultdict(list)
for e in measured:
    if e["ph"] == "i":
        starts[e["name"]].append(e["ts"])
assert len(starts) == 2 and all(len(v) == 4 for v in starts.values()), starts
spread = max(max(v) - min(v) for v in starts.values())
assert spread < 5e5, f"step starts {spread:.0f} us apart across ranks: not one clock"
print(f"merged trace: {len(ids)} arrows paired across processes, step starts within {spread:.0f} us")
PY

# A job whose process count is not the mesh's device count: one clear error, every process ends.
if out=$("$here/mpirun.sh" 2 "$carousel" train "${common[@]}" steps=1 run_name=wrong 2>&1); then
  echo "FAIL: 2 processes for a 4-device mesh did not fail"
  status=1
elif ! grep -q "mpirun started 2 processes but the config has D x E x S x F x T x C = 1 x 1 x 2 x 2 x 1 x 1 = 4" <<<"$out"; then
  echo "FAIL: unexpected error for 2 processes on a 4-device mesh:"
  echo "$out"
  status=1
fi
exit $status
