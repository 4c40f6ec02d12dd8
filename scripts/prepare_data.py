#!/usr/bin/env python3
"""prepare_data.py — text, JSONL or Parquet files to llm.c token shards (dataset_type=tokens).

    .venv/bin/python scripts/prepare_data.py corpus/*.txt -o out/data --vocab-size 4096
    .venv/bin/python scripts/prepare_data.py corpus/*.txt -o out/data --tokenizer my/tokenizer.json
    .venv/bin/python scripts/prepare_data.py web/*.jsonl -o out/data --add-eos
    .venv/bin/python scripts/prepare_data.py web/*.parquet -o out/data --text-field body --add-eos

(.venv is made by scripts/setup.sh and holds the `tokenizers` and `pyarrow` packages; nothing is
downloaded at run time.) Writes into the output directory:

  train_000000.bin ...  the training split, at most --shard-tokens tokens per shard
  val_000000.bin ...    the held-out split (none with --val-fraction 0)
  tokenizer.json        the tokenizer: trained here (byte-level BPE on the training split,
                        --vocab-size tokens including the special <|endoftext|>) or a copy
                        of --tokenizer, byte for byte, read as carousel reads it (the same
                        vocab_size or the same refusal: scripts/tokenizer_json.py)

each created beside its name and renamed into place; one already there that is a symlink, FIFO
or directory is refused before any work (never written through).

The trained tokenizer.json is what the library writes except for its BPE merges, which are in
the legacy string form ("a b") that every tokenizers version reads, not the pair form
(["a", "b"]) that tokenizers >= 0.20 writes and tokenizers < 0.20 (so transformers < 4.45)
cannot load. Only when a merge token holds a space (the string form's separator; not with this
byte-level BPE, which writes a space as 'Ġ') does the pair form stay, with a printed note that
the file needs tokenizers >= 0.20.

Inputs, by file name (case-insensitive), each cut into documents:

  *.jsonl, *.json       JSON Lines: one JSON object per line; each record's --text-field
  (also .jsonl.gz,      (default "text") string is one document, as it is (no paragraph cut);
   .json.gz)            other fields are ignored, blank lines skipped.
  *.parquet             each row's --text-field column (a string column) is one document;
                        needs pyarrow.
  anything else         UTF-8 text; a document is a paragraph (its text up to and including
                        the blank lines after it), so the documents concatenated are the file
                        exactly.

--add-eos appends <|endoftext|> (the tokenizer's eos token) after each JSONL/Parquet RECORD —
documents separated by EOS, as Llama 3 / llm.c pipelines do — but after each text FILE (its
paragraphs are one document stream). Records and files keep their order.

The split: the last documents of all inputs (files in the order given), together at least
--val-fraction of the bytes (of the UTF-8 document text), are the held-out split; the split is
on document boundaries and does not depend on the tokenizer. Each document is encoded on its own.
Memory: JSONL is read line by line and Parquet by record batches of its one column, but all
documents are held in memory until the shards are written (the cut needs the total bytes, and
the tokenizer is trained on the training split first), so the inputs must fit in memory.

Shard format (host/data/token_files.cpp), llm.c's: a header of 256 int32 (magic, version, token
count), then the tokens — uint16 with magic 20240520, version 1 (its GPT-2 shards) when every token id
fits, else uint32 with magic 20240801, version 7 (its Llama 3 shards: a 128,256-token vocabulary).
Ids must be below 2^24, carousel's largest vocab_size. Every error is one "error: ..." line on
stderr and exit status 2: among them a JSONL line that is not a JSON object, a record or Parquet
file without the field (the fields it has are listed), a field that is not a string, an empty
JSONL/Parquet file, and a Parquet input without pyarrow. Lines and rows count from 1.
"""
import argparse
import gzip
import json
import os
import re
import stat
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_json  # noqa: E402  (carousel's reading of a tokenizer.json)
from tokenizer_json import MAX_VOCAB, json_kind  # noqa: E402

HEADER_INTS = 256
NARROW = (20240520, 1, "H")  # magic, version, struct code: uint16 ids (llm.c's GPT-2 shards)
WIDE = (20240801, 7, "I")    # uint32 ids (llm.c's Llama 3 shards)
EOS = "<|endoftext|>"


class UsageError(Exception):
    pass


