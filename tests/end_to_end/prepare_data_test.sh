#!/usr/bin/env bash
# prepare_data_test.sh — scripts/prepare_data.py end to end: a BPE trained on the tiny corpus,
# shards that decode back to the text exactly (each split, and train + val = the corpus), its
# tokenizer.json with the BPE merges in the legacy string form (which tokenizers < 0.20 reads too)
# encoding as the library's pair form does, a user tokenizer copied as it is and giving the same
# shards, carousel training on them (and refusing a tokenizer larger than vocab_size), JSONL and
# Parquet inputs (a record per document, eos after each, the same shards from both), and bad
# inputs as one "error:" line with exit status 2.
#   tests/end_to_end/prepare_data_test.sh SOURCE_DIR CAROUSEL_BINARY WORK_DIR
# Exit 77 (skipped) when SOURCE_DIR/.venv has no `tokenizers` (scripts/setup.sh installs it);
# the Parquet checks are skipped, with a message, when it has no `pyarrow`.
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
have_pyarrow=1
if ! "$py" -c 'import pyarrow' 2>/dev/null; then
  echo "SKIP: the Parquet checks: $py has no pyarrow package (run scripts/setup.sh)"
  have_pyarrow=0
fi
prep="$src/scripts/prepare_data.py"
corpus="$src/tests/data/tiny_corpus.txt"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# Reads shards as host/data/token_files.cpp does (its own parser) and compares the decoded text.
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

# 1b. Its BPE merges are in the legacy string form ("a b"), which tokenizers < 0.20 (transformers
#     < 4.45) also reads, not the pair form (["a", "b"]) the library writes: the same tokenizer
#     trained and saved by the library (pairs.json) differs only there, and loaded, the two encode
#     the corpus to the same ids. A merge token holding a space keeps the pair form.
"$py" - "$prep" "$corpus" "$work" <<'PY' || fail "a/tokenizer.json: not the library's, string merges"
import importlib.util, json, sys
from tokenizers import Tokenizer, models
prep, corpus, work = sys.argv[1:]
path, pairs, spaced = f"{work}/a/tokenizer.json", f"{work}/pairs.json", f"{work}/spaced.json"
spec = importlib.util.spec_from_file_location("prepare_data", prep)
pd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pd)
train_docs, _ = pd.split([corpus], 0.1)
pd.train_tokenizer(train_docs, 300).save(pairs)  # as the library writes it
ours, theirs = open(path, encoding="utf-8").read(), open(pairs, encoding="utf-8").read()
data, pair_data = json.loads(ours), json.loads(theirs)
merges, pair_merges = data["model"]["merges"], pair_data["model"]["merges"]
assert all(isinstance(m, list) and len(m) == 2 for m in pair_merges), pair_merges[:3]
assert all(isinstance(m, str) and m.count(" ") == 1 for m in merges), merges[:3]
assert merges == [f"{a} {b}" for a, b in pair_merges], "other merges than the library's"
cut = ours.index('"merges": [')
assert ours[:cut] == theirs[:theirs.index('"merges": [')], "not the library's before the merges"
pair_data["model"]["merges"] = merges
assert data == pair_data, "tokenizer.json differs from the library's beyond the merges' form"
text = open(corpus, encoding="utf-8", newline="").read()
docs = [text] + text.split("\n\n") + ["  Ünïcödé — 日本語, \"quotes\"\there 🚀 <|endoftext|>"]
got = [e.ids for e in Tokenizer.from_file(path).encode_batch(docs)]
want = [e.ids for e in Tokenizer.from_file(pairs).encode_batch(docs)]
assert got == want, "the string merges encode otherwise than the pair form"
tok = Tokenizer(models.BPE(vocab={"a": 0, " ": 1, "b": 2, "a ": 3, "a b": 4},
                           merges=[("a", " "), ("a ", "b")]))
text, why = pd.tokenizer_text(tok)
open(spaced, "w", encoding="utf-8").write(text)
assert why == "a merge token holds a space", why
assert json.load(open(spaced))["model"]["merges"] == [["a", " "], ["a ", "b"]]
assert Tokenizer.from_file(spaced).encode("a b").ids == [4]
print(f"string merges ok: {len(merges)} merges as \"a b\", {sum(map(len, got))} ids "
      f"of {len(docs)} texts as the pair form's")
