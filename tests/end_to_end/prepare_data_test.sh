#!/usr/bin/env bash
# prepare_data_test.sh — scripts/prepare_data.py end to end: a BPE trained on the tiny corpus,
# shards that decode back to the text exactly (each split, and train + val = the corpus), a user
# tokenizer giving the same shards, carousel training on them (and refusing a tokenizer larger
# than vocab_size), and bad inputs as one "error:" line with exit status 2.
#   tests/end_to_end/prepare_data_test.sh SOURCE_DIR CAROUSEL_BINARY WORK_DIR
# Exit 77 (skipped) when SOURCE_DIR/.venv has no `tokenizers` (scripts/setup.sh installs it).
set -uo pipefail
src=$1
bin=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
py="$src/.venv/bin/python"
if ! "$py" -c 'import tokenizers' 2>/dev/null; then
  echo "SKIP: $py with the tokenizers package not found (run scripts/setup.sh)"
  exit 77
fi
prep="$src/scripts/prepare_data.py"
corpus="$src/tests/data/tiny_corpus.txt"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# Reads shards as host/io/data.cpp does (its own parser) and compares the decoded text.
check_roundtrip() {  # DIR EXPECTED_VOCAB [--eos]
  "$py" - "$1" "$corpus" "$2" "${3:-}" <<'PY'
import glob, struct, sys
from tokenizers import Tokenizer
d, corpus, vocab, eos = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "--eos"
tok = Tokenizer.from_file(f"{d}/tokenizer.json")
text = open(corpus, encoding="utf-8", newline="").read()
def read(prefix):
    ids = []
    for p in sorted(glob.glob(f"{d}/{prefix}_*.bin")):
        b = open(p, "rb").read()
        magic, version, n = struct.unpack("<3i", b[:12])
        assert (magic, version) == (20240520, 1), (p, magic, version)
        assert len(b) == 1024 + 2 * n and n > 0, (p, len(b), n)
        ids += struct.unpack(f"<{n}H", b[1024:])
    return ids
train, val = read("train"), read("val")
assert tok.get_vocab_size() == vocab, tok.get_vocab_size()
assert max(train + val) < vocab, max(train + val)
eos_id = tok.token_to_id("<|endoftext|>")
if eos:  # one input file: one <|endoftext|>, the last token of the last split
    assert (train + val).count(eos_id) == 1 and val[-1] == eos_id, "eos"
else:
    assert eos_id not in train + val, "an eos without --add-eos"
dt = tok.decode(train, skip_special_tokens=True)
dv = tok.decode(val, skip_special_tokens=True)
assert dt + dv == text, "train + val does not decode to the corpus"
assert dt == text[:len(dt)] and len(dv) > 0, "the split is not a cut of the corpus"
assert dt.endswith("\n\n"), "the split is not at a paragraph boundary"
share = len(dv.encode()) / len(text.encode())
assert 0.1 <= share < 0.35, f"val holds {share:.3f} of the bytes for --val-fraction 0.1"
assert len(train) + len(val) < 0.7 * len(text.encode()), "BPE merged almost nothing"
print(f"roundtrip ok: {len(train)} + {len(val)} tokens, val {share:.3f} of the bytes")
PY
}

# 1. Train a 300-token BPE, 10 % held out.
"$py" "$prep" "$corpus" -o "$work/a" --vocab-size 300 --val-fraction 0.1 >"$work/a.out" 2>&1 ||
  fail "prepare_data exited $?: $(cat "$work/a.out")"
cat "$work/a.out"
for f in train_000000.bin val_000000.bin tokenizer.json; do
  [ -f "$work/a/$f" ] || fail "no $f written"
done
check_roundtrip "$work/a" 300 || fail "shards of a/ do not decode to the corpus"

# 2. Small shards: several train shards, the same tokens; the user's tokenizer gives the same.
"$py" "$prep" "$corpus" -o "$work/b" --tokenizer "$work/a/tokenizer.json" --val-fraction 0.1 \
  --shard-tokens 500 >/dev/null 2>&1 || fail "prepare_data --tokenizer exited $?"
