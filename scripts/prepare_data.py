#!/usr/bin/env python3
"""prepare_data.py — text, JSONL or Parquet files to llm.c token shards (dataset_type=tokens).

    .venv/bin/python scripts/prepare_data.py corpus/*.txt -o out/data --vocab-size 4096
    .venv/bin/python scripts/prepare_data.py corpus/*.txt -o out/data --tokenizer my/tokenizer.json
    .venv/bin/python scripts/prepare_data.py web/*.jsonl -o out/data --add-eos --workers 8
    .venv/bin/python scripts/prepare_data.py web/*.parquet -o out/data --text-field body --add-eos

(.venv is made by scripts/setup.sh and holds the `tokenizers` and `pyarrow` packages; nothing is
downloaded at run time.) Writes into the output directory:

  train_000000.bin ...  the training split, at most --shard-tokens tokens per shard
  val_000000.bin ...    the held-out split (none with --val-fraction 0)
  tokenizer.json        the tokenizer: trained here (byte-level BPE on the training split,
                        --vocab-size tokens including the special <|endoftext|>) or a copy
                        of --tokenizer, byte for byte, read as carousel reads it (the same
                        vocab_size or the same refusal: scripts/tokenizer_json.py), with its
                        tokenizer_config.json / special_tokens_map.json when they are beside it
  prepare_data.manifest.json  what was asked and each shard done: a rerun resumes (below)

each created beside its name and renamed into place; one already there that is a symlink, FIFO
or directory is refused before any work (never written through).

The trained tokenizer.json is what the library writes except for its BPE merges, which are in
the legacy string form ("a b") that every tokenizers version reads, not the pair form
(["a", "b"]) that tokenizers >= 0.20 writes and tokenizers < 0.20 (so transformers < 4.45)
cannot load. Only when a merge token holds a space (the string form's separator; not with this
byte-level BPE, which writes a space as 'Ġ') does the pair form stay, with a printed note that
the file needs tokenizers >= 0.20.

Inputs, by file name (case-insensitive), each cut into documents (prepare_data_inputs.py):

  *.jsonl, *.json       JSON Lines: one JSON object per line; each record's --text-field
  (also .jsonl.gz,      (default "text") string is one document, as it is (no paragraph cut);
   .json.gz)            other fields are ignored, blank lines skipped.
  *.parquet             each row's --text-field column (a string column) is one document;
                        needs pyarrow.
  anything else         UTF-8 text; a document is a paragraph (its text up to and including
                        the blank lines after it), so the documents concatenated are the file
                        exactly.

--add-eos appends the tokenizer's eos token after each JSONL/Parquet RECORD (documents separated
by eos, as Llama 3 / llm.c pipelines do) but after each text FILE (its paragraphs are one
document stream). The eos is the one carousel reads (host/io/tokenizer.cpp, so packing=true cuts
documents where the shards do): tokenizer_config.json's eos_token when that file is beside the
tokenizer.json, else the first special added token of <|end_of_text|> (Llama 3), </s> (Llama 2,
Mistral), <|endoftext|> (GPT-2, and the tokenizers trained here). --eos-token TEXT names
another (and implies --add-eos).

The split: the last documents of all inputs (files in the order given), together at least
--val-fraction of the bytes (of the UTF-8 document text), are the held-out split; the split is
on document boundaries and does not depend on the tokenizer. Each document is encoded on its own.

At scale: the inputs are streamed, never held in memory (memory is bounded by --workers, the
batch size and the longest document, not by the corpus). A first pass (the scan) reads and
checks every input and counts its bytes for the split, so a bad input is refused before any
shard is written; a trained tokenizer is trained on a second pass over the training split; the
last pass tokenizes batches of documents in --workers processes (default min(cores, 8)), taken
back in input order, so the shards are the same for any --workers, and writes each shard as it
fills. Progress (bytes of the inputs read, tokens/s, ETA) goes to stderr.

Resuming: prepare_data.manifest.json records the run's arguments (the inputs with their sizes
and modification times, the tokenizer's bytes, every flag that changes the output; not
--workers) and each complete shard. Run again with the same arguments after an interruption
(Ctrl-C, SIGTERM, a crash, a full disk) and it skips the scan and the training and continues
after the last complete shard still there; a finished run is not redone. With other arguments or
changed inputs the directory's shards are replaced: the run starts over, with a note.
Interrupted (Ctrl-C, SIGTERM): exit status 130. On an error during the tokenizing (a tokenizer
that cannot encode, an input changed since the scan, a full disk) the complete shards stay,
valid and in the manifest; the one being filled is removed.

Every error is one "error: ..." line on stderr and exit status 2, never a traceback: among them
a JSONL line that is not a JSON object or not UTF-8, a record or Parquet file without the field
(the fields it has are listed), a field that is not a string, an empty JSONL/Parquet file, a
truncated gzip or Parquet file (its row group named), a text file that is not UTF-8 (the line
named), and a Parquet input without pyarrow. Lines and rows count from 1.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The script's parts (inputs, the worker pool, the run, shards, the tokenizer), one module each.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "prepare_data_lib"))
# The work is in the prepare_data_*.py modules beside this file; what the tests reach through
# this module (pd.split, pd.train_tokenizer, pd.tokenizer_text, pd.load_tokenizer,
# pd.tokenizer_json, pd.UsageError) is imported here for them.
import tokenizer_json  # noqa: E402,F401  (carousel's reading of a tokenizer.json)
from tokenizer_json import MAX_VOCAB  # noqa: E402
import prepare_data_pool as pool  # noqa: E402
from prepare_data_inputs import (UsageError, check_inputs, one_line,  # noqa: E402
                                 parse_batch, read_batches)
from prepare_data_run import Interrupted, Splitter, Tally, prepare  # noqa: E402
from prepare_data_shards import check_output_dir  # noqa: E402
from prepare_data_tokenizer import (EOS, load_tokenizer, tokenizer_text,  # noqa: E402,F401
                                    train_tokenizer)

BYTES = 256  # byte-level BPE's alphabet: a trained vocabulary holds these and EOS


def split(files, val_fraction, text_field="text"):
    """[(eos after it, document)] for the training split and for the held-out split, in
    memory: for small inputs and tests (main() streams instead)."""
    check_inputs(files)
    tally, docs = Tally(files, text_field), []
    for b in read_batches(files, text_field, 1 << 20):
        texts, eos, sizes = parse_batch(b, text_field)
        tally.add(b, len(texts), sum(sizes))
        docs += zip(eos, texts)
    n, total = tally.close(val_fraction)
    splitter, through, cut = Splitter(total, n, val_fraction), 0, 0
    for k, (_, d) in enumerate(docs):
        through += len(d.encode())
        if not splitter.train(k, through):
            break
        cut = k + 1
    return docs[:cut], docs[cut:]


def parse_args(argv):
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
                    help="append the tokenizer's eos token (as carousel reads it: "
                         "tokenizer_config.json's eos_token, else <|end_of_text|>, </s> or "
                         "<|endoftext|>) after each JSONL/Parquet record and each text file")
    ap.add_argument("--eos-token", metavar="TEXT",
                    help="the token --add-eos appends instead (implies --add-eos)")
    ap.add_argument("--workers", type=int, default=pool.default_workers(),
                    help=f"tokenizing processes (default min(cores, 8), here "
                         f"{pool.default_workers()}); the shards do not depend on it")
    ap.add_argument("--batch-bytes", type=int, default=1 << 20,
                    help="documents per unit of work, by bytes (default 1 MiB); the shards do "
                         "not depend on it")
    args = ap.parse_args(argv)
    args.add_eos = args.add_eos or args.eos_token is not None
    return args


def check_args(args):
    if not 0 <= args.val_fraction < 1:
        raise UsageError(f"--val-fraction {args.val_fraction} must be in [0, 1)")
    if not 1 <= args.shard_tokens < (1 << 31):
        raise UsageError(f"--shard-tokens {args.shard_tokens} must be in [1, 2^31 - 1] "
                         f"(the shard header counts tokens in an int32)")
    if args.tokenizer is None and args.vocab_size > MAX_VOCAB:
        raise UsageError(f"--vocab-size {args.vocab_size} is larger than carousel's largest "
                         f"vocab_size; at most {MAX_VOCAB}")
    if args.tokenizer is None and args.vocab_size < BYTES + 1:  # before reading any input
        raise UsageError(f"--vocab-size {args.vocab_size} is too small: byte-level BPE needs the "
                         f"{BYTES} byte tokens and {EOS}, at least {BYTES + 1}")
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers} must be at least 1")
    if args.batch_bytes < 1:
        raise UsageError(f"--batch-bytes {args.batch_bytes} must be at least 1")


def main(argv):
    args = parse_args(argv)
    try:
        check_args(args)
        check_output_dir(args.out, UsageError)  # before the work: a symlink there is refused
        return prepare(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the output directory: a file there, no permission, a full disk
        print(f"error: cannot write the output in '{args.out}': {e.strerror or one_line(e)}"
              f"{f' ({e.filename})' if e.filename else ''}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory (fewer --workers, a smaller --batch-bytes, or a document "
              "too large to tokenize at once)", file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"interrupted{f' ({e})' if str(e) else ''}: the complete shards in '{args.out}' "
              f"stay; run the same command again to continue", file=sys.stderr)
        return 130
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    sys.stdout.reconfigure(errors="backslashreplace")  # any path prints, even undecodable bytes
    sys.exit(main(sys.argv[1:]))
