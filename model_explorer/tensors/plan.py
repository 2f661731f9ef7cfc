"""`Plan`: how one tensor's bytes become values, shared by the reader and every scheme's codec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records import TensorInfo


@dataclass
class Plan:
    """How one tensor's bytes become values."""

    info: TensorInfo
    unit_elems: int
    unit_bytes: int
    n_units: int
    out_dtype: np.dtype
    # decode(raw (n, unit_bytes) uint8, unit indices (a range or an array), out (n, unit_elems))
    decode: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
    # per-unit quantization scales (n,) or (n, k) as float32, for quantized tensors
    scales: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    # bytes the file really holds for the tensor (sub-byte tensors end mid-unit)
    data_bytes: int = 0
    label: str = ""  # what one unit is, for sample descriptions ("block of 256")
    strided: tuple | None = None  # PyTorch non-contiguous view: (shape, strides in bytes)
    # Hub quantization schemes whose unit (a logical row) is not one contiguous byte run of
    # the main tensor (GPTQ's output channel is a column of qweight): unit indices -> raw
    # (n, unit_bytes), and the scheme's own parts (codes, zero points, groups; schemes/common.py)
    gather: Callable[[np.ndarray | range], np.ndarray] | None = None
    parts: Any = None

    @property
    def numel(self) -> int:
        return self.info.numel

    @property
    def quantized(self) -> bool:
        return self.scales is not None