n=$(ls "$work/b"/train_*.bin 2>/dev/null | wc -l)
[ "$n" -eq 5 ] || fail "2219 train tokens in shards of 500 gave $n shards, not 5"
check_roundtrip "$work/b" 300 || fail "shards of b/ do not decode to the corpus"
"$py" "$prep" "$corpus" -o "$work/c" --tokenizer "$work/a/tokenizer.json" --val-fraction 0.1 \
  >/dev/null 2>&1 || fail "prepare_data --tokenizer exited $?"
cmp -s "$work/a/train_000000.bin" "$work/c/train_000000.bin" || fail "user tokenizer: other train"
cmp -s "$work/a/val_000000.bin" "$work/c/val_000000.bin" || fail "user tokenizer: other val"

# 3. --add-eos: one <|endoftext|> after the file, skipped when decoding.
"$py" "$prep" "$corpus" -o "$work/e" --vocab-size 300 --val-fraction 0.1 --add-eos \
  >/dev/null 2>&1 || fail "prepare_data --add-eos exited $?"
check_roundtrip "$work/e" 300 --eos || fail "shards of e/ (--add-eos)"

# 4. carousel trains on the shards, with the tokenizer's vocabulary, and evaluation keys set.
common=(train base_num_decoder_layers=2 max_target_length=32 per_device_batch_size=2
  dataset_type=tokens "dataset_path=$work/a/train_*.bin" "tokenizer_path=$work/a/tokenizer.json"
  "eval_dataset_path=$work/a/val_*.bin" eval_interval=1 base_output_directory="$work")
"$bin" "${common[@]}" steps=2 vocab_size=300 run_name=ok >"$work/train.log" 2>&1 ||
  fail "carousel train on the shards exited $?: $(tail -5 "$work/train.log")"
grep -q "llm.c shard" "$work/train.log" || fail "train.log does not name the shards"
[ "$(wc -l <"$work/ok/metrics.jsonl" 2>/dev/null)" = 2 ] || fail "no 2 metrics records"
# Its checkpoint carries the tokenizer: the same file, loadable by `tokenizers`, and config.json
# names the <|endoftext|> id as bos and eos (the GPT-2 convention prepare_data's BPE follows).
cmp -s "$work/a/tokenizer.json" "$work/ok/checkpoints/2/tokenizer.json" ||
  fail "checkpoint 2 has no copy of the run's tokenizer.json"
"$py" - "$work/ok/checkpoints/2" "$corpus" <<'PY' || fail "checkpoint tokenizer / config.json ids"
import json, sys
from tokenizers import Tokenizer
ckpt, corpus = sys.argv[1], sys.argv[2]
tok = Tokenizer.from_file(f"{ckpt}/tokenizer.json")
config = json.load(open(f"{ckpt}/config.json"))
eos = tok.token_to_id("<|endoftext|>")
assert eos is not None and config["bos_token_id"] == eos and config["eos_token_id"] == eos, config
text = open(corpus, encoding="utf-8").read()[:200]
assert tok.decode(tok.encode(text).ids) == text
PY
"$bin" "${common[@]}" steps=2 vocab_size=256 run_name=small >"$work/small.log" 2>&1 &&
  fail "vocab_size=256 with a 300-token tokenizer was accepted"
grep -q "has a vocabulary of 300 tokens but vocab_size=256" "$work/small.log" ||
  fail "no vocabulary error: $(tail -3 "$work/small.log")"

