#!/usr/bin/env python3
"""prepare_data_inputs.py — scripts/prepare_data.py's input side: its inputs streamed as
batches of documents, never a whole file in memory, and a batch parsed into documents.

The main process reads (read_batches): JSONL as blocks of whole lines, text as whole paragraphs,
Parquet as column values by record batch; a Batch carries where it starts (input, byte offset or
row, line), so a resumed run can start reading there. Parsing (parse_batch: UTF-8, JSON, the
field's checks) runs wherever the batch goes, in a worker process or in the main one; a batch's
documents do not depend on how the input was cut into batches, so the output does not either.
Every error is a UsageError of one line naming the input and its line, row or row group.
"""
import gzip
import json
import os
import re
import stat
import zlib
from typing import NamedTuple

from tokenizer_json import json_kind


class UsageError(Exception):
    """One "error: ..." line and exit status 2 (pickled back from worker processes as is)."""


def one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def input_kind(path):
    name = path.lower()
    if name.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
        return "jsonl"
    return "parquet" if name.endswith(".parquet") else "text"


GIVE = {"text": "UTF-8 text", "jsonl": "JSON Lines", "parquet": "Parquet"}


def check_inputs(files):
    """Before any work: each input is a regular file (a FIFO would block for ever). Returns each
    one's [absolute path, size, mtime_ns]: its fingerprint in a resumable run's manifest."""
    prints = []
    for path in files:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise UsageError(f"input '{path}' does not exist")
        except OSError as e:
            raise UsageError(f"cannot read input '{path}': {e.strerror}")
        if not stat.S_ISREG(st.st_mode):
            what = "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else (
                "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file")
            raise UsageError(f"input '{path}' is {what}; give {GIVE[input_kind(path)]} files")
        prints.append([os.path.abspath(path), st.st_size, st.st_mtime_ns])
    return prints


class Batch(NamedTuple):
    """Documents of one input, in order. kind "error": `data` is a UsageError met while reading,
    delivered in its place in the order (after the batches before it are parsed)."""
    file: int        # index of the input
    kind: str        # "jsonl", "text", "parquet" or "error"
    path: str
    offset: int      # where the first document starts: byte (JSONL, text; of the decompressed
                     # stream for .gz) or row (Parquet, from 0)
    line: int        # the line of that byte, from 1 (JSONL, text)
    data: object     # JSONL: bytes, whole lines; text: [bytes], paragraphs; Parquet: [str|None]
    ends_file: bool  # its last document ends the input (text: the one --add-eos follows)
    done: int        # bytes of all inputs read so far (progress)


# A paragraph ends after a line and the run of blank lines after it (only spaces and tabs).
PARAGRAPH_END = re.compile(rb"\n[ \t]*\n(?:[ \t]*\n)*")
SPACES = re.compile(rb"[ \t]*")
BLOCK = 1 << 20  # bytes read at once


def documents(text):
    """Paragraphs of a str: each ends after the run of blank lines that follows it (or at the
    end), so they concatenate to the text. (The streaming reader cuts bytes the same way.)"""
    docs, start = [], 0
    for m in re.finditer(r"\n[ \t]*\n(?:[ \t]*\n)*", text):
        docs.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        docs.append(text[start:])
    return docs


def read_batches(files, text_field, batch_bytes, start=None):
    """Batch after batch of all inputs in order, from `start` ({"file", "offset", "line"}: a
    document's start, recorded by an earlier run; None: the beginning). A reading error ends the
    stream as an "error" batch."""
    sizes = [os.path.getsize(p) for p in files]
    first = start["file"] if start else 0
    done = sum(sizes[:first])
    for i in range(first, len(files)):
        path, kind = files[i], input_kind(files[i])
        at = start if start and i == first else {"file": i, "offset": 0, "line": 1}
        read = {"jsonl": jsonl_batches, "text": text_batches, "parquet": parquet_batches}[kind]
        try:
            for b in read(i, path, at, batch_bytes, text_field, done):
                yield b
        except UsageError as e:
            yield Batch(i, "error", path, 0, 0, e, True, done)
            return
        done += sizes[i]


def open_stream(path):
    """(binary stream, raw file): gzip decompressed by name; the raw file's position is progress."""
    raw = open(path, "rb")
    if path.lower().endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


def skip_to(f, raw, offset):
    if f is raw:
        f.seek(offset)
        return
    while offset > 0:  # gzip: decompress up to the offset (cheaper than parsing it again)
        n = len(f.read(min(offset, BLOCK)))
        if n == 0:
            raise UsageError("ended before the resume offset (changed since?)")
        offset -= n


def gzip_errors(path, kind):
    """A reader's gzip and I/O errors as one line naming the input."""
    def wrap(gen):
        try:
            yield from gen
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise UsageError(f"input '{path}' is not valid gzip data ({e})")
        except UsageError as e:
            if str(e).startswith("input '"):
                raise
            raise UsageError(f"input '{path}' {e}")
        except OSError as e:
            raise UsageError(f"cannot read input '{path}': {e.strerror or one_line(e)}")
    return wrap


def jsonl_batches(i, path, at, batch_bytes, field, done):
    def gen():
        f, raw = open_stream(path)
        with f, raw:
            skip_to(f, raw, at["offset"])
            offset, line, carry = at["offset"], at["line"], b""
            while True:
                chunk = f.read(max(batch_bytes, 1))
                cut = chunk.rfind(b"\n") + 1 if chunk else len(chunk)
                if chunk and cut == 0:  # no line ends in it: a long line goes on
                    carry += chunk
                    continue
                block = carry + chunk[:cut] if chunk else carry
                carry = chunk[cut:] if chunk else b""
                if block:
                    yield Batch(i, "jsonl", path, offset, line, block, not chunk,
                                done + raw.tell())
                    offset += len(block)
                    line += block.count(b"\n")
                if not chunk:
                    return
    return gzip_errors(path, "jsonl")(gen())


