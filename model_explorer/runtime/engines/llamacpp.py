"""The run cell on llama.cpp (through whichever Python binding of it loads: llamacpp_binding.py):
the engine of the field.

The numpy decoder (decoder.py) dequantizes every weight to float32 and streams all of them per
token; llama.cpp keeps the weights in their quantized blocks and multiplies by them directly, so
a decode step reads the file's bytes, not four to eight times as many. Only the forward pass
moves here: tokenisation, the chat template and sampling stay ours, so greedy decoding gives the
same tokens as the numpy path wherever the logits agree.

llama.cpp holds the KV cache itself, for one sequence at a time: a `LlamaCppCache` is a position
counter, and starting a new one rewinds the engine.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from ... import sources
from ..weights import DequantReport
from . import llamacpp_binding

ENGINE = "llama.cpp"
# Weights llama.cpp reads when a safetensors or MLX source is converted for it.
CONVERT_DTYPE = "Q8_0"


def installed() -> bool:
    """Whether a llama.cpp binding is installed and its library loads on this system."""
    return llamacpp_binding.find() is not None


def missing() -> str:
    """What to install, and why an installed binding did not do (for refusals and offers)."""
    why = "".join(f" ({p})" for p in llamacpp_binding.problems())
    return f"pip install 'checkpoint-model-explorer[llamacpp]'{why}"


def supports(arch) -> bool:
    """Whether llama.cpp runs GGUF architecture `arch` (gguf-py's list of llama.cpp's; without
    gguf-py, any named one: llama.cpp itself says no when it cannot)."""
    try:
        from gguf import MODEL_ARCH_NAMES
    except ImportError:  # pragma: no cover - gguf-py is a dependency
        return isinstance(arch, str)
    return arch in MODEL_ARCH_NAMES.values() and arch != "clip"


def offer(arch) -> str:
    """What a llama.cpp binding would add for a GGUF the numpy decoder refuses (appended to the refusal)."""
    if not supports(arch):
        return ""
    if installed():
        return f" llama.cpp runs {arch!r}: load_model(path) (device='auto') or backend='llama.cpp' hands it there."
    return (f" llama.cpp runs {arch!r}: with a llama.cpp binding installed ({missing()}), "
            "load_model(path) hands such a GGUF to llama.cpp.")


def cached_gguf(path: str, cache_dir: str | None = None) -> tuple[str, bool]:
    """The GGUF llama.cpp runs for `path`, and whether it had to be converted just now.

    A GGUF runs as it is. Anything else is converted once (`mx.convert`, Q8_0) into `cache_dir`
    (default ~/.cache/model_explorer/gguf), keyed by the source's path, size and mtime.
    """
    if path.endswith(".gguf") and not sources.isdir(path):
        return path, False
    from ...conversion import convert

    stat = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "model_explorer", "gguf")
    os.makedirs(folder, exist_ok=True)
    dest = os.path.join(folder, f"{os.path.basename(os.path.abspath(path))}-{key}.{CONVERT_DTYPE}.gguf")
    if os.path.exists(dest):
        return dest, False
    return convert(path, dest, format="gguf", dtype=CONVERT_DTYPE), True


class EngineReport(DequantReport):
    """Nothing is dequantized ahead of time: llama.cpp multiplies by the stored blocks."""

    def __init__(self, gguf_path: str, converted: bool) -> None:
        super().__init__(mode="kept quantized (llama.cpp)")
        self.gguf_path, self.converted, self.file_bytes = gguf_path, converted, os.path.getsize(gguf_path)

    def summary(self) -> str:
        how = "converted to GGUF for it" if self.converted else "as stored"
        return (f"llama.cpp reads the weights quantized: {self.file_bytes / 2**20:.0f} MiB GGUF "
                f"({how}: {self.gguf_path})")


class EngineWeights:
    """What `Model` asks of its weights when llama.cpp holds them."""

    def __init__(self, report: EngineReport) -> None:
        self.report = report
        self.ckpt = _Closed()

    def resident_bytes(self) -> int:
        return self.report.file_bytes


class _Closed:
    def close(self) -> None:
        pass


@dataclass
class LlamaCppCache:
    """Positions llama.cpp holds for the current sequence (its KV cache lives in the engine)."""

    capacity: int
    length: int = 0


class LlamaCppEngine:
    """A llama.cpp context that plays both parts the numpy path splits: the backend (device,
    arrays out as numpy) and the decoder (`new_cache`, `forward`)."""

    name = "llama.cpp"
    device = "cpu"

    def __init__(self, gguf_path: str, n_ctx: int = 2048, threads: int | None = None) -> None:
        self.threads = threads or llamacpp_binding.llama_threads()
        self.session = llamacpp_binding.open_session(gguf_path, n_ctx, self.threads)
        self.n_ctx = n_ctx
        self.n_vocab = self.session.n_vocab
        self._live: LlamaCppCache | None = None

    # -- the backend part --------------------------------------------------------------------

    @property
    def device_name(self) -> str:
        return f"cpu ({self.session.label}, {self.threads} threads)"

    def to_numpy(self, x) -> np.ndarray:
        return x

    def synchronize(self) -> None:
        pass

    def memory_peak(self) -> int | None:
        return None

    def reset_memory_peak(self) -> None:
        pass

    # -- the decoder part --------------------------------------------------------------------

    def new_cache(self, capacity: int) -> LlamaCppCache:
        if capacity > self.n_ctx:
            raise ValueError(f"llama.cpp was started with a context of {self.n_ctx} tokens; "
                             f"{capacity} were asked for (load_model(..., context=N) sets it).")
        return LlamaCppCache(capacity)

    def forward(self, token_ids, cache: LlamaCppCache, last_only: bool = False) -> np.ndarray:
        """Logits for `token_ids` after the `cache.length` positions before them."""
        ids = [int(i) for i in token_ids]
        if cache.length + len(ids) > self.n_ctx:
            raise ValueError(f"the sequence would reach {cache.length + len(ids)} tokens; the "
                             f"llama.cpp context holds {self.n_ctx}.")
        if self._live is not cache:
            if cache.length:
                raise ValueError("llama.cpp holds one sequence at a time; this cache's earlier "
                                 "positions were evicted by another sequence.")
            self._live = cache
        # a cache shortened since (a rewound generation) drops the positions after it
        out = self.session.decode(ids, cache.length, all_logits=not last_only)
        cache.length += len(ids)
        return out

    def close(self) -> None:
        session, self.session = getattr(self, "session", None), None
        if session is not None:
            session.close()
