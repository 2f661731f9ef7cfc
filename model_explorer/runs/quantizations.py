"""Compare quantizations: one prompt on the model as shipped and on Q8_0 / F16 conversions.

    result = compare_quantizations(prompt="The capital of France is", max_new_tokens=24)
    result.table()            # label, perplexity, agreement, tokens/s, file size per variant

Conversions are written once into a cache folder and reused. For each variant we report the
greedy continuation, how many of its tokens agree with the reference (F16, the least rounded),
and the perplexity of `PERPLEXITY_TEXT`, a short passage written for this project, so that the
cost of fewer bits shows up as a number as well as in the text.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# A few plain sentences written for this project (not from any dataset): perplexity on them
# measures how well each variant still predicts ordinary English.
PERPLEXITY_TEXT = (
    "The library opens at nine in the morning and closes at six in the evening. "
    "Most visitors come to read the newspapers, but some stay all day to study. "
    "On rainy afternoons the reading room is full, and the staff bring extra chairs from the "
    "basement. Children have their own corner with picture books and a small table."
)
CONVERSIONS = ("Q8_0", "F16")
REFERENCE = "F16"

Event = Callable[[dict[str, Any]], None]


@dataclass
class VariantResult:
    label: str  # "Q4_1 (as shipped)", "Q8_0", "F16"
    dtype: str
    path: str
    file_bytes: int
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)
    decode_tps: float = 0.0
    load_seconds: float = 0.0
    perplexity: float = float("nan")
    agreement: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    prompt: str
    reference: str
    variants: list[VariantResult]

    def table(self):
        """A pandas DataFrame, one row per variant."""
        import pandas as pd

        return pd.DataFrame([{"variant": v.label, "file MiB": round(v.file_bytes / 2**20, 1),
                              "perplexity": round(v.perplexity, 3),
                              "agreement": f"{v.agreement.get('matches', 0)}/{v.agreement.get('total', 0)}",
                              "same prefix": v.agreement.get("prefix", 0),
                              "tokens/s": round(v.decode_tps, 1), "text": v.text} for v in self.variants])

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "reference": self.reference,
                "variants": [v.to_dict() for v in self.variants]}


def token_agreement(tokens: list[int], reference: list[int]) -> dict[str, Any]:
    """Positions where two greedy continuations hold the same token, and the shared prefix.

    After the first difference the two texts continue from different contexts, so the prefix
    is the stricter number; matching positions show whether they fall back in step.
    """
    total = max(len(tokens), len(reference))
    matches = sum(a == b for a, b in zip(tokens, reference))
    prefix = 0
    for a, b in zip(tokens, reference):
        if a != b:
            break
        prefix += 1
    return {"matches": matches, "total": total, "prefix": prefix,
            "fraction": matches / total if total else 1.0}


def perplexity(model, text: str = PERPLEXITY_TEXT) -> float:
    """exp(mean negative log-likelihood) of each token of `text` given the ones before it."""
    ids = model.tokenizer.encode(text)
    if len(ids) < 2:
        raise ValueError("perplexity needs a text of at least two tokens")
    logits = np.asarray(model.forward(ids), dtype=np.float64)[:-1]
    logits -= logits.max(axis=-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    nll = -log_probs[np.arange(len(ids) - 1), ids[1:]]
    return float(np.exp(nll.mean()))


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "model_explorer", "conversions")


def shipped_dtype(ckpt) -> str:
    """The dtype most of the model's weight elements are stored in ("Q4_1" for the sample)."""
    from ..conversion import weight_dtype

    return weight_dtype(ckpt) or "?"


def _cache_folder(source: str, cache_dir: str) -> str:
    """One folder per source file version: name, size and modification time."""
    st = os.stat(source)
    key = hashlib.sha1(f"{os.path.abspath(source)}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    stem = os.path.basename(os.path.normpath(source)).removesuffix(".gguf")
    return os.path.join(cache_dir, f"{stem}-{key}")


def prepare_variants(source: str | None = None, cache_dir: str | None = None,
                     conversions: tuple[str, ...] = CONVERSIONS,
                     on_event: Event | None = None) -> list[VariantResult]:
    """The source as shipped plus GGUF conversions, converting only what is not cached yet."""
    from ..conversion import convert
    from ..opener import open as open_checkpoint
    from ..samples import sample_path

    source = os.fspath(source) if source is not None else sample_path()
    emit = on_event or (lambda _e: None)
    with open_checkpoint(source) as ckpt:
        shipped = shipped_dtype(ckpt)
        variants = [VariantResult(f"{shipped} (as shipped)", shipped, source, ckpt.total_size)]
        folder = _cache_folder(source, cache_dir or default_cache_dir())
        os.makedirs(folder, exist_ok=True)
        for dtype in conversions:
            path = os.path.join(folder, f"model.{dtype}.gguf")
            if not os.path.exists(path):
                emit({"type": "convert_start", "dtype": dtype, "path": path})

                def progress(done, total, name, dtype=dtype):
                    emit({"type": "convert_progress", "dtype": dtype, "done": done, "total": total,
                          "name": name})

                convert(ckpt, path, format="gguf", dtype=dtype, progress=progress)
            emit({"type": "convert_done", "dtype": dtype, "path": path})
            variants.append(VariantResult(dtype, dtype, path, os.path.getsize(path)))
    return variants


def compare_quantizations(source: str | None = None, prompt: str = "The capital of France is",
                          max_new_tokens: int = 24, chat: bool = False, device: str = "auto",
                          cache_dir: str | None = None, conversions: tuple[str, ...] = CONVERSIONS,
                          on_event: Event | None = None,
                          should_stop: Callable[[], bool] | None = None) -> Comparison:
    """Run `prompt` greedily on every variant; agreement is measured against F16.

    on_event receives dicts as work proceeds: convert_start / convert_progress / convert_done,
    variant_start, token (one piece of text), variant_done (the VariantResult as a dict).
    """
    from ..runtime import load_model

    emit = on_event or (lambda _e: None)
    variants = prepare_variants(source, cache_dir, conversions, emit)
    for v in variants:
        if should_stop is not None and should_stop():
            break
        emit({"type": "variant_start", "label": v.label})
        t0 = time.perf_counter()
        model = load_model(v.path, device)
        v.load_seconds = time.perf_counter() - t0

        def stream(piece, label=v.label):
            emit({"type": "token", "label": label, "text": piece})

        r = model.generate(prompt, max_new_tokens=max_new_tokens, temperature=0.0, chat=chat, stream=stream)
        v.text, v.tokens, v.decode_tps = r.text, list(r.tokens), r.decode_tps
        v.token_texts = [model.tokenizer.decode([t]) for t in r.tokens]
        v.perplexity = perplexity(model)
        del model
        emit({"type": "variant_done", "label": v.label, "result": v.to_dict()})
    reference = next((v for v in variants if v.dtype == REFERENCE and v.tokens), None) or variants[-1]
    for v in variants:
        v.agreement = token_agreement(v.tokens, reference.tokens)
    return Comparison(prompt, reference.label, variants)