def documents(text):
    """Paragraphs: each ends after the run of blank lines that follows it (or at the end)."""
    docs, start = [], 0
    for m in re.finditer(r"\n[ \t]*\n(?:[ \t]*\n)*", text):
        docs.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        docs.append(text[start:])
    return docs


def input_kind(path):
    name = path.lower()
    if name.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
        return "jsonl"
    return "parquet" if name.endswith(".parquet") else "text"


def jsonl_records(path, field):
    """The --text-field string of each JSON Lines record, read line by line (gzip by name)."""
    want = f"expected one JSON object per line with a string field '{field}' (--text-field)"
    count = 0
    try:
        with (gzip.open if path.lower().endswith(".gz") else open)(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                where = f"input '{path}' line {n}"
                try:
                    line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise UsageError(f"{where} is not UTF-8 ({e.reason} at byte {e.start})")
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:
                    why = (f"{e.msg.removesuffix(' at')} at column {e.colno}"
                           if isinstance(e, json.JSONDecodeError) else str(e))
                    raise UsageError(f"{where} is not JSON ({why}); {want}")
                except RecursionError:
                    raise UsageError(f"{where} is nested too deeply to read; {want}")
                if not isinstance(record, dict):
                    raise UsageError(f"{where} is {json_kind(record)}, not a JSON object; {want}")
                if field not in record:
                    have = ", ".join(f"'{k}'" for k in record) or "none"
                    raise UsageError(f"{where} has no field '{field}' (its fields: {have}); "
                                     f"choose the text field with --text-field")
                text = record[field]
                if not isinstance(text, str):
                    raise UsageError(f"{where}: field '{field}' is {json_kind(text)}, not a string")
                try:
                    text.encode()
                except UnicodeEncodeError as e:  # "\ud800": a lone surrogate is not text
                    raise UsageError(f"{where}: field '{field}' is not valid Unicode ({e.reason} "
                                     f"at character {e.start})")
                count += 1
                yield text
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise UsageError(f"input '{path}' is not valid gzip data ({e})")
    if count == 0:
        raise UsageError(f"input '{path}' is empty: no JSON records; {want}")


def parquet_records(path, field):
    """The --text-field column of each Parquet row, read by record batches."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"input '{path}' is Parquet, which needs the pyarrow package: "
                         f"scripts/setup.sh installs it into .venv (run with .venv/bin/python)")
    want = f"expected a Parquet file with a string column '{field}' (--text-field)"
    if os.path.getsize(path) == 0:
        raise UsageError(f"input '{path}' is empty (0 bytes); {want}")
    try:
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
        if field not in schema.names:
            raise UsageError(f"input '{path}' has no column '{field}' (its columns: "
                             f"{', '.join(repr(c) for c in schema.names) or 'none'}); "
                             f"choose the text column with --text-field")
        if schema.names.count(field) > 1:
            raise UsageError(f"input '{path}' has the column '{field}' "
                             f"{schema.names.count(field)} times; {want}")
        kind = schema.field(field).type
        value = kind.value_type if pa.types.is_dictionary(kind) else kind
        is_view = getattr(pa.types, "is_string_view", lambda t: False)
        if not (pa.types.is_string(value) or pa.types.is_large_string(value) or is_view(value)):
            raise UsageError(f"input '{path}' column '{field}' is of type {kind}, not a string; "
                             f"{want}")
        if pf.metadata.num_rows == 0:
            raise UsageError(f"input '{path}' is empty: no rows; {want}")
        row = 0
        for batch in pf.iter_batches(batch_size=1024, columns=[field]):
            for text in batch.column(0).to_pylist():
                row += 1
                if text is None:
                    raise UsageError(f"input '{path}' row {row}: column '{field}' is null, "
                                     f"not a string")
                yield text
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise UsageError(f"input '{path}' is not a readable Parquet file ({one_line(e)})")


def split(files, val_fraction, text_field="text"):
    """[(eos after it, document)] for the training split and for the held-out split."""
    docs = []
    for path in files:
        kind = input_kind(path)
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):  # reading a FIFO would block forever
                what = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else (
                    "a directory" if stat.S_ISDIR(mode) else "not a regular file")
                give = {"text": "UTF-8 text", "jsonl": "JSON Lines", "parquet": "Parquet"}[kind]
                raise UsageError(f"input '{path}' is {what}; give {give} files")
            if kind == "jsonl":
                docs += [(True, d) for d in jsonl_records(path, text_field)]
                continue
            if kind == "parquet":
                docs += [(True, d) for d in parquet_records(path, text_field)]
                continue
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        except FileNotFoundError:
            raise UsageError(f"input '{path}' does not exist")
        except UnicodeDecodeError as e:
            raise UsageError(f"input '{path}' is not UTF-8 text ({e})")
        except OSError as e:
            raise UsageError(f"cannot read input '{path}': {e.strerror}")
        file_docs = documents(text)
        docs += [(k + 1 == len(file_docs), d) for k, d in enumerate(file_docs)]
    total = sum(len(d.encode()) for _, d in docs)
    if total == 0:
        raise UsageError("the inputs hold no text")
    if val_fraction == 0:
        return docs, []
    if len(docs) < 2:
        raise UsageError(f"--val-fraction {val_fraction} needs at least 2 documents (paragraphs,"
                         f" JSONL/Parquet records) to split; the inputs hold {len(docs)}")
    cut, held = len(docs), 0
    while cut > 1 and held < val_fraction * total:
        cut -= 1
        held += len(docs[cut][1].encode())
    return docs[:cut], docs[cut:]


def train_tokenizer(train_docs, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise UsageError(f"--vocab-size {vocab_size} is too small: byte-level BPE needs the "
                         f"{len(alphabet)} byte tokens and {EOS}, at least {len(alphabet) + 1}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator((d for _, d in train_docs), trainer=trainer)
    return tok


def tokenizer_text(tok):
    """(text, why): tok as tok.save writes it, but a BPE model's merges in the legacy string
    form "a b", which every tokenizers version reads, not the pair form ["a", "b"] that
    tokenizers >= 0.20 writes and < 0.20 (transformers < 4.45) cannot load. When the string form
    would lose something (a merge token holding a space, its separator: byte-level BPE writes a
    space as 'Ġ', so not the tokenizers trained here), keeps the pair form and says why."""
    from tokenizers import Tokenizer

    text = tok.to_str(pretty=True)  # what tok.save(path) writes
    data = json.loads(text)
    model = data.get("model") or {}
    merges = model.get("merges")
    why = None
    if model.get("type") == "BPE" and isinstance(merges, list) and any(
            isinstance(m, list) for m in merges):
        if not all(len(m) == 2 and all(isinstance(t, str) and t and " " not in t for t in m)
                   for m in merges):
            why = "a merge token holds a space"
        else:
            model["merges"] = [f"{a} {b}" for a, b in merges]
            strings = json.dumps(data, indent=2, ensure_ascii=False)  # the library's layout
            if Tokenizer.from_str(strings).to_str(pretty=True) == text:  # read back: the same
                text = strings
            else:
                why = "the string form does not read back as the same tokenizer"
    return text, why


def one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def load_tokenizer(path):
    """(the tokenizer, its vocab_size, its bytes): read once, checked as carousel checks it
    (tokenizer_json.vocab_size), then loaded by the tokenizers library, whose ids must be the
    file's."""
    from tokenizers import Tokenizer

    name = f"--tokenizer '{path}'"
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block for ever
            raise UsageError(f"{name} is not a regular file (expected a tokenizer.json)")
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise UsageError(f"{name} does not exist (expected a tokenizer.json)")
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror}")
    try:
        text = raw.decode("utf-8")
        j = tokenizer_json.parse(text)
    except UnicodeDecodeError as e:
        raise UsageError(f"{name} is not valid JSON: {e.reason}; expected a Hugging Face "
                         f"tokenizer.json")
    except ValueError as e:
        raise UsageError(f"{name} is not valid JSON: {e}; expected a Hugging Face tokenizer.json")
    except RecursionError:
        raise UsageError(f"{name} is not valid JSON: nested too deeply; expected a Hugging Face "
                         f"tokenizer.json")
    try:
        vocab = tokenizer_json.vocab_size(j)
    except tokenizer_json.Refused as e:
        raise UsageError(f"{name}{e}")
    try:
        tok = Tokenizer.from_str(text)
    except BaseException as e:  # the Rust library's own Exception type, or a panic
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise UsageError(f"{name} is not a Hugging Face tokenizer.json ({one_line(e)})")
    # The library's own reading must be the one checked above (a tokenizers version that numbers
    # otherwise is caught here, not in the shards).
    for k, t in enumerate(j.get("added_tokens", [])):
        if tok.token_to_id(t["content"]) != t["id"]:
            new = tok.token_to_id(t["content"])
            why = tokenizer_json.renumbered(t["content"], k, t["id"], new,
                                            len(j["model"]["vocab"]))
            raise UsageError(name + why)
    largest = max(tok.get_vocab(with_added_tokens=True).values(), default=-1)
    if largest + 1 != vocab:
        raise UsageError(f"{name}: the tokenizers library reads {largest + 1} token ids where "
                         f"carousel reads {vocab}; carousel cannot train on this tokenizer")
    return tok, vocab, raw


