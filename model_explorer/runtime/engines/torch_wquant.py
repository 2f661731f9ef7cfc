"""Weight-only int8 / int4 matrices for torch's fused kernels (the CUDA path of the run cell).

A decode step reads every weight matrix once, so its speed is the bytes it streams. Holding the
layer matrices as int4 (groups of 32 along the input features, a bfloat16 scale and offset per
group) or int8 (one scale per output row) reads 1/7 or 1/4 of what float32 does, and torch has
fused kernels that multiply without materialising the float matrix:
`aten._weight_int4pack_mm` (tinygemm, CUDA), `aten._weight_int4pack_mm_for_cpu`,
`aten._weight_int8pack_mm`.

These kernels want their own layout, not the file's, so the matrices are *requantized* from the
values the file's codec decodes. That is a second rounding on top of the file's: every matrix
records its relative RMS error against the decoded values, and the load report says so. The
numpy reference never does this; it runs the file's values as they decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("float32", "bfloat16", "int8", "int4")
INT4_GROUP = 32  # matches GGUF's 32-value blocks; tinygemm takes 32, 64, 128 or 256
INT4_BITS_LIMIT = 5.0  # stored bits per weight at or under which "auto" holds int4
INT8_BITS_LIMIT = 9.0  # ... under which int8; above, the weights were floats: keep float32


def kind_for_bits(bits_per_weight: float | None) -> str:
    """What `weights="auto"` holds on CUDA for a model stored at `bits_per_weight`: no more
    precision than the file had (Q4_K_M, GPTQ-4, NF4 -> int4; Q8_0, FP8 -> int8; F16 -> float32)."""
    if bits_per_weight is None:
        return "float32"
    if bits_per_weight <= INT4_BITS_LIMIT:
        return "int4"
    if bits_per_weight <= INT8_BITS_LIMIT:
        return "int8"
    return "float32"


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: w ~= codes * scale[:, None], codes in [-127, 127]."""
    absmax = np.abs(w).max(axis=1)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    codes = np.rint(w / scale[:, None])
    np.clip(codes, -127, 127, out=codes)
    return codes.astype(np.int8), scale