PY

# 2. Small shards: several train shards, the same tokens; the user's tokenizer gives the same.
"$py" "$prep" "$corpus" -o "$work/b" --tokenizer "$work/a/tokenizer.json" --val-fraction 0.1 \
  --shard-tokens 500 >/dev/null 2>&1 || fail "prepare_data --tokenizer exited $?"
n=$(ls "$work/b"/train_*.bin 2>/dev/null | wc -l)
[ "$n" -eq 5 ] || fail "2219 train tokens in shards of 500 gave $n shards, not 5"
check_roundtrip "$work/b" 300 || fail "shards of b/ do not decode to the corpus"
cmp -s "$work/a/tokenizer.json" "$work/b/tokenizer.json" || fail "--tokenizer: not copied as is"
# A pair-form --tokenizer (the library's own) is copied as it is, and gives the same shards.
"$py" "$prep" "$corpus" -o "$work/pb" --tokenizer "$work/pairs.json" --val-fraction 0.1 \
  >"$work/pb.out" 2>&1 || fail "prepare_data --tokenizer pairs.json exited $?: $(<"$work/pb.out")"
cmp -s "$work/pairs.json" "$work/pb/tokenizer.json" || fail "pair-form --tokenizer: rewritten"
for f in train_000000.bin val_000000.bin; do
  cmp -s "$work/a/$f" "$work/pb/$f" || fail "pair-form --tokenizer: another $f"
done
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

# 4c. JSONL and Parquet: each record is one document. paragraphs.jsonl holds the corpus's
#     paragraphs (with other fields), so it gives a/'s tokenizer and shards exactly; odd.jsonl
#     adds records a text file would cut (blank lines inside, an empty one, non-ASCII). With
#     --add-eos there is one <|endoftext|> after each record, and the tokens between them decode
#     to the records in order; Parquet (row groups of 3) and gzip'd JSONL under --text-field give
#     the same tokenizer and shards, and carousel trains on them.
"$py" - "$corpus" "$work" "$have_pyarrow" <<'PY' || fail "writing the JSONL / Parquet inputs"
import gzip, json, re, sys
corpus, work, have_pyarrow = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
text = open(corpus, encoding="utf-8", newline="").read()
paragraphs = re.split(r"(?<=\n\n)(?=[^\n])", text)
assert "".join(paragraphs) == text and len(paragraphs) == 9, len(paragraphs)
odd = ["a record\n\nwith blank lines inside\n\n\nstays one document\n", "",
       "  Ünïcödé — 日本語, \"quotes\" and a tab\there 🚀  ",
       "the last record, no newline"]
def write(path, records, field="text", opener=open):
    with opener(path, "wt", encoding="utf-8") as f:
        for i, r in enumerate(records):
            f.write(json.dumps({"id": i, field: r, "meta": {"n": len(r)}}, ensure_ascii=i % 2 == 0))
            f.write("\n\n" if i == 2 else "\n")  # a blank line between records is skipped
write(f"{work}/paragraphs.jsonl", paragraphs)
write(f"{work}/odd.jsonl", odd)
write(f"{work}/all.jsonl.gz", paragraphs + odd, field="body", opener=gzip.open)
json.dump(paragraphs + odd, open(f"{work}/records.json", "w"))
if have_pyarrow:
    import pyarrow as pa, pyarrow.parquet as pq
    records = paragraphs + odd
    table = pa.table({"id": list(range(len(records))), "text": records})
    pq.write_table(table, f"{work}/all.parquet", row_group_size=3)
PY
"$py" "$prep" "$work/paragraphs.jsonl" -o "$work/j0" --vocab-size 300 --val-fraction 0.1 \
  >"$work/j0.out" 2>&1 || fail "prepare_data on JSONL exited $?: $(cat "$work/j0.out")"
for f in train_000000.bin val_000000.bin tokenizer.json; do
  cmp -s "$work/a/$f" "$work/j0/$f" || fail "JSONL of the corpus's paragraphs: another $f"