OUTPUT = re.compile(r"((train|val)_\d{6}\.bin|tokenizer\.json)(\.tmp)?")  # what -o DIR gets


def entry_kind(mode):
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
            "not a regular file")


def check_outputs(out, names, lstat):
    """Every entry of the output directory under an output's name is a regular file: one that
    is a symlink, a FIFO, a directory or a device is refused, never written through or into."""
    for name in sorted(n for n in names if OUTPUT.fullmatch(n)):
        mode = lstat(name).st_mode
        if not stat.S_ISREG(mode):
            raise UsageError(f"'{os.path.join(out, name)}' is {entry_kind(mode)}; prepare_data.py "
                             f"writes its outputs as new regular files, never through a link or "
                             f"into a FIFO: remove it, or give another -o")


def check_output_dir(out):
    """Before any work: the output names already in -o DIR, when it is there, are regular files."""
    if os.path.isdir(out):
        check_outputs(out, os.listdir(out), lambda n: os.lstat(os.path.join(out, n)))


class OutputDir:
    """-o DIR, opened once: every output is created relative to its descriptor (openat) as a new
    file (O_EXCL | O_NOFOLLOW) beside its final name and renamed into place, so nothing is ever
    opened through a symlink, blocks on a FIFO or is seen half written."""

    def __init__(self, out):
        os.makedirs(out, exist_ok=True)
        self.out = out
        self.fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        names = os.listdir(self.fd)
        check_outputs(out, names, self.lstat)
        for name in names:  # stale shards would join the glob
            if re.fullmatch(r"(train|val)_\d{6}\.bin(\.tmp)?", name):
                os.unlink(name, dir_fd=self.fd)

    def lstat(self, name):
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def write(self, name, chunks):
        tmp = name + ".tmp"
        try:
            check_outputs(self.out, [tmp], self.lstat)
            os.unlink(tmp, dir_fd=self.fd)  # a regular file left by an interrupted run
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
        except OSError:  # a full disk: no half-written .tmp left behind
            os.unlink(tmp, dir_fd=self.fd)
            raise
        # rename replaces what is at `name` (checked above; a link made since is replaced, its
        # target untouched), never follows it
        os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return os.path.join(self.out, name)