def text_batches(i, path, at, batch_bytes, field, done):
    """Whole paragraphs: a paragraph's end is certain once a byte that is no space, tab or
    newline follows its blank lines (or the file ends)."""
    def gen():
        with open(path, "rb") as f:
            f.seek(at["offset"])
            offset, line = at["offset"], at["line"]  # of buf[0]
            buf, scan, docs, size = b"", 0, [], 0
            while True:
                chunk = f.read(min(BLOCK, batch_bytes))  # small in tests: cuts anywhere
                buf += chunk
                start = 0
                for m in PARAGRAPH_END.finditer(buf, scan):
                    if chunk and SPACES.match(buf, m.end()).end() == len(buf):
                        scan = m.start()  # more blank lines may follow: wait for more
                        break
                    docs.append(buf[start:m.end()])
                    size += m.end() - start
                    start = scan = m.end()
                else:  # no paragraph end open: one can only begin at the last newline
                    last = buf.rfind(b"\n", start)
                    scan = last if last >= 0 else len(buf)
                if not chunk and start < len(buf):
                    docs.append(buf[start:])
                    size += len(buf) - start
                    start = len(buf)
                if docs and (size >= batch_bytes or not chunk):
                    yield Batch(i, "text", path, offset, line, docs, not chunk, done + f.tell())
                    offset += size
                    line += sum(d.count(b"\n") for d in docs)
                    docs, size = [], 0
                buf, scan = buf[start:], max(scan - start, 0)
                if not chunk:
                    return
    return gzip_errors(path, "text")(gen())


def parquet_batches(i, path, at, batch_bytes, field, done):
    """The column's values by record batches of each row group in turn; an unreadable row group
    is named."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"input '{path}' is Parquet, which needs the pyarrow package: "
                         f"scripts/setup.sh installs it into .venv (run with .venv/bin/python)")
    want = f"expected a Parquet file with a string column '{field}' (--text-field)"
    size = os.path.getsize(path)
    if size == 0:
        raise UsageError(f"input '{path}' is empty (0 bytes); {want}")
    try:
        pf = pq.ParquetFile(path)
        schema = pf.schema_arrow
        rows = pf.metadata.num_rows
        groups = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise UsageError(f"input '{path}' is not a readable Parquet file ({one_line(e)})")
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
        raise UsageError(f"input '{path}' column '{field}' is of type {kind}, not a string; {want}")
    if rows == 0:
        raise UsageError(f"input '{path}' is empty: no rows; {want}")
    row, texts, nbytes, first = 0, [], 0, at["offset"]
    for g, n in enumerate(groups):
        if row + n <= first:  # before the resume row
            row += n
            continue
        try:
            for rb in pf.iter_batches(batch_size=1024, row_groups=[g], columns=[field]):
                values = rb.column(0).to_pylist()
                if row < first:  # the resume row is in this group
                    skip = min(first - row, len(values))
                    values, row = values[skip:], row + skip
                texts += values
                nbytes += sum(len(t) for t in values if t is not None)
                if nbytes >= batch_bytes:
                    yield Batch(i, "parquet", path, row, 0, texts, False,
                                done + size * (row + len(texts)) // rows)
                    row, texts, nbytes = row + len(texts), [], 0
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise UsageError(f"input '{path}' is not a readable Parquet file (row group {g}, "
                             f"rows {sum(groups[:g]) + 1}-{sum(groups[:g + 1])}: {one_line(e)})")
    yield Batch(i, "parquet", path, row, 0, texts, True, done + size)


WANT = "expected one JSON object per line with a string field '{}' (--text-field)"


def parse_batch(b, field):
    """(texts, eos flags, UTF-8 sizes) of the batch's documents; a UsageError names the first
    bad line or row. The eos flag: --add-eos puts an eos after this document (every JSONL and
    Parquet record; a text file's last paragraph)."""
    if b.kind == "error":
        raise b.data
    if b.kind == "jsonl":
        texts = jsonl_texts(b, field)
        return texts, [True] * len(texts), [len(t.encode()) for t in texts]
    if b.kind == "parquet":
        for k, t in enumerate(b.data):
            if t is None:
                raise UsageError(f"input '{b.path}' row {b.offset + k + 1}: column '{field}' "
                                 f"is null, not a string")
        return b.data, [True] * len(b.data), [len(t.encode()) for t in b.data]
    texts, line = [], b.line
    for d in b.data:
        try:
            texts.append(d.decode("utf-8"))
        except UnicodeDecodeError as e:
            n = line + d.count(b"\n", 0, e.start)
            col = e.start - (d.rfind(b"\n", 0, e.start) + 1) + 1
            raise UsageError(f"input '{b.path}' line {n} is not UTF-8 text ({e.reason}: byte "
                             f"0x{d[e.start]:02x} at column {col})")
        line += d.count(b"\n")
    eos = [False] * len(texts)
    if b.ends_file and eos:
        eos[-1] = True
    return texts, eos, [len(d) for d in b.data]


def jsonl_texts(b, field):
    want = WANT.format(field)
    lines = b.data.split(b"\n")
    if lines[-1] == b"":  # the block ends with a newline
        lines.pop()
    texts = []
    for k, raw in enumerate(lines):
        n = b.line + k
        where = f"input '{b.path}' line {n}"
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
        texts.append(text)
    return texts


def empty_jsonl(path, field):
    return UsageError(f"input '{path}' is empty: no JSON records; {WANT.format(field)}")