# 4b. Ids past uint16 (a Llama 3-sized vocabulary): a word-level tokenizer of the corpus with
#     every other word at id 70000 and up; the shards are llm.c's Llama 3 format (magic 20240801,
#     version 7, uint32 ids), and carousel trains on them with the vocab_size printed.
"$py" - "$work/wide.json" "$corpus" "$work/sparse_huge.json" <<'PY'
import re, sys
from tokenizers import Tokenizer, models, pre_tokenizers
words = sorted(set(re.findall(r"\w+|[^\w\s]", open(sys.argv[2], encoding="utf-8").read())))
vocab = {"<unk>": 0}
for i, w in enumerate(words):
    vocab[w] = 70000 + i if i % 2 else i + 1
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(sys.argv[1])
Tokenizer(models.WordLevel(vocab={"a": 0, "b": 1 << 24}, unk_token="a")).save(sys.argv[3])
PY
"$py" "$prep" "$corpus" -o "$work/wide" --tokenizer "$work/wide.json" --val-fraction 0.1 \
  >"$work/wide.out" 2>&1 || fail "prepare_data with a wide tokenizer exited $?: $(cat "$work/wide.out")"
"$py" - "$work/wide" <<'PY' || fail "the wide shards are not llm.c's uint32 format"
import glob, struct, sys
ids = []
for p in sorted(glob.glob(f"{sys.argv[1]}/train_*.bin")):
    b = open(p, "rb").read()
    magic, version, n = struct.unpack("<3i", b[:12])
    assert (magic, version) == (20240801, 7) and len(b) == 1024 + 4 * n, (p, magic, version, len(b))
    ids += struct.unpack(f"<{n}I", b[1024:])
assert max(ids) >= 70000 and min(ids) < 65536, (min(ids), max(ids))
PY
wide_vocab=$(sed -n 's/.*vocab_size=\([0-9]*\).*/\1/p' "$work/wide.out")
"$bin" train base_num_decoder_layers=2 max_target_length=32 per_device_batch_size=2 \
  dataset_type=tokens "dataset_path=$work/wide/train_*.bin" vocab_size="$wide_vocab" steps=2 \
  enable_checkpointing=false base_output_directory="$work" run_name=wide >"$work/wide.log" 2>&1 ||
  fail "carousel train on uint32 shards (vocab_size=$wide_vocab) exited $?: $(tail -3 "$work/wide.log")"

# 5. Bad inputs: one error line, exit status 2.
expect_error() {  # MESSAGE ARGS...
  local msg=$1
  shift
  timeout 60 "$py" "$prep" "$@" >"$work/bad.out" 2>"$work/bad.err"  # 124: it hung
  local rc=$?
  [ $rc -eq 2 ] || fail "$* exited $rc, not 2"
  [ "$(wc -l <"$work/bad.err")" -eq 1 ] || fail "$*: stderr is not one line: $(cat "$work/bad.err")"
  grep -qF "error: $msg" "$work/bad.err" || fail "$*: expected '$msg', got: $(cat "$work/bad.err")"
}
expect_error "input '$work/missing.txt' does not exist" "$work/missing.txt" -o "$work/x"
expect_error "--vocab-size 100 is too small" "$corpus" -o "$work/x" --vocab-size 100
expect_error "--vocab-size 20000000 is larger than carousel's largest vocab_size" "$corpus" \
  -o "$work/x" --vocab-size 20000000
expect_error "--tokenizer '$work/none.json' does not exist" "$corpus" -o "$work/x" \
  --tokenizer "$work/none.json"
expect_error "--val-fraction 1.0 must be in [0, 1)" "$corpus" -o "$work/x" --val-fraction 1
expect_error "the tokenizer's largest token id is 16777216" "$corpus" -o "$work/x" \
  --tokenizer "$work/sparse_huge.json"
# A FIFO as input is refused before it is opened (reading it would block forever).
mkfifo "$work/fifo.txt"
expect_error "input '$work/fifo.txt' is a FIFO (named pipe)" "$work/fifo.txt" -o "$work/x"
# An output path that is a file: one error line, not a traceback.
echo "not a directory" >"$work/afile"
expect_error "cannot write the output in '$work/afile'" "$corpus" -o "$work/afile"
[ -e "$work/x" ] && fail "a failed run left $work/x"

if [ $fails -gt 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "prepare_data: all checks passed"
