"""Do two checkpoints' tokenizers agree? Both encode a few fixed test sentences (ASCII, digits,
spaces and newlines, accented and CJK text, an emoji, a chat-special token) and the id lists are
compared. A GGUF goes through the project's own rebuild of its vocabulary (tokenizer.py, what the
demo runs), a folder through the `tokenizers` library on its tokenizer.json: a GGUF converted with
the wrong `tokenizer.ggml.pre` or vocabulary shows up here, before it generates worse text.
"""

from __future__ import annotations

from typing import Any

from ..records import CheckpointRecord
from ..spans import Finding
from .config import UnsupportedModel
from .findings import model_finding

TEST_SENTENCES = (
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "In 2024, 3.14159 * 42 = 131.95 and 1,000,000 > 999.",
    "  two  spaces,\ttab\n\nnew paragraph\r\n   indented",
    "café naïve Ærøskøbing déjà vu",
    "日本語のテキストと中文字符",
    "Emoji: 🙂👍🏽",
)
# a chat-special token stays one token; the first of these that both vocabularies hold is tried
SPECIAL_ROLES = ("eos_token", "bos_token", "pad_token", "unk_token")


def _tokenizer(ckpt: CheckpointRecord):
    from . import inspector

    return inspector.build(ckpt)


def _where(ckpt: CheckpointRecord) -> str:
    """Which file the tokenizer comes from, for the message."""
    if ckpt.format == "gguf":
        return f"{ckpt.source} (tokenizer.ggml.*)"
    from .. import sources
    from .sidefiles import model_dir

    return sources.join(model_dir(ckpt), "tokenizer.json")


def _special_sentence(ta, tb) -> str | None:
    for role in SPECIAL_ROLES:
        tok = ta.special_tokens.get(role)
        if tok and ta.backend.token_to_id(tok) is not None and tb.backend.token_to_id(tok) is not None:
            return f"{tok}user\nHello, how are you?{tok}"
    return None


def compare_tokenizers(a: CheckpointRecord, b: CheckpointRecord) -> tuple[dict[str, Any], list[Finding]]:
    """({"compared", "reason", "sentences", "mismatch"}, findings).

    `mismatch` is None when every sentence encodes to the same ids (without BOS/EOS added),
    else {"text", "ids_a", "ids_b", "tokens_a", "tokens_b"} for the first sentence that differs.
    A checkpoint without a usable tokenizer is not compared (`reason` says why); that is no
    finding here: the model layer's own checks report a missing or unreadable tokenizer.
    """
    result: dict[str, Any] = {"compared": False, "reason": None, "sentences": 0, "mismatch": None}
    try:
        ta, tb = _tokenizer(a), _tokenizer(b)
    except (UnsupportedModel, ImportError) as e:  # ImportError: the `tokenizers` library is missing
        result["reason"] = str(e)
        return result, []
    sentences = list(TEST_SENTENCES)
    special = _special_sentence(ta, tb)
    if special:
        sentences.append(special)
    result.update(compared=True, sentences=len(sentences), file_a=_where(a), file_b=_where(b))
    for text in sentences:
        ids_a, ids_b = ta.encode(text, add_special_tokens=False), tb.encode(text, add_special_tokens=False)
        if ids_a == ids_b:
            continue
        mismatch = {"text": text, "ids_a": ids_a, "ids_b": ids_b,
                    "tokens_a": [ta.token_text(i) for i in ids_a],
                    "tokens_b": [tb.token_text(i) for i in ids_b]}
        result["mismatch"] = mismatch
        first = next((k for k, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
        message = (f"The tokenizers encode {text!r} differently: {ids_a} ({result['file_a']}) against "
                   f"{ids_b} ({result['file_b']}); they part at token {first}.")
        return result, [model_finding("tokenizer_mismatch", message, file=result["file_b"], **mismatch)]
    return result, []
