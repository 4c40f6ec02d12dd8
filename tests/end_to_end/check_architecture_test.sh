#!/usr/bin/env bash
# check_architecture_test.sh — scripts/check_architecture.py finds each rule broken on a small
# tree made here (and passes the same tree unbroken), so a green `architecture` test means
# something.
#   tests/end_to_end/check_architecture_test.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src=$1 work=$2
checker="$src/scripts/check_architecture.py"
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"/{compute,host/schedule,host/io,host/run,models}
cp "$src/host/schedule/registry.cpp" "$work/host/schedule/registry.cpp"
echo '#pragma once' > "$work/compute/tensor.h"
printf '#include "compute/tensor.h"\n' > "$work/host/io/data.h"
printf 'TrainResult train(int x) {\n  return {};\n}\n' > "$work/host/run/trainer.cpp"
out=$(python3 "$checker" "$work") || fail "a clean tree is refused: $out"

expect() {  # expect WHAT PATTERN: the checker fails and prints PATTERN
  out=$(python3 "$checker" "$work") && fail "$1 passes"
  echo "$out" | grep -q "$2" || fail "$1: no line matching '$2' in: $out"
}
printf '#include "host/run/trainer.h"\n' > "$work/host/io/up.cpp"
touch "$work/host/run/trainer.h"
expect "an arrow up (io -> run)" "host/io/up.cpp:1: includes host/run/trainer.h"
rm "$work/host/io/up.cpp"

printf '#include "models/b.h"\n' > "$work/models/a.h"
printf '#include "models/a.h"\n' > "$work/models/b.h"
expect "an include cycle" "include cycle between models/a.h, models/b.h"
rm "$work/models/a.h" "$work/models/b.h"

printf 'bool f(const char* s) { return s == "zbv"; }\n' > "$work/host/io/name.cpp"
expect "a schedule name compared" "host/io/name.cpp:1: schedule name 'zbv'"
rm "$work/host/io/name.cpp"

for i in $(seq 1 21); do touch "$work/models/f$i.h"; done
expect "a folder of 21 sources" "models/ holds 21 source files"
rm "$work"/models/f*.h

mkdir -p "$work/host/runtime"
printf 'void ShardedParams::reduce() {\n  comms_.data->all_reduce(g, g, ReduceOp::Sum);\n}\n' \
  > "$work/host/runtime/sharded_x.cpp"
expect "a reduction written per axis" "host/runtime/sharded_x.cpp:2: reduces over the 'data'"
printf 'ShardedParams::Holders ShardedParams::holders(int x) {\n  comms_.data->all_reduce(g, g);\n}\n' \
  > "$work/host/runtime/sharded_x.cpp"
out=$(python3 "$checker" "$work") || fail "the placement rule's own mapping is refused: $out"
rm -r "$work/host/runtime"

printf 'void f(Backend& be) {\n  be.gemm(false, true, 1.0, x, w, 0.0, y);\n}\n' > "$work/models/layer.cpp"
expect "a bare weight GEMM in models/" "models/layer.cpp:2: calls be.gemm directly"
mkdir -p "$work/models/parallel" && mv "$work/models/layer.cpp" "$work/models/parallel/linear.cpp"
out=$(python3 "$checker" "$work") || fail "the GEMM pieces' own file is refused: $out"
rm -r "$work/models/parallel"

python3 -c "print('\n' * 600)" > "$work/host/io/long.cpp"
expect "a 600-line file" "host/io/long.cpp has 6"
rm "$work/host/io/long.cpp"

{ echo 'TrainResult train(int x) {'; for i in $(seq 1 90); do echo "  f($i);"; done; echo '}'; } \
  > "$work/host/run/trainer.cpp"
expect "a 92-line train()" "train() is 92 lines"
echo "check_architecture_test: every broken rule found"
