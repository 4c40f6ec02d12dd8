#!/usr/bin/env python3
"""prepare_data_tokenizer.py — scripts/prepare_data.py's tokenizer: a byte-level BPE trained on
the training split (saved with its merges in the form every tokenizers version reads), or a
--tokenizer read as carousel reads it (scripts/tokenizer_json.py) and cross-checked against the
tokenizers library; and the eos token --add-eos puts between documents, found as carousel finds
it (host/io/tokenizer.cpp), so that packing=true cuts documents where the shards separate them.
"""
import json
import os
import stat

import tokenizer_json
from prepare_data_inputs import UsageError, one_line
from prepare_data_shards import COMPANIONS

EOS = "<|endoftext|>"  # the special token of the tokenizers trained here


def train_tokenizer(train_docs, vocab_size):
    """Byte-level BPE trained on (eos, document) pairs, read as they come (an iterator)."""
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


def read_regular(path, name, what):
    """The bytes of regular file `path` (a FIFO is refused: reading it would block for ever)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise UsageError(f"{name} is not a regular file (expected {what})")
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise UsageError(f"{name} does not exist (expected {what})")
    except OSError as e:
        raise UsageError(f"cannot read {name}: {e.strerror}")


def parse_json(raw, name, what):
    """JSON as carousel parses it (tokenizer_json.parse), errors as one line naming the file."""
    try:
        return tokenizer_json.parse(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{name} is not valid JSON: {e.reason}; expected {what}")
    except ValueError as e:
        raise UsageError(f"{name} is not valid JSON: {e}; expected {what}")
    except RecursionError:
        raise UsageError(f"{name} is not valid JSON: nested too deeply; expected {what}")


def read_tokenizer(path):
    """(the tokenizer, its vocab_size, its bytes, its JSON): read once, checked as carousel
    checks it (tokenizer_json.vocab_size), then loaded by the tokenizers library, whose ids must
    be the file's."""
    from tokenizers import Tokenizer

    name = f"--tokenizer '{path}'"
    raw = read_regular(path, name, "a tokenizer.json")
    j = parse_json(raw, name, "a Hugging Face tokenizer.json")
    try:
        vocab = tokenizer_json.vocab_size(j)
    except tokenizer_json.Refused as e:
        raise UsageError(f"{name}{e}")
    try:
        tok = Tokenizer.from_str(raw.decode("utf-8"))
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
    return tok, vocab, raw, j


def load_tokenizer(path):
    """(the tokenizer, its vocab_size, its bytes): read_tokenizer without the JSON."""
    return read_tokenizer(path)[:3]


def companions(path):
    """{name: bytes} of tokenizer_config.json / special_tokens_map.json beside a tokenizer.json
    (carousel reads the eos from the first and carries both into its checkpoints, so they go
    into the output beside the copy)."""
    found = {}
    for name in COMPANIONS:
        p = os.path.join(os.path.dirname(os.path.abspath(path)), name)
        if os.path.isfile(p):  # as carousel's fs::is_regular_file: a symlink to a file counts
            found[name] = read_regular(p, f"'{p}'", "a JSON file")
    return found


def companion_config(found):
    """The parsed tokenizer_config.json of companions(), or None when there is none."""
    if "tokenizer_config.json" not in found:
        return None
    return parse_json(found["tokenizer_config.json"], "tokenizer_config.json beside --tokenizer",
                      "a JSON object")


def resolve_eos(add_eos, eos_token, j, config, label):
    """(eos token, its id), or (None, None) without --add-eos: --eos-token, else the eos token
    carousel reads (tokenizer_json.eos_token)."""
    if not add_eos:
        return None, None
    if eos_token is not None:
        found = tokenizer_json.id_of(j, eos_token)
        if found is None:
            raise UsageError(f"--eos-token {tokenizer_json.quoted(eos_token)} is not a token of "
                             f"{label}")
        return eos_token, found
    name = tokenizer_json.eos_token(j, config)
    found = None if name is None else tokenizer_json.id_of(j, name)
    if found is None:
        if name is not None:
            why = f"its eos token {tokenizer_json.quoted(name)} is not one of its tokens"
        elif config is not None:
            why = "the tokenizer_config.json beside it names no eos_token"
        else:
            why = (f"no tokenizer_config.json beside it, and no special added "
                   f"{', '.join(tokenizer_json.EOS_NAMES)}")
        raise UsageError(f"--add-eos: {label} has no eos token ({why}); name the token to put "
                         f"between documents with --eos-token TEXT")
    return name, found