done
check_records() {  # DIR: the shards are the records of records.json, each followed by an eos
  "$py" - "$1" "$work/records.json" <<'PY'
import glob, json, struct, sys
from tokenizers import Tokenizer
d, records = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
tok = Tokenizer.from_file(f"{d}/tokenizer.json")
eos = tok.token_to_id("<|endoftext|>")
def read(prefix):
    ids = []
    for p in sorted(glob.glob(f"{d}/{prefix}_*.bin")):
        b = open(p, "rb").read()
        magic, version, n = struct.unpack("<3i", b[:12])
        assert (magic, version) == (20240520, 1) and len(b) == 1024 + 2 * n, (p, magic, len(b))
        ids += struct.unpack(f"<{n}H", b[1024:])
    return ids
train, val = read("train"), read("val")
ids = train + val
assert ids.count(eos) == len(records), (ids.count(eos), len(records))
assert train[-1] == eos and val[-1] == eos, "the split is not after a record's eos"
docs, start = [], 0
for k, i in enumerate(ids):
    if i == eos:
        docs.append(tok.decode(ids[start:k]))
        start = k + 1
assert docs == records, "the tokens between eos do not decode to the records"
size = lambda rs: sum(len(r.encode()) for r in rs)
share = size(docs[len(docs) - val.count(eos):]) / size(records)
assert 0.1 <= share < 0.35, f"val holds {share:.3f} of the bytes for --val-fraction 0.1"
print(f"records ok: {len(records)} records, {len(train)} + {len(val)} tokens, "
      f"val {share:.3f} of the bytes")
PY
}
"$py" "$prep" "$work/paragraphs.jsonl" "$work/odd.jsonl" -o "$work/j" --vocab-size 300 \
  --val-fraction 0.1 --add-eos >"$work/j.out" 2>&1 ||
  fail "prepare_data --add-eos on JSONL exited $?: $(cat "$work/j.out")"
check_records "$work/j" || fail "JSONL shards of j/ are not the records with eos after each"
"$py" "$prep" "$work/all.jsonl.gz" -o "$work/jz" --vocab-size 300 --val-fraction 0.1 --add-eos \
  --text-field body >/dev/null 2>&1 || fail "prepare_data on .jsonl.gz --text-field body exited $?"
for f in train_000000.bin val_000000.bin tokenizer.json; do
  cmp -s "$work/j/$f" "$work/jz/$f" || fail ".jsonl.gz with --text-field body: other $f"
done
runs=(j)
if [ $have_pyarrow -eq 1 ]; then
  "$py" "$prep" "$work/all.parquet" -o "$work/p" --vocab-size 300 --val-fraction 0.1 --add-eos \
    >"$work/p.out" 2>&1 || fail "prepare_data --add-eos on Parquet exited $?: $(cat "$work/p.out")"
  for f in train_000000.bin val_000000.bin tokenizer.json; do
    cmp -s "$work/j/$f" "$work/p/$f" || fail "Parquet and JSONL of the same records: other $f"
  done
  check_records "$work/p" || fail "Parquet shards of p/ are not the records with eos after each"
  runs+=(p)
fi
for r in "${runs[@]}"; do
  "$bin" train base_num_decoder_layers=2 max_target_length=32 per_device_batch_size=2 \
    dataset_type=tokens "dataset_path=$work/$r/train_*.bin" \
    "tokenizer_path=$work/$r/tokenizer.json" \
    "eval_dataset_path=$work/$r/val_*.bin" eval_interval=1 vocab_size=300 steps=2 \
    enable_checkpointing=false base_output_directory="$work" run_name="train_$r" \
    >"$work/train_$r.log" 2>&1 ||
    fail "carousel train on the $r/ shards exited $?: $(tail -3 "$work/train_$r.log")"
  [ "$(wc -l <"$work/train_$r/metrics.jsonl" 2>/dev/null)" = 2 ] || fail "$r/: no 2 metrics records"
done

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
expect_error "--tokenizer '$work/sparse_huge.json': the tokenizer's largest token id is 16777216" \
  "$corpus" -o "$work/x" \
  --tokenizer "$work/sparse_huge.json"
