"""Token ids looked up in a model's own vocabulary files, without building a tokenizer: the
token's text, what it reads as (byte-level and SentencePiece pieces turned back into text), and
whether the tokenizer marks it special (a GGUF control / user-defined token, a Hugging Face added
token).
"""

from __future__ import annotations

from functools import cached_property, lru_cache

from ..ggml import Keys
from ..records import CheckpointRecord
from .sidefiles import side_json
from .text_audit import visible
from .tokenizer import byte_alphabet

CONTROL, USER_DEFINED, NORMAL = 3, 4, 1  # llama.cpp token types


class Vocab:
    def __init__(self, ckpt: CheckpointRecord) -> None:
        self.ckpt = ckpt
        self.gguf = ckpt.format == "gguf" and ckpt.meta(Keys.TOKENS) is not None

    @cached_property
    def _gguf_types(self):
        from .tokenizer_info import token_types

        return token_types(self.ckpt.meta(Keys.TOKEN_TYPE))

    @cached_property
    def _added(self) -> dict[int, str]:
        """Hugging Face added tokens: tokenizer.json added_tokens and tokenizer_config.json's decoder."""
        out: dict[int, str] = {}
        tj = side_json(self.ckpt, "tokenizer.json")
        for a in ((tj.value or {}).get("added_tokens") or []) if tj is not None else []:
            if isinstance(a, dict) and isinstance(a.get("id"), int) and isinstance(a.get("content"), str):
                out[a["id"]] = a["content"]
        tc = side_json(self.ckpt, "tokenizer_config.json")
        decoder = (tc.value or {}).get("added_tokens_decoder") if tc is not None else None
        for k, v in (decoder.items() if isinstance(decoder, dict) else []):
            if isinstance(k, str) and k.isdigit() and isinstance(v, dict) and isinstance(v.get("content"), str):
                out.setdefault(int(k), v["content"])
        return out

    @cached_property
    def _pieces(self) -> dict:
        tj = side_json(self.ckpt, "tokenizer.json")
        model = (tj.value or {}).get("model") if tj is not None else None
        return model.get("vocab") if isinstance(model, dict) and isinstance(model.get("vocab"), (dict, list)) else {}

    @cached_property
    def _by_id(self) -> dict[int, str]:
        vocab = self._pieces
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            return {i: p[0] for i, p in enumerate(vocab) if isinstance(p, list) and p and isinstance(p[0], str)}
        return {i: piece for piece, i in vocab.items() if isinstance(i, int)}

    def text(self, i: int) -> str | None:
        if self.gguf:
            tokens = self.ckpt.meta(Keys.TOKENS)
            try:
                value = tokens[i] if 0 <= i < len(tokens) else None
            except (IndexError, TypeError, ValueError, OSError):
                return None
            return value if isinstance(value, str) else None
        return self._added.get(i) if i in self._added else self._by_id.get(i)

    def special(self, i: int) -> bool:
        if self.gguf:
            types = self._gguf_types
            return types is not None and 0 <= i < len(types) and int(types[i]) in (CONTROL, USER_DEFINED)
        return i in self._added

    def known(self) -> bool:
        return self.gguf or bool(self._pieces) or bool(self._added)

    def marks_specials(self) -> bool:
        """Whether the files tell special tokens from the rest at all (a vocabulary with no
        control or added token says nothing about which ids are special)."""
        if self.gguf:
            types = self._gguf_types
            return types is not None and bool(((types == CONTROL) | (types == USER_DEFINED)).any())
        return bool(self._added)

    def shown(self, i: int) -> str:
        """“text” as the token reads, for a message (or “?” when the id is not in the files)."""
        text = self.text(i)
        if text is None:
            return "not in the vocabulary"
        return f"“{visible(readable(text), 60)}”"


def readable(piece: str) -> str:
    """A vocabulary piece as text: GPT-2 byte-level characters turned back into bytes, the
    SentencePiece space mark into a space; special tokens stay as they are."""
    inverse = _inverse_bytes()
    if piece and all(c in inverse for c in piece) and not piece.startswith("<"):
        return bytes(inverse[c] for c in piece).decode("utf-8", "replace")
    return piece.replace("▁", " ")


@lru_cache(maxsize=1)
def _inverse_bytes() -> dict[str, int]:
    return {c: b for b, c in byte_alphabet().items()}


def ordinary_text(piece: str) -> bool:
    """A piece that reads as plain text (a word, a punctuation mark), not markup or a control byte."""
    text = readable(piece).strip()
    return bool(text) and text.isprintable() and not (text[0] in "<[" and text[-1] in ">]")
