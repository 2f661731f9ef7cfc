"""Writers: safetensors (header known from shapes alone), MLX affine, GGUF through gguf-py.
Each writes to a temporary name and renames it into place, so a failure leaves no partial file."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np

from ..ggml import Keys
from ..model.hf_defaults import with_defaults
from . import gguf_arch
from .common import ConvertError, Progress, report
from .gguf_meta import _copy_gguf_metadata
from .source import _Source, _Tensor
from .tokenizer_meta import _add_tokenizer_metadata


def _numpy_dtype(dtype: str) -> np.dtype:
    if dtype == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"F32": np.float32, "F16": np.float16}[dtype])


def write_safetensors(path: str, items: list[tuple[str, str, tuple[int, ...]]], produce,
                      metadata: dict[str, str] | None = None, progress: Progress | None = None) -> None:
    """Write a safetensors file tensor by tensor: the header is known from shapes alone.

    items: (name, dtype, shape) in output order, dtype one of F32/BF16/F16/U32;
    produce(i) returns item i's array, already in that dtype.
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    sizes = []
    for name, dtype, shape in items:
        nbytes = math.prod(shape) * (4 if dtype == "U32" else _numpy_dtype(dtype).itemsize)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        sizes.append(nbytes)
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # tensor data starts 8-byte aligned
    partial = path + ".partial"
    try:
        with open(partial, "wb") as f:
            f.write(len(raw).to_bytes(8, "little"))
            f.write(raw)
            for i, (name, _dtype, _shape) in enumerate(items):
                arr = np.ascontiguousarray(produce(i))
                if arr.nbytes != sizes[i]:
                    raise ConvertError(f"{name!r} came out as {arr.nbytes} bytes; the header "
                                       f"promised {sizes[i]}.")
                f.write(memoryview(arr.reshape(-1).view(np.uint8)))
                report(progress, i + 1, len(items), name)
        os.replace(partial, path)
    finally:
        _remove(partial)


def _remove(path: str) -> None:
    """A half-written output is deleted, so no truncated file is ever left to be loaded."""
    if os.path.exists(path):
        os.remove(path)


def _write_side_files(directory: str, config: dict | None, files: dict[str, str]) -> None:
    if config is not None:
        with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
    for name, text in files.items():
        if name == "config.json":
            continue
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)


def _dest_dir(dest: str, default_file: str) -> tuple[str, str]:
    """dest is a directory, or a file path inside one: (directory, weights file path)."""
    if dest.endswith(".safetensors"):
        directory = os.path.dirname(os.path.abspath(dest))
        os.makedirs(directory, exist_ok=True)
        return directory, dest
    os.makedirs(dest, exist_ok=True)
    return dest, os.path.join(dest, default_file)