def dequantize_int8(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return codes.astype(np.float32) * scale[:, None]


def quantize_int4(w: np.ndarray, group: int = INT4_GROUP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric int4 in groups of `group` input features, in tinygemm's convention:
    w ~= (q - 8) * scale + zero, q in [0, 15]; scale and zero (rows, in / group), rounded to
    bfloat16 first (the kernels store them so), so the codes are chosen for the stored scales."""
    import ml_dtypes

    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group)
    lo, hi = g.min(axis=2), g.max(axis=2)
    bf16 = ml_dtypes.bfloat16
    # A constant group gets a step of its own size, so the bfloat16 zero can still land on it.
    flat = np.maximum(np.abs(lo), np.float32(1e-30))
    scale = np.where(hi > lo, (hi - lo) / 15.0, flat).astype(bf16).astype(np.float32)
    zero = (lo + 8.0 * scale).astype(bf16).astype(np.float32)
    q = np.rint((g - zero[..., None]) / scale[..., None]) + 8.0
    np.clip(q, 0, 15, out=q)
    return q.astype(np.uint8).reshape(rows, cols), scale, zero


def dequantize_int4(q: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    rows, cols = q.shape
    group = cols // scale.shape[1]
    g = q.reshape(rows, cols // group, group).astype(np.float32) - 8.0
    return (g * scale[..., None] + zero[..., None]).reshape(rows, cols)


def _squared_sums(approx: np.ndarray, exact: np.ndarray) -> tuple[float, float]:
    d = approx - exact
    return (float(np.einsum("ij,ij->", d, d, dtype=np.float64)),
            float(np.einsum("ij,ij->", exact, exact, dtype=np.float64)))


def relative_rms_error(approx: np.ndarray, exact: np.ndarray) -> float:
    """RMS(approx - exact) / RMS(exact), in float64 sums (0 for an all-zero matrix)."""
    diff, norm = _squared_sums(approx, exact)
    return float(np.sqrt(diff / norm)) if norm > 0 else 0.0


CHUNK_VALUES = 1 << 22  # rows quantized at a time: float temporaries stay ~16 MiB each


def _by_rows(w: np.ndarray, quantize, dequantize) -> tuple[list[np.ndarray], float]:
    """Quantize `w` a block of rows at a time (an 8B model's fused MLP matrix is 470 MB as
    float32; its temporaries are not all made at once), with the relative RMS error of the whole."""
    rows, cols = w.shape
    step = max(8, CHUNK_VALUES // max(cols, 1) // 8 * 8)
    parts: list[list[np.ndarray]] = []
    diff = norm = 0.0
    for start in range(0, rows, step):
        block = w[start:start + step]
        out = quantize(block)
        d, n = _squared_sums(dequantize(*out), block)
        diff, norm = diff + d, norm + n
        parts.append(out)
    joined = [np.concatenate(p) for p in zip(*parts)]
    return joined, (float(np.sqrt(diff / norm)) if norm > 0 else 0.0)


def int4_inner_k_tiles(cols: int) -> int | None:
    """tinygemm tiles the input features by 16 * innerKTiles (2, 4 or 8); None: no int4 here."""
    if cols % INT4_GROUP:
        return None
    return next((t for t in (8, 4, 2) if cols % (16 * t) == 0), None)


@dataclass
class QuantMatrix:
    """One (out_features, in_features) matrix held for a fused kernel; `linear` dispatches on it."""

    kind: str  # "bfloat16" | "int8" | "int4"
    shape: tuple[int, int]
    data: Any  # torch: int8 codes, or tinygemm's packed int4 tiles
    scales: Any  # torch: per-row float32 (int8); (groups, rows, 2) scale and zero (int4); None (bfloat16)
    nbytes: int  # bytes held on the device: codes plus scales
    rel_error: float  # relative RMS error against the decoded float32 values
    group: int = 0
    ndim: int = 2


def int4_supported(torch, device: str) -> bool:
    """tinygemm runs on CUDA (sm80+ where torch builds it) and, via `_for_cpu`, on the CPU."""
    name = "_weight_int4pack_mm_for_cpu" if device == "cpu" else "_weight_int4pack_mm"
    return device in ("cpu", "cuda") and hasattr(torch.ops.aten, name)


def _bf16(block: np.ndarray) -> tuple[np.ndarray]:
    import ml_dtypes

    return (block.astype(ml_dtypes.bfloat16),)  # round to nearest even, as torch's .to(bfloat16)


def _from_bf16(q: np.ndarray) -> np.ndarray:
    return q.astype(np.float32)


def pack(torch, dev, w: np.ndarray, kind: str) -> QuantMatrix:
    """Quantize a float32 numpy matrix and lay it out for the kernel on `dev`."""
    rows, cols = w.shape
    if kind == "bfloat16":  # exact for a bfloat16 file; the error says what it rounded otherwise
        (q,), err = _by_rows(w, _bf16, _from_bf16)
        data = torch.from_numpy(q.view(np.int16)).view(torch.bfloat16).to(dev)
        return QuantMatrix("bfloat16", (rows, cols), data, None, q.nbytes, err)
    on_cpu = dev.type == "cpu"
    # tinygemm tiles the input features (16 * innerKTiles) and the rows (by 16 on the CPU; by 8
    # on CUDA, which would pad the output otherwise): a matrix that does not fit is held int8.
    if kind == "int4" and (int4_inner_k_tiles(cols) is None or rows % (16 if on_cpu else 8)):
        kind = "int8"
    if kind == "int8":
        (codes, scale), err = _by_rows(w, quantize_int8, dequantize_int8)
        data = torch.from_numpy(codes).to(dev)
        scales = torch.from_numpy(scale).to(dev)
        return QuantMatrix("int8", (rows, cols), data, scales, codes.nbytes + scale.nbytes, err)
    (q, scale, zero), err = _by_rows(w, quantize_int4, dequantize_int4)
    tiles = int4_inner_k_tiles(cols)
    # Scale and zero interleaved, groups first: (in / group, out, 2), as tinygemm reads them.
    sz = torch.from_numpy(np.ascontiguousarray(np.stack([scale, zero], axis=-1).transpose(1, 0, 2)))
    if on_cpu:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            torch.from_numpy(q.astype(np.int32)), tiles)
        sz = sz.to(torch.float32)
    else:
        # CUDA takes two codes per byte, the even input feature in the high nibble (the layout
        # `matrix_to_m16n8k16_Bint4_layout` in aten/src/ATen/native/cuda/int4mm.cu unpacks).
        pairs = (q[:, 0::2] << 4) | q[:, 1::2]
        packed = torch.ops.aten._convert_weight_to_int4pack(torch.from_numpy(pairs).to(dev), tiles)
        sz = sz.to(device=dev, dtype=torch.bfloat16)
    held = rows * cols // 2 + scale.size * 2 * (4 if on_cpu else 2)
    return QuantMatrix("int4", (rows, cols), packed, sz, held, err, INT4_GROUP)


def int8_fused(torch, dev) -> bool:
    """Whether `aten._weight_int8pack_mm` runs on `dev` (CPU always; CUDA in recent torch)."""
    try:
        x = torch.ones((1, 32), dtype=torch.float32, device=dev)
        w = torch.ones((8, 32), dtype=torch.int8, device=dev)
        s = torch.ones(8, dtype=torch.float32, device=dev)
        return bool(torch.ops.aten._weight_int8pack_mm(x, w, s).shape == (1, 8))
    except (RuntimeError, NotImplementedError):
        return False


def linear(torch, x, m: QuantMatrix, int8_kernel: bool):
    """x @ W.T for a QuantMatrix, in float32 out."""
    if m.kind == "bfloat16":  # bfloat16 inputs, float32 accumulation (cuBLAS, oneDNN)
        return torch.nn.functional.linear(x.to(torch.bfloat16), m.data).to(torch.float32)
    if m.kind == "int4":
        if x.device.type == "cpu":
            return torch.ops.aten._weight_int4pack_mm_for_cpu(x, m.data, m.group, m.scales)
        # tinygemm multiplies in bfloat16: the activations are rounded to it for this product.
        y = torch.ops.aten._weight_int4pack_mm(x.to(torch.bfloat16).contiguous(), m.data, m.group, m.scales)
        return y.to(torch.float32)
    if int8_kernel:
        return torch.ops.aten._weight_int8pack_mm(x.contiguous(), m.data, m.scales)
    # No fused int8 kernel on this device: widen per call (reads int8, still 1/4 the memory).
    return torch.nn.functional.linear(x, m.data.to(x.dtype)) * m.scales
