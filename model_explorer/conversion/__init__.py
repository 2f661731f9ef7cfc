"""`convert(source, dest, format=...)`: the same model written as safetensors, GGUF or MLX.

    mx.convert("SmolLM2.Q4_1.gguf", "smol-f32", format="safetensors", dtype="F32")
    mx.convert("smol-f32", "smol.Q8_0.gguf", format="gguf", dtype="Q8_0")
    mx.convert("smol-f32", "smol-mlx4", format="mlx", bits=4, group_size=64)

Tensors are read one at a time through `Checkpoint.read` (float32), transformed, encoded and
appended to the output, so memory stays at about one tensor. HF -> GGUF writes every family the
run cell runs as llama.cpp's convert_hf_to_gguf.py does (gguf_arch.py: architecture, keys, gguf-py's
tensor names, q/k rows interleaved for its rotary kernel where its LlamaModel converter does it,
Gemma's 1 + w norms, stacked experts); GGUF -> HF undoes all of it for the same families
(gguf_source.py; the llama layout in gguf_meta.py). GGUF -> GGUF keeps names, layout and metadata
as they are.
"""

from __future__ import annotations

import os

from ..opener import opened
from .common import (
    FORMATS,
    GGUF_DTYPES,
    MLX_BITS,
    MLX_GROUP_SIZES,
    SAFETENSORS_DTYPES,
    ConvertError,
    Progress,
)
from .source import _load_source, weight_dtype
from .tokenizer_meta import tokenizer_json_from_gguf
from .writers import _to_gguf, _to_mlx, _to_safetensors, mlx_quantize, write_safetensors

__all__ = ["convert", "ConvertError", "FORMATS", "GGUF_DTYPES", "MLX_BITS", "MLX_GROUP_SIZES",
           "SAFETENSORS_DTYPES", "Progress", "mlx_quantize", "tokenizer_json_from_gguf",
           "weight_dtype", "write_safetensors"]


def convert(source, dest: str | os.PathLike, format: str = "safetensors", dtype: str | None = None,  # noqa: A002
            bits: int = 4, group_size: int = 64, progress: Progress | None = None) -> str:
    """Write `source` (a path or an open Checkpoint) as another format; returns the path written.

    format="safetensors": dtype F32 (default), BF16 or F16, dequantized; `dest` is a directory
        (model.safetensors, config.json, tokenizer files) or a path ending in .safetensors.
    format="gguf": dtype F16 (default), Q8_0, Q4_0 or F32, quantized with gguf-py; `dest` is a
        .gguf path or a directory (model.<dtype>.gguf inside). Metadata and tokenizer are copied
        from a GGUF source, or derived from config.json / tokenizer.json.
    format="mlx": affine `bits` (4 or 8) with `group_size` (32 or 64); scales, biases and the
        unquantized tensors in `dtype` (default: the source's float dtype, F16 for quantized
        sources); `dest` is a directory.
    progress(done, total, tensor_name) is called after each tensor is written.
    """
    dest = os.fspath(dest)
    if format not in FORMATS:
        raise ConvertError(f"format must be one of {', '.join(FORMATS)}; got {format!r}.")
    if format == "safetensors":
        dtype = dtype or "F32"
        allowed = SAFETENSORS_DTYPES
    elif format == "gguf":
        dtype = dtype or "F16"
        allowed = GGUF_DTYPES
    else:
        allowed = SAFETENSORS_DTYPES
        if bits not in MLX_BITS or group_size not in MLX_GROUP_SIZES:
            raise ConvertError(f"MLX conversion takes bits in {MLX_BITS} and group_size in "
                               f"{MLX_GROUP_SIZES}; got bits={bits}, group_size={group_size}.")
    if dtype is not None and dtype not in allowed:
        raise ConvertError(f"dtype for {format} must be one of {', '.join(allowed)}; got {dtype!r}.")
    with opened(source) as ckpt:  # a caller's Checkpoint stays open
        src = _load_source(ckpt, keep_gguf=format == "gguf")
        if format == "safetensors":
            return _to_safetensors(src, dest, dtype, progress)
        if format == "gguf":
            return _to_gguf(src, dest, dtype, progress)
        return _to_mlx(src, dest, dtype or src.float_dtype, bits, group_size, progress)
