"""The engines a run can go through, one table, and the choice between them (`open_side`).

    mx.trace("bert.onnx")                                      # by format: onnxruntime
    mx.trace("bert/", engine="transformers")                   # forced
    mx.compare_runs("bert/", "bert.onnx")                      # transformers against onnxruntime
    mx.compare_runs("llama/", "llama/", b_engine="transformers")  # our decoder against transformers

| engine        | runs                                          | opened by                        |
|---------------|-----------------------------------------------|----------------------------------|
| "decoder"     | a decoder our numpy/torch decoder runs (HF folder, GGUF, MLX) | side.DecoderSide      |
| "transformers"| any HF folder transformers loads without trust_remote_code | transformers_side     |
| "onnxruntime" | an .onnx file (external data beside it)       | onnx_side.OnnxRuntimeSide        |
| "litert"      | a .tflite file                                | litert_side.LiteRTSide           |
| "llama.cpp"   | a GGUF through llama.cpp's own eval callback  | llamacpp_side.LlamaCppSide       |

A Side made by the caller (`LlamaCppSide(path, kv_cache="f16")`) runs as it is and is not closed;
a Model loaded with backend="llama.cpp" runs on llama.cpp (its GGUF, in a context of the side's
own, with the eval callback). engine=None picks by format: an .onnx file (or a folder holding exactly one model.onnx and
no config.json) -> onnxruntime, a .tflite -> litert, a GGUF -> decoder, an HF folder whose family
our decoder runs -> decoder, any other HF folder (BERT, vision models) -> transformers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .side import DecoderSide, Side, load

MAX_CONFIG = 4 * 2**20  # characters of config.json read to tell the family

DECODER, TRANSFORMERS, ONNXRUNTIME, LITERT, LLAMACPP = "decoder", "transformers", "onnxruntime", "litert", "llama.cpp"


def _decoder(source, device, stream, tokens, reference) -> Side:
    return DecoderSide(*load(source, device, stream, tokens))


def _transformers(source, device, stream, tokens, reference) -> Side:
    from .transformers_side import TransformersSide

    return TransformersSide(source, tokens)


def _onnxruntime(source, device, stream, tokens, reference) -> Side:
    from .onnx_side import OnnxRuntimeSide

    return OnnxRuntimeSide(source, reference=reference)


def _litert(source, device, stream, tokens, reference) -> Side:
    from .litert_side import LiteRTSide

    return LiteRTSide(source, reference=reference)


def _llamacpp(source, device, stream, tokens, reference) -> Side:
    from .llamacpp_side import LlamaCppSide

    if getattr(source, "is_engine", False):  # a Model on llama.cpp: its GGUF, in a context of our own
        side = LlamaCppSide(source.weights.report.gguf_path, owned=True)
        side.label = str(source.source)
        return side
    if not isinstance(source, (str, bytes, os.PathLike)):
        raise TypeError(f"engine='llama.cpp' runs a GGUF path or a Model loaded with backend='llama.cpp', "
                        f"not {type(source).__name__}")
    return LlamaCppSide(source, owned=True)


# name -> (how its Side is opened, the formats it runs)
ENGINES: dict[str, tuple[Callable[..., Side], str]] = {
    DECODER: (_decoder, "HF folders of the families our decoder runs, GGUF, MLX (numpy or torch)"),
    TRANSFORMERS: (_transformers, "any Hugging Face folder transformers loads without trust_remote_code"),
    ONNXRUNTIME: (_onnxruntime, ".onnx (external data beside it)"),
    LITERT: (_litert, ".tflite"),
    LLAMACPP: (_llamacpp, "GGUF through llama.cpp"),
}


def is_side(source) -> bool:
    """A Side made by the caller: run as it is, not closed."""
    return hasattr(source, "steps") and hasattr(source, "per_layer")


def engine_for(source) -> str:
    """The engine a source runs on when none is named (see the module docstring)."""
    if getattr(source, "is_engine", False):
        return LLAMACPP  # a Model loaded with backend="llama.cpp"
    if not isinstance(source, (str, os.PathLike)):
        return DECODER  # a loaded Model, or None (the bundled sample)
    path = os.fspath(source)
    low = path.lower()
    if low.endswith(".onnx"):
        return ONNXRUNTIME
    if low.endswith(".tflite"):
        return LITERT
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
        return DECODER if _decoder_runs(path) else TRANSFORMERS
    return DECODER


def _decoder_runs(folder: str) -> bool:
    """Whether our decoder runs this HF folder's family (else transformers does)."""
    import json

    from ..model.config import from_hf

    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            from_hf(json.loads(f.read(MAX_CONFIG)))
        return True
    except Exception:  # noqa: BLE001 - any refusal means: not a family of ours
        return False


def open_side(source, engine: str | None = None, device: str = "cpu", stream: bool | None = None,
              tokens: int = 2048, reference: Any = None) -> Side:
    """The Side that runs `source` on `engine` (None: by format). `reference`: the other side of
    a comparison, whose weights an export's graph is aligned to (align.py's weight identity)."""
    name = engine or engine_for(source)
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}: one of {', '.join(repr(k) for k in ENGINES)}")
    if is_side(source):
        return source
    side = ENGINES[name][0](source, device, stream, tokens, reference)
    if getattr(side, "engine", None) is None:
        try:
            side.engine = name  # type: ignore[misc]
        except AttributeError:
            pass
    return side
