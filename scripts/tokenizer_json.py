#!/usr/bin/env python3
"""tokenizer_json.py — carousel's reading of a Hugging Face tokenizer.json, in Python, for
scripts/prepare_data.py: the checks host/io/tokenizer.cpp makes (read_tokenizer, vocab_size_of),
in the same order and the same words, so that the script and carousel give a tokenizer.json the
same ids and vocab_size, or the same refusal (tests/end_to_end/script_inputs_test.py holds the
two to it on generated tokenizers). Standard library only; the tokenizers library is
prepare_data.py's, which cross-checks its own reading against this one.
"""
import json

MAX_VOCAB = 1 << 24  # carousel's largest vocab_size


def json_kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


class Refused(Exception):
    """A tokenizer.json carousel refuses: the words after its path in carousel's message."""


def id_kind(value):
    """A JSON value as carousel's tokenizer reader names it (host/io/tokenizer.cpp json_kind): an
    integer that nlohmann::json holds as one (-2^63 to 2^64 - 1) is itself, anything else its
    kind."""
    if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 64):
        return str(value)
    return json_kind(value)


def is_id(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < (1 << 64)


def quoted(token):
    return json.dumps(token, ensure_ascii=False)  # as nlohmann::json's dump() writes a string


def vocab_size(j):
    """1 + the largest token id of tokenizer.json `j`, after carousel's checks, made here in the
    same order and words (host/io/tokenizer.cpp read_tokenizer and vocab_size_of; the test
    tests/end_to_end/script_inputs_test.py holds the two to the same ids, vocab_size or refusal).
    Added tokens are numbered as the tokenizers library numbers them on load, whatever id the
    file writes: a token of model.vocab keeps its id, any other takes the next id from the
    vocabulary's size (its number of entries; versions before 0.22.2: one past the largest added
    id when that is at least the size). A written id that differs, from either version's, is
    refused (the library would silently renumber it)."""
    model = j.get("model") if isinstance(j, dict) else None
    if not isinstance(model, dict) or "vocab" not in model:
        raise Refused(" has no model.vocab; expected a Hugging Face tokenizer.json (the file "
                      "`tokenizers` saves, not tokenizer_config.json or a vocab.txt)")
    vocab, ids, pieces = model["vocab"], [], {}
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: {token: id}, in key order
        for token in sorted(vocab):
            if not is_id(vocab[token]):
                raise Refused(f": model.vocab id of token {quoted(token)} is "
                              f"{id_kind(vocab[token])}, not a non-negative integer")
            ids.append(vocab[token])
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the index
        for i, e in enumerate(vocab):
            if isinstance(e, list) and e and isinstance(e[0], str):
                pieces[e[0]] = i
        ids += [len(vocab) - 1] if vocab else []
    else:
        raise Refused(f": model.vocab is {id_kind(vocab)}, neither an object (BPE, WordPiece, "
                      f"WordLevel) nor a list (Unigram)")
    added = j.get("added_tokens", [])
    if not isinstance(added, list):
        raise Refused(f": added_tokens is {id_kind(added)}, not a list")
    for k, t in enumerate(added):
        if not isinstance(t, dict):
            raise Refused(f": added_tokens[{k}] is {id_kind(t)}, not an object")
        content = t.get("content")
        if not isinstance(content, str) or not content:
            what = ("missing" if "content" not in t else "empty" if content == "" else
                    id_kind(content))
            raise Refused(f": added_tokens[{k}]: content is {what}, not a token (a non-empty "
                          f"string)")
        where = f"added_tokens[{k}] ({quoted(content)})"
        if not is_id(t.get("id")):
            what = id_kind(t["id"]) if "id" in t else "missing"
            raise Refused(f": {where}: id is {what}, not a non-negative integer")
        if "special" in t and not isinstance(t["special"], bool):
            raise Refused(f": {where}: special is {id_kind(t['special'])}, not true or false")
        ids.append(t["id"])
    if ids and max(ids) >= MAX_VOCAB:
        raise Refused(f": the tokenizer's largest token id is {max(ids)}; carousel's vocab_size "
                      f"is at most {MAX_VOCAB}, so ids must be below it")
    # The library's numbering (tokenizers' AddedVocabulary::add_tokens), as versions 0.22.2 and
    # later number (`newer`: a new token takes the next id from the vocabulary's size) and as
    # earlier ones did (`older`: the next id after the largest added one when that is at least
    # the size, also when that token is one of model.vocab's). They differ only when model.vocab
    # has gaps; a written id must be what both give.
    size, newer, older, top = len(vocab), {}, {}, 0
    nxt = size
    for k, t in enumerate(added):
        content = t["content"]
        in_model = (vocab.get(content) if isinstance(vocab, dict) else pieces.get(content))
        if content in newer:
            a = newer[content]
        elif in_model is not None:
            a = in_model
        else:
            a, nxt = nxt, nxt + 1
        newer[content] = a
        if content in older:
            b = older[content]
        elif in_model is not None:
            b = in_model
        elif not older:
            b = size
        else:
            b = top + 1 if top >= size or size == 0 else size
        older[content] = b
        top = b if len(older) == 1 else max(top, b)
        if t["id"] != a or t["id"] != b:
            raise Refused(renumbered(content, k, t["id"], a, size) if a == b else
                          f": added token {quoted(content)} (added_tokens[{k}]) has id "
                          f"{t['id']}, but the tokenizers library gives it id {a} (versions "
                          f"0.22.2 and later) or {b} (earlier versions), as model.vocab has "
                          f"gaps: which ids the data holds depends on the version that tokenized "
                          f"it; give model.vocab the ids 0 to {size - 1}")
    if not ids:
        raise Refused(" has an empty vocabulary")
    return max(ids) + 1


def renumbered(content, k, written, new, entries):
    return (f": added token {quoted(content)} (added_tokens[{k}]) has id {written}, but the "
            f"tokenizers library, which tokenizes the data (prepare_data.py, transformers), "
            f"gives it id {new}: an added token keeps the id of the same token in model.vocab, "
            f"else takes the next id after the vocabulary ({entries} entries) and the added "
            f"tokens before it; write that id")


def not_a_number(text):
    raise ValueError(f"{text} is not a JSON number")


def finite(text):
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number overflow parsing '{text}'")
    return value


def parse(text):
    """tokenizer.json text as nlohmann::json parses it: no NaN or Infinity, no number beyond a
    double, no lone surrogate ("\\ud800"), a UTF-8 byte order mark skipped. Raises ValueError
    with the reason (RecursionError: nested deeper than Python reads)."""
    j = json.loads(text.removeprefix("\ufeff"), parse_constant=not_a_number, parse_float=finite)
    try:
        json.dumps(j, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff), which is not text")
    return j


# The eos token, as carousel finds it (host/io/tokenizer.cpp read_tokenizer: token_text, id_of,
# first_special): prepare_data.py --add-eos puts this token between documents, so the
# separators in the shards are the ids that carousel's packing=true cuts documents at.
EOS_NAMES = ("<|end_of_text|>", "</s>", "<|endoftext|>")  # Llama 3, Llama 2 / Mistral, GPT-2


def token_text(config, key):
    """config[key] as a token: "</s>" or {"content": "</s>", ...}; None when absent or neither."""
    value = config.get(key) if isinstance(config, dict) else None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def first_special(j, names):
    """The first of `names` that is a special added token of tokenizer.json `j` (names in order:
    a tokenizer with both <|end_of_text|> and <|endoftext|> gets the first), or None."""
    added = j.get("added_tokens", [])
    for name in names:
        if any(t["content"] == name and t.get("special") is True for t in added):
            return name
    return None


def id_of(j, text):
    """The id of token `text` in a tokenizer.json that vocab_size(j) accepted: an added token's
    (the first of that content), else model.vocab's (a Unigram vocabulary's: the index of the
    last equal piece, as the library's lookup keeps it); None when it is no token."""
    for t in j.get("added_tokens", []):
        if t["content"] == text:
            return t["id"]
    vocab = j["model"]["vocab"]
    if isinstance(vocab, dict):
        return vocab.get(text)
    found = None
    for i, e in enumerate(vocab):
        if isinstance(e, list) and e and e[0] == text:
            found = i
    return found


def eos_token(j, config):
    """The eos token carousel reads for tokenizer.json `j`: tokenizer_config.json's eos_token
    when that file is beside it (`config`, its parsed JSON; None when there is no such file —
    then a config without eos_token means no eos, as in carousel), else the first special added
    token among EOS_NAMES. None when there is none."""
    if config is not None:
        return token_text(config, "eos_token")
    return first_special(j, EOS_NAMES)
