"""The tokenizer inspector's engine: text to tokens with ids and byte boundaries, search by id or
text, pages of the vocabulary. The `tokenizers` library runs tokenizer.json; a GGUF's vocabulary
goes through the project's own rebuild of it (tokenizer.py), the one the demo generates with.
"""

from __future__ import annotations

from typing import Any

from ..records import CheckpointRecord
from .config import UnsupportedModel
from .sidefiles import model_dir

MAX_TEXT = 100_000  # characters tokenized at once in the inspector
MAX_PAGE = 1000


def build(ckpt: CheckpointRecord):
    """The checkpoint's Tokenizer (tokenizer.py), built once and kept with the checkpoint.
    Raises UnsupportedModel naming the missing or unreadable file."""
    cached = ckpt.derived.tokenizer_object
    if cached is not None:
        return cached
    from .tokenizer import from_directory, from_gguf

    if ckpt.format == "gguf":
        tok = from_gguf(ckpt.metadata)
    else:
        config = ckpt.metadata.get("config.json")
        tok = from_directory(model_dir(ckpt), config if isinstance(config, dict) else None,
                             ckpt.metadata.get("generation_config.json"))
    ckpt.derived.tokenizer_object = tok
    return tok


def tokenize(ckpt: CheckpointRecord, text: str, add_special_tokens: bool = False) -> list[dict[str, Any]]:
    """One entry per token: {"id", "token", "start", "end"}: byte offsets into `text` as UTF-8
    (a token inside one multi-byte character spans that character)."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"the inspector tokenizes up to {MAX_TEXT:,} characters at once")
    tok = build(ckpt)
    enc = tok.backend.encode(text, add_special_tokens=add_special_tokens)
    # character offset -> byte offset
    starts = [0]
    for ch in text:
        starts.append(starts[-1] + len(ch.encode("utf-8")))
    out = []
    if add_special_tokens and tok.add_bos and tok.bos_id is not None:
        out.append({"id": tok.bos_id, "token": tok.token_text(tok.bos_id), "start": 0, "end": 0})
    for i, (a, b) in zip(enc.ids, enc.offsets):
        a, b = min(a, len(text)), min(b, len(text))
        out.append({"id": int(i), "token": tok.token_text(i), "start": starts[a], "end": starts[b]})
    return out


def token(ckpt: CheckpointRecord, token_id: int) -> str | None:
    tok = build(ckpt)
    return tok.backend.id_to_token(int(token_id))


def find(ckpt: CheckpointRecord, query: str | int, limit: int = 50) -> list[dict[str, Any]]:
    """Tokens whose id is `query` (an int or digits) or whose text contains it."""
    tok = build(ckpt)
    if isinstance(query, int) or (isinstance(query, str) and query.isdigit()):
        t = tok.backend.id_to_token(int(query))
        return [] if t is None else [{"id": int(query), "token": t}]
    hits = [(i, t) for t, i in tok.backend.get_vocab(with_added_tokens=True).items() if query in t]
    return [{"id": i, "token": t} for i, t in sorted(hits)[:limit]]


def page(ckpt: CheckpointRecord, start: int = 0, count: int = 100) -> list[dict[str, Any]]:
    """Tokens `start` .. `start + count` of the vocabulary, in id order: {"id", "token"}, plus
    "special": True for the added special tokens. An id the vocabulary skips has token None."""
    tok = build(ckpt)
    count = max(0, min(count, MAX_PAGE))
    n = tok.vocab_size
    ids = range(max(0, start), min(n, max(0, start) + count))
    if not ids:
        return []
    # Only the added tokens (a few hundred at most) are looked up, not the whole vocabulary.
    special = {i for i, t in tok.backend.get_added_tokens_decoder().items() if t.special}
    out = []
    for i in ids:
        row = {"id": i, "token": tok.backend.id_to_token(i)}
        if i in special:
            row["special"] = True
        out.append(row)
    return out


__all__ = ["UnsupportedModel", "build", "find", "page", "token", "tokenize"]
