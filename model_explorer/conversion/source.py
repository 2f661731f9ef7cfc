"""The source of a conversion, seen as a llama model with Hugging Face names: which tensor
comes from where, and how its rows are reordered on the way."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import sources
from ..checkpoint import Checkpoint
from ..model.findings import MODEL_CODES
from ..model.tokenizer import side_text
from ..tensors.names import gguf_to_hf, unpermute_qk
from . import gguf_source
from .common import SAFETENSORS_DTYPES, TOKENIZER_FILES, ConvertError
from .gguf_arch import rope_heads
from .gguf_meta import config_from_gguf
from .tokenizer_meta import tokenizer_config_from_gguf, tokenizer_json_from_gguf

# Derived by llama.cpp from the rope scaling settings; transformers recomputes it from config.json.
_GGUF_ONLY = ("rope_freqs.weight",)


@dataclass
class _Tensor:
    """One output tensor: its name there, where it comes from and how to reshape its rows."""

    name: str
    source: str
    shape: tuple[int, ...]
    transform: Callable[[np.ndarray], np.ndarray] | None = None
    stack: tuple[str, ...] = ()  # several sources stacked on a new first axis (a layer's experts)
    row: int | None = None  # one row of the source's first axis (an expert of a stacked GGUF tensor)
    data: np.ndarray | None = None  # computed, not read (llama.cpp's rope_freqs)


@dataclass
class _Source:
    ckpt: Checkpoint
    config: dict | None  # HF config.json (llama), derived from GGUF metadata when needed
    tensors: list[_Tensor]  # in HF names
    tokenizer_files: dict[str, str] = field(default_factory=dict)  # file name -> text
    float_dtype: str = "F16"

    def read(self, t: _Tensor) -> np.ndarray:
        if t.data is not None:
            return t.data
        if t.stack:
            return np.stack([np.asarray(self.ckpt.read(name), dtype=np.float32) for name in t.stack])
        arr = np.asarray(self.ckpt.read(t.source, rows=t.row), dtype=np.float32)
        if arr.shape != t.shape and arr.size == math.prod(t.shape):  # not a tensor the transform splits
            arr = arr.reshape(t.shape)
        return t.transform(arr) if t.transform is not None else arr


def _check_readable(ckpt: Checkpoint) -> None:
    # Bytes the readers could not trust stop a conversion; model-level findings (a tokenizer
    # larger than the embedding, a missing head) are about the model, and convert checks its own.
    errors = [f for f in ckpt.errors if f.code not in MODEL_CODES]
    if errors:
        first = errors[0]
        raise ConvertError(f"{ckpt.source!r} has {len(errors)} error(s), so its tensors cannot "
                           f"all be trusted; the first: {first.message}")
    if not ckpt.tensors:
        raise ConvertError(f"{ckpt.source!r} holds no tensors to convert.")


def _source_dir(ckpt: Checkpoint) -> str:
    return ckpt.source if sources.isdir(ckpt.source) else sources.dirname(ckpt.source)


def weight_dtype(ckpt: Checkpoint) -> str | None:
    """The dtype most weight elements (of tensors with 2 or more dimensions) are stored in."""
    counts: dict[str, int] = {}
    for t in ckpt.tensors.values():
        if len(t.shape) >= 2:
            counts[t.label] = counts.get(t.label, 0) + t.numel
    return max(counts, key=counts.get) if counts else None


def _float_dtype(ckpt: Checkpoint) -> str:
    """The float dtype most weight elements are stored in; F16 for quantized files."""
    top = weight_dtype(ckpt)
    return top if top in SAFETENSORS_DTYPES else "F16"


def _from_gguf(ckpt: Checkpoint) -> _Source:
    if ckpt.meta("general.architecture") != "llama" or ckpt.meta("llama.expert_count"):
        cfg = gguf_source.read_config(ckpt)  # every other family the run cell reads from GGUF
        config, tensors = gguf_source.hf_config(cfg, ckpt), gguf_source.hf_tensors(cfg, ckpt, _Tensor)
        return _Source(ckpt, config, tensors, _tokenizer_files(ckpt), _float_dtype(ckpt))
    config = config_from_gguf(ckpt)
    tensors = []
    for name, info in ckpt.tensors.items():
        hf = gguf_to_hf(name)
        if hf is None:
            if name not in _GGUF_ONLY:
                warnings.warn(f"convert: {name!r} has no Hugging Face llama name; left out.", stacklevel=3)
            continue
        heads = rope_heads(hf, config)
        transform = (lambda w, h=heads: unpermute_qk(w, h)) if heads else None
        tensors.append(_Tensor(hf, name, tuple(info.shape), transform))
    return _Source(ckpt, config, tensors, _tokenizer_files(ckpt), _float_dtype(ckpt))


def _tokenizer_files(ckpt: Checkpoint) -> dict[str, str]:
    files = {}
    tok = tokenizer_json_from_gguf(ckpt)
    if tok is not None:
        files["tokenizer.json"] = tok
        files["tokenizer_config.json"] = json.dumps(tokenizer_config_from_gguf(ckpt), indent=2)
    return files


def _from_hf(ckpt: Checkpoint) -> _Source:
    config = ckpt.metadata.get("config.json")
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k not in ("quantization", "quantization_config")}
    else:
        config = None
    tensors = [_Tensor(name, name, tuple(info.shape)) for name, info in ckpt.tensors.items()]
    directory = _source_dir(ckpt)
    files = {name: text for name in TOKENIZER_FILES if (text := side_text(directory, name)[0]) is not None}
    return _Source(ckpt, config, tensors, files, _float_dtype(ckpt))


def _load_source(ckpt: Checkpoint, keep_gguf: bool = False) -> _Source:
    """The source in HF llama names, or as stored for GGUF -> GGUF (any architecture)."""
    _check_readable(ckpt)
    if ckpt.format == "gguf" and keep_gguf:
        tensors = [_Tensor(name, name, tuple(info.shape)) for name, info in ckpt.tensors.items()]
        return _Source(ckpt, None, tensors)
    if ckpt.format == "gguf":
        return _from_gguf(ckpt)
    if ckpt.format in ("safetensors", "pytorch"):
        return _from_hf(ckpt)
    raise ConvertError(f"{ckpt.source!r} is {ckpt.format}; convert reads GGUF, safetensors (plain, "
                       "sharded or MLX) and PyTorch checkpoints.")
