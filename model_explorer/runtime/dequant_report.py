"""What loading a model's weights did, tensor by tensor: `DequantReport` rows (stored dtype,
bytes in the file and as float32, seconds, calls), and the layer matrices a torch backend holds
requantized for its weight-only kernels."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..units import format_bytes


@dataclass
class DequantRow:
    """One tensor's dequantization: what it was, what it became, how long it took."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    quantized_bytes: int
    dequantized_bytes: int
    seconds: float
    calls: int = 1


@dataclass
class RequantRow:
    """One layer matrix held for a weight-only kernel: requantized from the decoded values."""

    name: str  # e.g. "layer 3 qkv" (q, k and v are fused into one matrix)
    kind: str  # "int8" | "int4"
    shape: tuple[int, ...]
    held_bytes: int
    rel_error: float  # RMS(requantized - decoded) / RMS(decoded)
    seconds: float


@dataclass
class DequantReport:
    """Per-tensor dequantization rows. `mode` is "load" or "on_the_fly" (seconds then add up
    over every forward pass; `calls` counts them). `requantized`: the layer matrices a torch
    backend holds as int8/int4 for its weight-only kernels (empty for float32)."""

    mode: str = "load"
    rows: list[DequantRow] = field(default_factory=list)
    requantized: list[RequantRow] = field(default_factory=list)

    def add(self, row: DequantRow) -> None:
        self.rows.append(row)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.rows)

    @property
    def quantized_bytes(self) -> int:
        return sum(r.quantized_bytes for r in self.rows)

    @property
    def dequantized_bytes(self) -> int:
        return sum(r.dequantized_bytes for r in self.rows)

    def by_dtype(self) -> dict[str, dict[str, float]]:
        """dtype -> {"tensors", "quantized_bytes", "dequantized_bytes", "seconds"}."""
        out: dict[str, dict[str, float]] = {}
        for r in self.rows:
            d = out.setdefault(r.dtype, {"tensors": 0, "quantized_bytes": 0, "dequantized_bytes": 0,
                                         "seconds": 0.0})
            d["tensors"] += 1
            d["quantized_bytes"] += r.quantized_bytes
            d["dequantized_bytes"] += r.dequantized_bytes
            d["seconds"] += r.seconds
        return out

    def to_records(self) -> list[dict]:
        return [dict(asdict(r), shape=list(r.shape)) for r in self.rows]

    def to_dataframe(self):
        """A pandas DataFrame, one row per tensor."""
        import pandas as pd

        return pd.DataFrame(self.to_records(), columns=[f for f in DequantRow.__dataclass_fields__])

    def summary(self) -> str:
        q, d = self.quantized_bytes, self.dequantized_bytes
        ratio = f" ({d / q:.1f}x)" if q else ""
        text = (f"dequantize ({self.mode}): {len(self.rows)} tensors in {self.seconds:.2f} s; "
                f"{format_bytes(q)} stored -> {format_bytes(d)} as float32{ratio}")
        return text + self.requant_summary()

    def requant_summary(self) -> str:
        """How the layer matrices are held when not float32, and what the second rounding cost."""
        packed = [r for r in self.requantized if r.kind != "float32"]
        kept = len(self.requantized) - len(packed)
        if not packed and not kept:
            return ""
        text = ""
        if packed:
            kinds = sorted({r.kind for r in packed})
            errors = np.array([r.rel_error for r in packed])
            text = (f"; then {len(packed)} layer matrices requantized to {'/'.join(kinds)} for torch's "
                    f"weight-only kernels ({format_bytes(sum(r.held_bytes for r in packed))} held, "
                    f"{sum(r.seconds for r in packed):.2f} s): relative RMS error against the decoded "
                    f"values median {np.median(errors):.2%}, max {errors.max():.2%}")
        if kept:
            text += f"; {kept} layer matrices kept float32 (they hold NaN or Inf)"
        return text

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"<DequantReport {self.summary()}>"