class ShardWriter:
    def __init__(self, out, prefix, shard_tokens, fmt):
        self.out, self.prefix, self.shard_tokens, self.fmt = out, prefix, shard_tokens, fmt
        self.buf, self.paths, self.count = [], [], 0

    def add(self, ids):
        self.buf += ids
        self.count += len(ids)
        while len(self.buf) >= self.shard_tokens:
            self._write(self.buf[:self.shard_tokens])
            self.buf = self.buf[self.shard_tokens:]

    def close(self):
        if self.buf:
            self._write(self.buf)
        self.buf = []

    def _write(self, ids):
        magic, version, code = self.fmt
        header = [magic, version, len(ids)] + [0] * (HEADER_INTS - 3)
        self.paths.append(self.out.write(f"{self.prefix}_{len(self.paths):06d}.bin", [
            struct.pack(f"<{HEADER_INTS}i", *header), struct.pack(f"<{len(ids)}{code}", *ids)]))


def encode_split(tok, docs, writer, eos_id):
    texts = [d for _, d in docs]
    try:
        encodings = tok.encode_batch(texts, add_special_tokens=False)
    except BaseException as e:  # a --tokenizer that cannot encode (a WordLevel without its unk)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise UsageError(f"the tokenizer cannot encode the input ({one_line(e)})")
    for k, enc in enumerate(encodings):
        ids = list(enc.ids)
        if eos_id is not None and docs[k][0]:
            ids.append(eos_id)
        writer.add(ids)
    writer.close()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+",
                    help="UTF-8 text, JSON Lines (.jsonl, .json, also .gz) or Parquet (.parquet) "
                         "files, read in this order")
    ap.add_argument("-o", "--out", required=True, help="output directory (created)")
    ap.add_argument("--tokenizer", help="a Hugging Face tokenizer.json to use (else one is trained)")
    ap.add_argument("--vocab-size", type=int, default=4096,
                    help="vocabulary of the trained tokenizer (default 4096; above 65536 the "
                         "shards hold uint32 ids)")
    ap.add_argument("--val-fraction", type=float, default=0.05,
                    help="held-out share of the bytes, last documents (default 0.05; 0 = none)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000,
                    help="tokens per shard at most (default 100M, as llm.c)")
    ap.add_argument("--text-field", default="text",
                    help="the JSONL field / Parquet column holding each document (default text)")
    ap.add_argument("--add-eos", action="store_true",
                    help=f"append {EOS} (the tokenizer's eos token) after each JSONL/Parquet "
                         f"record and after each text file")
    args = ap.parse_args(argv)
    try:
        if not 0 <= args.val_fraction < 1:
            raise UsageError(f"--val-fraction {args.val_fraction} must be in [0, 1)")
        if not 1 <= args.shard_tokens < (1 << 31):
            raise UsageError(f"--shard-tokens {args.shard_tokens} must be in [1, 2^31 - 1] "
                             f"(the shard header counts tokens in an int32)")
        if args.tokenizer is None and args.vocab_size > MAX_VOCAB:
            raise UsageError(f"--vocab-size {args.vocab_size} is larger than carousel's largest "
                             f"vocab_size; at most {MAX_VOCAB}")
        check_output_dir(args.out)  # before the work: a symlink there is refused at once
        train_docs, val_docs = split(args.inputs, args.val_fraction, args.text_field)
        if args.tokenizer:
            tok, vocab, tok_bytes = load_tokenizer(args.tokenizer)  # copied as it is
            pair_merges = None
        else:
            tok = train_tokenizer(train_docs, args.vocab_size)
            text, pair_merges = tokenizer_text(tok)
            tok_bytes = text.encode()
            vocab = max(tok.get_vocab(with_added_tokens=True).values()) + 1
        fmt = NARROW if vocab <= (1 << 16) else WIDE
        eos_id = None
        if args.add_eos:
            eos_id = tok.token_to_id(EOS)
            if eos_id is None:
                raise UsageError(f"--add-eos: the tokenizer has no {EOS} token")
        out = OutputDir(args.out)
        tok_path = out.write("tokenizer.json", [tok_bytes])
        written = {}
        for prefix, docs in (("train", train_docs), ("val", val_docs)):
            if docs:
                w = ShardWriter(out, prefix, args.shard_tokens, fmt)
                encode_split(tok, docs, w, eos_id)
                written[prefix] = w
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the output directory: a file there, no permission, a full disk
        print(f"error: cannot write the output in '{args.out}': {e.strerror}"
              f"{f' ({e.filename})' if e.filename else ''}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: every document is held in memory until the shards are "
              "written (split the inputs into several runs)", file=sys.stderr)
        return 2
    for prefix, w in written.items():
        print(f"{prefix}: {len(w.paths)} shard(s), {w.count} tokens")
    print(f"tokenizer: {tok_path} ({vocab} tokens)")
    if pair_merges:
        print(f"note: {tok_path} keeps its BPE merges as pairs ({pair_merges}), so it needs "
              f"tokenizers >= 0.20 (transformers >= 4.45) to load")
    cmd = (f"carousel train dataset_type=tokens 'dataset_path={args.out}/train_*.bin' "
           f"tokenizer_path={tok_path} vocab_size={vocab}")
    if "val" in written:
        cmd += f" 'eval_dataset_path={args.out}/val_*.bin' eval_interval=100"
    print("train with:", cmd)
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(errors="backslashreplace")  # any path prints, even undecodable bytes
    sys.exit(main(sys.argv[1:]))
