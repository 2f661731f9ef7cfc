"""Which Side runs a source: the one place `mx.trace` and `mx.compare_runs` turn a source and an
engine into a run.

    engine=None         our decoder (numpy, or torch on a GPU); a Model loaded with
                        backend="llama.cpp" means llama.cpp
    engine="numpy"      our decoder, whatever it was loaded with (refused for a llama.cpp Model)
    engine="llama.cpp"  llama.cpp's own graph (llamacpp_side.py): a GGUF path, or a Model on llama.cpp

`mx.trace(src, engine=...)`, `mx.compare_runs(a, b, a_engine=..., b_engine=...)` and the CLI's
`--engine`, `--a-engine`, `--b-engine` take these names.
"""

from __future__ import annotations

from .llamacpp_side import ENGINE as LLAMACPP
from .llamacpp_side import LlamaCppSide
from .side import DecoderSide, Side, load

ENGINES = ("numpy", LLAMACPP)


def is_side(source) -> bool:
    """A Side made by the caller (LlamaCppSide(path, kv_cache="f16")): run as it is, not closed."""
    return hasattr(source, "steps") and hasattr(source, "per_layer")


def open_side(source, device: str = "cpu", stream: bool | None = None, tokens: int = 2048,
              engine: str | None = None) -> Side:
    """The Side that runs `source` on `engine` (see the module docstring)."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} (or None), not {engine!r}")
    if is_side(source):
        return source
    engine_model = getattr(source, "is_engine", False)
    if engine == LLAMACPP or (engine is None and engine_model):
        if engine_model:  # its own context, with the eval callback, over the GGUF the Model runs
            side = LlamaCppSide(source.weights.report.gguf_path, owned=True)
            side.label = str(source.source)
            return side
        if not isinstance(source, (str, bytes)) and not hasattr(source, "__fspath__"):
            raise TypeError(f"engine='llama.cpp' runs a GGUF path or a Model loaded with backend='llama.cpp', "
                            f"not {type(source).__name__}")
        return LlamaCppSide(source, owned=True)
    return DecoderSide(*load(source, device, stream, tokens))
