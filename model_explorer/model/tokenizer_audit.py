"""The tokenizer files as an attack surface: special and added tokens that hide code points or
carry instructions, tokenizer.json rules that rewrite words of every text, and end or start
tokens that point at an ordinary word.

Only special / added tokens are read for hidden code points: an ordinary vocabulary holds
zero-width and bidi pieces as the text it was trained on (Gemma 3 has 59), a token the
tokenizer matches before anything else does not.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import numpy as np

from ..ggml import Keys
from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding
from .json_literals import json_strings, read_range
from .sidefiles import side_json
from .text_audit import hidden_runs, injection_phrases, visible
from .tokenizer_info import GGUF_SPECIAL_KEYS, TokenizerInfo, json_loc, kv_loc, read_tokenizer, token_types
from .vocab import CONTROL, USER_DEFINED, Vocab, ordinary_text, readable

MAX_TOKEN_FINDINGS = 20
SENTENCE_WORDS = 5  # a special token of this many words is a sentence, not a marker
STOP_NAMES = ("eos", "eot", "eom")


def check(ckpt: CheckpointRecord) -> list[Finding]:
    t, _ = read_tokenizer(ckpt)
    return _token_texts(ckpt) + _rewrites(ckpt) + _stop_tokens(ckpt, t)


# -- special and added tokens --------------------------------------------------------------------

def _gguf_tokens(ckpt: CheckpointRecord) -> Iterator[tuple[str, bool, dict]]:
    tokens = ckpt.meta(Keys.TOKENS)
    types = token_types(ckpt.meta(Keys.TOKEN_TYPE))
    if tokens is None or types is None:
        return
    kv = ckpt.metadata.get(Keys.TOKENS)
    starts = getattr(getattr(kv, "value", None), "_string_offsets", None)  # where each string's length sits
    file = getattr(kv, "file", None) or ckpt.files[0]
    for i in np.flatnonzero((types == CONTROL) | (types == USER_DEFINED))[:100_000]:
        try:
            text = tokens[int(i)]
        except (IndexError, TypeError, ValueError, OSError):
            continue
        if isinstance(text, str):
            loc = kv_loc(ckpt, Keys.TOKENS) if starts is None else \
                {"file": file, "offset": int(starts[i]) + 8, "length": len(text.encode())}
            yield text, bool(types[i] == CONTROL), {**loc, "token_id": int(i)}


def _side_tokens(ckpt: CheckpointRecord) -> Iterator[tuple[str, bool, dict]]:
    """Added and special tokens of a Hugging Face folder, each at its first JSON literal."""
    for name, key in (("tokenizer.json", "added_tokens"), ("tokenizer_config.json", "added_tokens_decoder"),
                      ("special_tokens_map.json", None), ("added_tokens.json", None)):
        side = side_json(ckpt, name)
        if side is None or not isinstance(side.value, dict):
            continue
        keys = [key] if key else list(side.value)
        for k in keys:
            value = side.value.get(k)
            special = {c: s for c, s in _contents(value, k, name)}
            if not special:
                continue
            offset, length = side.where(k)
            raw = read_range(side.path, offset, length) if offset is not None else None
            seen: set[str] = set()
            for at, literal, text in json_strings(raw or b""):
                if text in special and text not in seen:
                    seen.add(text)
                    yield text, special[text], {"file": side.path, "offset": offset + at, "length": len(literal)}
            for text in special.keys() - seen:
                yield text, special[text], {"file": side.path, "offset": offset, "length": length}


def _contents(value, key: str, file: str) -> Iterator[tuple[str, bool]]:
    """(content, special) of the tokens a side-file value lists."""
    if file == "added_tokens.json":
        yield key, False  # {"<tok>": id}
    elif isinstance(value, str):
        yield value, True
    elif isinstance(value, dict):
        if isinstance(value.get("content"), str):
            yield value["content"], bool(value.get("special", True))
        else:
            for v in value.values():
                yield from _contents(v, key, file)
    elif isinstance(value, list):
        for v in value:
            yield from _contents(v, key, file)


def _token_texts(ckpt: CheckpointRecord) -> list[Finding]:
    out: list[Finding] = []
    for text, special, loc in itertools.chain(_gguf_tokens(ckpt) if ckpt.format == "gguf" else (), _side_tokens(ckpt)):
        kind = "special token" if special else "added token"
        for h in hidden_runs(text):
            code = "bidi_override" if h.kind == "bidi" else "hidden_text"
            out.append(model_finding(code, f"The {kind} “{visible(text)}” holds {h.what}: the tokenizer matches "
                                     "it in any text that contains it, and a reader cannot tell it from the "
                                     "token it looks like.", token=text, **loc))
        phrases = injection_phrases(text)
        if phrases or (special and len(re.findall(r"[^\W\d_]+", text)) >= SENTENCE_WORDS):
            why = "; ".join(p.what for p in phrases) or "a sentence, where special tokens are markers"
            out.append(model_finding("injection_text", f"The {kind} “{visible(text)}” is instruction text "
                                     f"({why}): one id puts all of it in front of the model wherever the "
                                     "token is inserted.", token=text, **loc))
        if len(out) >= MAX_TOKEN_FINDINGS:
            break
    return out


# -- tokenizer.json rules that rewrite text ------------------------------------------------------

def _replaces(node, path: str, depth: int = 0) -> Iterator[tuple[str, dict]]:
    if depth > 32:
        return
    if isinstance(node, dict):
        if node.get("type") == "Replace":
            yield path, node
        for k, v in node.items():
            yield from _replaces(v, f"{path} > {k}", depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _replaces(v, f"{path} > {i}", depth + 1)


def _words(text: str, regex: bool) -> bool:
    if regex:
        text = re.sub(r"\\[pP]\{[^}]*\}|\\.", "", text)
    return bool(re.search(r"[^\W\d_]{2,}|\d{2,}", text))


def _rewrites(ckpt: CheckpointRecord) -> list[Finding]:
    """Replace rules whose pattern or replacement holds words (the space <-> '▁' pair does not)."""
    tj = side_json(ckpt, "tokenizer.json")
    if tj is None or not isinstance(tj.value, dict):
        return []
    out = []
    for part in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        for path, rule in _replaces(tj.value.get(part), part):
            pattern = rule.get("pattern") if isinstance(rule.get("pattern"), dict) else {}
            regex = "Regex" in pattern
            find = pattern.get("Regex", pattern.get("String"))
            content = rule.get("content")
            if not isinstance(find, str) or not isinstance(content, str):
                continue
            if not (_words(find, regex) or _words(content, False)):
                continue
            offset, length = tj.where(part)
            raw = read_range(tj.path, offset, length) or b""
            at = next(((a, len(lit)) for a, lit, v in json_strings(raw) if v == find), None)
            loc = {"offset": offset + at[0], "length": at[1]} if at else {"offset": offset, "length": length}
            when = "every text before it is tokenized" if part in ("normalizer", "pre_tokenizer") else \
                "every text the model writes, as it is decoded"
            out.append(model_finding(
                "normalizer_rewrites", f"tokenizer.json {path} replaces “{visible(find, 80)}” "
                f"{'(a regular expression) ' if regex else ''}with “{visible(content, 80)}” in {when}: words "
                "change between what is typed and what the model reads (or between what it writes and what "
                "is shown).", file=tj.path, pattern=find, replacement=content, **loc))
    return out


# -- end and start tokens ------------------------------------------------------------------------

def _stop_tokens(ckpt: CheckpointRecord, t: TokenizerInfo) -> list[Finding]:
    """An end (or start) id that names an ordinary vocabulary token."""
    vocab = Vocab(ckpt)
    if not vocab.known() or not vocab.marks_specials():
        return []
    out, done = [], set()
    for name in (*STOP_NAMES, "bos"):
        s = t.special.get(name)
        if not s:
            continue
        candidates = [(s.get("id"), s.get("from"))] + [(c["id"], c["from"]) for c in s.get("config_ids", [])]
        for i, where in candidates:
            if not isinstance(i, int) or (name, i) in done or vocab.special(i):
                continue
            done.add((name, i))
            piece = vocab.text(i)
            if piece is None or not ordinary_text(piece):
                continue
            loc = (kv_loc(ckpt, f"tokenizer.ggml.{GGUF_SPECIAL_KEYS[name]}") if t.source == "gguf"
                   else json_loc(ckpt, where))
            effect = (f"generation stops wherever the model writes “{readable(piece)}”, and the real end of a "
                      "turn does not stop it" if name != "bos" else
                      f"every prompt starts with “{readable(piece)}” where the model expects its start token")
            own = s.get("token")
            named = f", not the tokenizer's {name} token “{own}”" if own and own != piece else ""
            out.append(model_finding("special_token_not_special", f"The {name} token id {i} ({where}) is the "
                                     f"ordinary vocabulary token “{readable(piece)}”{named}: {effect}.",
                                     token=name, id=i, **loc))
    return out