# A FIFO as input is refused before it is opened (reading it would block forever).
mkfifo "$work/fifo.txt"
expect_error "input '$work/fifo.txt' is a FIFO (named pipe)" "$work/fifo.txt" -o "$work/x"
# JSONL and Parquet: the file, the line or row, and what is wrong or what would be valid.
printf '{"text": "fine"}\n{"text": "cut off\n' >"$work/cut.jsonl"
expect_error "input '$work/cut.jsonl' line 2 is not JSON (" "$work/cut.jsonl" -o "$work/x"
printf '{"text": "a"}\n["text", "b"]\n' >"$work/list.jsonl"
expect_error "input '$work/list.jsonl' line 2 is an array, not a JSON object" "$work/list.jsonl" \
  -o "$work/x"
printf '{"id": 1, "content": "a"}\n' >"$work/nofield.jsonl"
expect_error \
  "input '$work/nofield.jsonl' line 1 has no field 'text' (its fields: 'id', 'content')" \
  "$work/nofield.jsonl" -o "$work/x"
expect_error \
  "input '$work/paragraphs.jsonl' line 1 has no field 'body' (its fields: 'id', 'text', 'meta')" \
  "$work/paragraphs.jsonl" -o "$work/x" --text-field body
printf '{"text": "a"}\n{"text": 42}\n' >"$work/number.jsonl"
expect_error "input '$work/number.jsonl' line 2: field 'text' is a number, not a string" \
  "$work/number.jsonl" -o "$work/x"
printf '{"text": null}\n' >"$work/null.jsonl"
expect_error "input '$work/null.jsonl' line 1: field 'text' is null, not a string" \
  "$work/null.jsonl" -o "$work/x"
: >"$work/empty.jsonl"
expect_error "input '$work/empty.jsonl' is empty: no JSON records" "$work/empty.jsonl" -o "$work/x"
echo "not gzip" >"$work/plain.jsonl.gz"
expect_error "input '$work/plain.jsonl.gz' is not valid gzip data" "$work/plain.jsonl.gz" \
  -o "$work/x"
# pyarrow missing (a stand-in package that fails to import): says what installs it.
mkdir -p "$work/no_pyarrow/pyarrow"
echo 'raise ImportError("no pyarrow here")' >"$work/no_pyarrow/pyarrow/__init__.py"
echo "PAR1" >"$work/any.parquet"
PYTHONPATH="$work/no_pyarrow" expect_error \
  "input '$work/any.parquet' is Parquet, which needs the pyarrow package: scripts/setup.sh" \
  "$work/any.parquet" -o "$work/x"
if [ $have_pyarrow -eq 1 ]; then
  "$py" - "$work" <<'PY' || fail "writing the bad Parquet files"
import sys
import pyarrow as pa, pyarrow.parquet as pq
w = sys.argv[1]
pq.write_table(pa.table({"id": [1, 2], "content": ["a", "b"]}), f"{w}/nocol.parquet")
pq.write_table(pa.table({"text": [1, 2]}), f"{w}/ints.parquet")
pq.write_table(pa.table({"text": ["a", None, "c"]}), f"{w}/nulls.parquet")
pq.write_table(pa.table({"text": pa.array([], pa.string())}), f"{w}/norows.parquet")
PY
  expect_error "input '$work/nocol.parquet' has no column 'text' (its columns: 'id', 'content')" \
    "$work/nocol.parquet" -o "$work/x"
  expect_error "input '$work/ints.parquet' column 'text' is of type int64, not a string" \
    "$work/ints.parquet" -o "$work/x"
  expect_error "input '$work/nulls.parquet' row 2: column 'text' is null, not a string" \
    "$work/nulls.parquet" -o "$work/x"
  expect_error "input '$work/norows.parquet' is empty: no rows" "$work/norows.parquet" -o "$work/x"
  : >"$work/empty.parquet"
  expect_error "input '$work/empty.parquet' is empty (0 bytes)" "$work/empty.parquet" -o "$work/x"
  expect_error "input '$work/any.parquet' is not a readable Parquet file" "$work/any.parquet" \
    -o "$work/x"
fi
# An output path that is a file: one error line, not a traceback.
echo "not a directory" >"$work/afile"
expect_error "cannot write the output in '$work/afile'" "$corpus" -o "$work/afile"
[ -e "$work/x" ] && fail "a failed run left $work/x"

if [ $fails -gt 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "prepare_data: all checks passed"
