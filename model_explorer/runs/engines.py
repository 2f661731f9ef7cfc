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
| "llama.cpp"   | a GGUF through llama.cpp's own eval callback  | llamacpp_side.LlamaCppSide (issue 42) |

engine=None picks by format: an .onnx file (or a folder holding exactly one model.onnx and
no config.json) -> onnxruntime, a .tflite -> litert, a GGUF -> decoder, an HF folder whose family
our decoder runs -> decoder, any other HF folder (BERT, vision models) -> transformers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..model.config import UnsupportedModel
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
    # The slot for issue 42's side: runs/llamacpp_side.py, class LlamaCppSide(model_or_path, ...).
    try:
        from .llamacpp_side import LlamaCppSide  # type: ignore[import-not-found]
    except ImportError as e:
        raise UnsupportedModel("the llama.cpp side (runs/llamacpp_side.py) is not part of this build") from e
    return LlamaCppSide(source)


# name -> (how its Side is opened, the formats it runs)
ENGINES: dict[str, tuple[Callable[..., Side], str]] = {
    DECODER: (_decoder, "HF folders of the families our decoder runs, GGUF, MLX (numpy or torch)"),
    TRANSFORMERS: (_transformers, "any Hugging Face folder transformers loads without trust_remote_code"),
    ONNXRUNTIME: (_onnxruntime, ".onnx (external data beside it)"),
    LITERT: (_litert, ".tflite"),
    LLAMACPP: (_llamacpp, "GGUF through llama.cpp"),
}


def engine_for(source) -> str:
    """The engine a source runs on when none is named (see the module docstring)."""
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
    side = ENGINES[name][0](source, device, stream, tokens, reference)
    if getattr(side, "engine", None) is None:
        try:
            side.engine = name  # type: ignore[misc]
        except AttributeError:
            pass
    return side