def _to_safetensors(src: _Source, dest: str, dtype: str, progress) -> str:
    directory, path = _dest_dir(dest, "model.safetensors")
    np_dtype = _numpy_dtype(dtype)
    items = [(t.name, dtype, t.shape) for t in src.tensors]
    write_safetensors(path, items, lambda i: src.read(src.tensors[i]).astype(np_dtype),
                      {"format": "pt"}, progress)
    if src.config is not None:
        config = dict(src.config, torch_dtype={"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype])
        config.pop("dtype", None)
    else:
        config = None
    _write_side_files(directory, config, src.tokenizer_files)
    return directory



MLX_CHUNK_ROWS = 4096  # rows quantized per step: the uint32 codes of a big matrix stay small


def mlx_quantize(w: np.ndarray, bits: int, group_size: int, dtype: str = "F16"):
    """MLX affine quantization of the last axis: (packed uint32, scales, biases).

    Each group of `group_size` values is w ~ scale * q + bias with q in [0, 2**bits - 1],
    scale = (max - min) / (2**bits - 1), bias = min; codes are packed 32 // bits per uint32,
    first value in the lowest bits. Codes are computed against the stored (rounded) scale and
    bias, so that dequantizing the file gives the closest grid point.
    """
    rows = w.reshape(-1, w.shape[-1])
    n, cols = rows.shape
    np_dtype = _numpy_dtype(dtype)
    packed = np.empty((n, cols * bits // 32), np.uint32)
    scales = np.empty((n, cols // group_size), np_dtype)
    biases = np.empty((n, cols // group_size), np_dtype)
    levels = (1 << bits) - 1
    per_word = 32 // bits
    shifts = np.arange(per_word, dtype=np.uint32) * bits
    for start in range(0, n, MLX_CHUNK_ROWS):
        part = slice(start, min(n, start + MLX_CHUNK_ROWS))
        groups = rows[part].astype(np.float32).reshape(-1, cols // group_size, group_size)
        lo, hi = groups.min(axis=-1), groups.max(axis=-1)
        scales[part] = np.maximum((hi - lo) / levels, 1e-7)
        biases[part] = lo
        s32, b32 = scales[part].astype(np.float32)[..., None], biases[part].astype(np.float32)[..., None]
        q = np.clip(np.rint((groups - b32) / s32), 0, levels).astype(np.uint32)
        q = q.reshape(q.shape[0], -1, per_word) << shifts
        packed[part] = np.bitwise_or.reduce(q, axis=-1)
    lead = w.shape[:-1]
    return packed.reshape(*lead, -1), scales.reshape(*lead, -1), biases.reshape(*lead, -1)


def _mlx_quantizable(t: _Tensor, bits: int, group_size: int) -> bool:
    return (len(t.shape) == 2 and t.name.endswith(".weight") and "norm" not in t.name
            and t.shape[-1] % group_size == 0)


def _to_mlx(src: _Source, dest: str, dtype: str, bits: int, group_size: int, progress) -> str:
    directory, path = _dest_dir(dest, "model.safetensors")
    np_dtype = _numpy_dtype(dtype)
    items: list[tuple[str, str, tuple[int, ...]]] = []
    origin: list[tuple[int, int]] = []  # item -> (source tensor, part: -1 plain, 0 weight, 1 scales, 2 biases)
    for k, t in enumerate(src.tensors):
        if _mlx_quantizable(t, bits, group_size):
            base = t.name[: -len(".weight")]
            lead, cols = t.shape[:-1], t.shape[-1]
            items += [(t.name, "U32", (*lead, cols * bits // 32)),
                      (base + ".scales", dtype, (*lead, cols // group_size)),
                      (base + ".biases", dtype, (*lead, cols // group_size))]
            origin += [(k, 0), (k, 1), (k, 2)]
        else:
            items.append((t.name, dtype, t.shape))
            origin.append((k, -1))
    cache: dict[int, tuple] = {}

    def produce(i: int) -> np.ndarray:
        k, part = origin[i]
        if part == -1:
            return src.read(src.tensors[k]).astype(np_dtype)
        if k not in cache:
            cache.clear()  # one quantized tensor at a time
            cache[k] = mlx_quantize(src.read(src.tensors[k]), bits, group_size, dtype)
        return cache[k][part]

    total = len(src.tensors)

    def tensor_progress(done: int, _n: int, name: str) -> None:
        k, part = origin[done - 1]
        if part in (-1, 2):
            report(progress, k + 1, total, src.tensors[k].name)

    write_safetensors(path, items, produce, {"format": "mlx"}, tensor_progress)
    config = dict(src.config) if src.config is not None else {}
    config["quantization"] = {"group_size": group_size, "bits": bits}
    config["quantization_config"] = dict(config["quantization"])
    config["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    _write_side_files(directory, config, src.tokenizer_files)
    return directory


# Output dtype -> gguf-py's LlamaFileType member name (general.file_type).
_FILE_TYPE = {"F32": "ALL_F32", "F16": "MOSTLY_F16", "Q4_0": "MOSTLY_Q4_0", "Q8_0": "MOSTLY_Q8_0"}


def _gguf_type(name: str, shape: tuple[int, ...], dtype: str):
    """llama.cpp's choice: 1-D tensors (norms, biases) stay F32; rows that do not fit the block
    size fall back to F16."""
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q

    if len(shape) < 2 or dtype == "F32" or not math.prod(shape):  # empty: DeepSeek's k_b without a nope part
        return Q.F32
    qtype = Q[dtype]
    if shape[-1] % GGML_QUANT_SIZES[qtype][0]:
        return Q.F16
    return qtype


def _to_gguf(src: _Source, dest: str, dtype: str, progress) -> str:
    import gguf

    if dest.endswith(".gguf"):
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        path = dest
    else:
        os.makedirs(dest, exist_ok=True)
        path = os.path.join(dest, f"model.{dtype}.gguf")
    ckpt = src.ckpt
    if ckpt.format == "gguf":
        # Same names and layout: no (un)permutation, metadata and tokenizer copied as stored.
        arch = ckpt.meta(Keys.ARCHITECTURE, "llama")
        plan = src.tensors
    else:
        if src.config is None:
            raise ConvertError(f"{ckpt.source!r} has no config.json, so the GGUF hyperparameters "
                               "(heads, layers, rope) cannot be derived.")
        # A key config.json leaves out is the family's transformers default, which the GGUF must
        # state (llama.cpp has its own defaults): Gemma 2's softcaps were lost without this.
        src = dataclasses.replace(src, config=with_defaults(src.config.get("model_type"), src.config))
        arch, plan = gguf_arch.tensor_plan(src, _Tensor)
    partial = path + ".partial"
    writer = gguf.GGUFWriter(partial, arch)
    try:
        if ckpt.format == "gguf":
            _copy_gguf_metadata(writer, ckpt)
        else:
            name = (src.config.get("_name_or_path") or os.path.basename(os.path.normpath(ckpt.source)))
            gguf_arch.add_metadata(writer, src.config, str(name))
            rows = next((t.shape[0] for t in plan if t.name == "token_embd.weight"), 0)
            _add_tokenizer_metadata(writer, src.tokenizer_files, src.config, rows)
        writer.add_file_type(gguf.LlamaFileType[_FILE_TYPE[dtype]])
        if dtype in ("Q8_0", "Q4_0"):
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        types = [_gguf_type(t.name, t.shape, dtype) for t in plan]
        for t, qtype in zip(plan, types):
            nbytes = math.prod(gguf.quant_shape_to_byte_shape(t.shape, qtype)) if t.shape else 4
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for i, (t, qtype) in enumerate(zip(plan, types)):
            arr = np.ascontiguousarray(src.read(t))
            writer.write_tensor_data(gguf.quantize(arr, qtype))
            report(progress, i + 1, len(plan), t.name)
        writer.close()
        os.replace(partial, path)
    finally:
        writer.close()
        _remove(partial)
    return path
