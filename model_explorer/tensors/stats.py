"""Statistics and histograms of tensors, on a sample of whole blocks or streamed exactly.

Memory stays bounded: a sample holds at most `max_elements` values, and the exact mode
streams fixed-size chunks twice (moments and range first, then the histogram over that
range), so a 10 GiB tensor costs the same memory as a 10 MiB one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..records import CheckpointRecord, TensorInfo
from ..safe_text import escape_deep
from .read import (
    CHUNK_ELEMENTS,
    Plan,
    check_range,
    checked_plan,
    decode_raw,
    raw_picked,
    raw_units,
    tensor_info,
)

# A sampled "block" of a plain tensor: this many consecutive elements (GGUF and MLX tensors
# sample their own blocks and rows).
PLAIN_RUN = 1024
# Remote files: at most this many range requests for one sample.
REMOTE_READS = 64


@dataclass
class TensorStats:
    """What `Checkpoint.stats` returns; `to_dict()` is JSON-safe (no numpy types, no NaN)."""

    name: str
    dtype: str
    shape: list
    total: int
    count: int
    exact: bool
    sample: str
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    zeros: float
    nan: int
    inf: int
    hist: dict
    scales: dict | None = None
    # A tensor a cut file holds only part of: which part these values are from (tensors/partial.py).
    partial: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def json_safe(v):
    """`v` with numpy scalars as Python ones and NaN / infinity as None (JSON has neither)."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v


# -- accumulators ------------------------------------------------------------------------------

class Moments:
    """Count, NaN/Inf, zeros, range, mean and variance over chunks (shifted sums for accuracy)."""

    def __init__(self) -> None:
        self.count = self.finite = self.nan = self.inf = self.zeros = 0
        self.lo, self.hi = math.inf, -math.inf
        self.shift: float | None = None
        self.s1 = self.s2 = 0.0

    def add(self, x: np.ndarray) -> None:
        n = x.size
        if not n:
            return
        self.count += n
        self.zeros += n - int(np.count_nonzero(x))
        lo, hi = x.min(), x.max()
        if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or Inf inside: the slow path
            finite = np.isfinite(x)
            nans = int(np.count_nonzero(np.isnan(x)))
            self.nan += nans
            self.inf += n - nans - int(np.count_nonzero(finite))
            x = x[finite]
            if not x.size:
                return
            lo, hi = x.min(), x.max()
        self.finite += x.size
        self.lo, self.hi = min(self.lo, float(lo)), max(self.hi, float(hi))
        if self.shift is None:
            self.shift = float(x[:4096].mean(dtype=np.float64))
        if x.dtype == np.float32 and max(-float(lo), float(hi)) > 1e18:
            x = x.astype(np.float64)  # squares of such values overflow float32
        y = x - x.dtype.type(self.shift)
        self.s1 += float(y.sum())
        self.s2 += float(np.dot(y, y))

    @property
    def mean(self) -> float | None:
        return self.shift + self.s1 / self.finite if self.finite else None

    @property
    def std(self) -> float | None:
        if not self.finite:
            return None
        m = self.s1 / self.finite
        return math.sqrt(max(0.0, self.s2 / self.finite - m * m))

    def edges(self, bins: int) -> np.ndarray:
        lo, hi = (self.lo, self.hi) if self.finite else (0.0, 1.0)
        if lo == hi:  # one value: a unit-wide bin around it (relative when it is huge)
            half = max(0.5, abs(lo) * 1e-6)
            lo, hi = lo - half, hi + half
        return np.linspace(lo, hi, bins + 1)


class Histogram:
    """Counts of finite values in equal bins over fixed edges, chunk by chunk."""

    def __init__(self, edges: np.ndarray) -> None:
        self.edges = edges
        self.bins = len(edges) - 1
        self.counts = np.zeros(self.bins, dtype=np.int64)
        self.lo = edges[0]
        self.scale = self.bins / (edges[-1] - edges[0])

    def add(self, x: np.ndarray) -> None:
        if not x.size:
            return
        if not (np.isfinite(x.min()) and np.isfinite(x.max())):
            x = x[np.isfinite(x)]
        if x.dtype == np.float32 and (self.edges[-1] - self.edges[0] > 1e38 or self.scale > 1e38):
            x = x.astype(np.float64)  # x - lo, or the scale of a tiny range, would overflow float32
        t = (x - x.dtype.type(self.lo)) * x.dtype.type(self.scale)
        idx = t.astype(np.int32) if x.dtype == np.float32 else t.astype(np.int64)
        np.clip(idx, 0, self.bins - 1, out=idx)
        self.counts += np.bincount(idx, minlength=self.bins)[:self.bins]

    def add_weighted(self, x: np.ndarray, weights: np.ndarray) -> None:
        """Values `x` seen `weights` times each (the exact path over raw codes)."""
        keep = np.isfinite(x) & (weights > 0)
        x, weights = x[keep].astype(np.float64), weights[keep]
        # few distinct values: place each exactly as np.histogram does (last bin closed)
        idx = np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, self.bins - 1)
        self.counts += np.bincount(idx, weights=weights, minlength=self.bins)[:self.bins].astype(np.int64)

    def to_dict(self) -> dict:
        return {"edges": [float(e) for e in self.edges], "counts": [int(c) for c in self.counts]}


def _as_real(x: np.ndarray) -> np.ndarray:
    """Values as a float array the accumulators take: float32 stays, ints go to float64."""
    if x.dtype == np.float32:
        return x
    if x.dtype.kind == "c":
        return np.abs(x).astype(np.float32)
    if x.dtype.kind == "b":
        return x.astype(np.float32)
    return x.astype(np.float64)


# -- sampling -------------------------------------------------------------------------------

def _unit_group(ckpt: CheckpointRecord, plan: Plan, max_elements: int) -> int:
    """Units per sampled block: a whole GGUF block or MLX row, or a run of plain elements."""
    k = max(1, PLAIN_RUN // plan.unit_elems) if plan.unit_elems < 32 else 1
    if getattr(ckpt.byte_source(plan.info.file), "buffer", None) is None:
        k = max(k, -(-max_elements // (REMOTE_READS * plan.unit_elems)))
    return k


def _what(plan: Plan, k: int) -> str:
    if plan.unit_elems == 1 or plan.label.startswith("group"):
        return f"runs of {k * plan.unit_elems:,} elements"
    noun, _, size = plan.label.partition(" of ")
    return f"{noun}s of {int(size) * k:,}" if k > 1 else f"{noun}s of {int(size):,}"


def _collect_scales(plan: Plan, raw: np.ndarray, index) -> np.ndarray | None:
    if plan.scales is None:
        return None
    s = plan.scales(raw, index)
    return np.asarray(s, dtype=np.float32).reshape(-1)


def _sample(ckpt: CheckpointRecord, plan: Plan, max_elements: int):
    """(values, scales, description): every unit if small enough, else evenly spaced groups."""
    numel = plan.numel
    if numel <= max_elements or plan.strided is not None:
        from .read import iter_chunks

        vals, scales = [], []
        if plan.strided is not None:
            vals = [v for _, v in iter_chunks(ckpt, plan.info)]
        else:
            step = max(1, CHUNK_ELEMENTS // plan.unit_elems)
            for u in range(0, plan.n_units, step):
                u1 = min(plan.n_units, u + step)
                raw = raw_units(ckpt, plan, u, u1)
                out = decode_raw(plan, raw, range(u, u1)).reshape(-1)
                vals.append(out[:max(0, numel - u * plan.unit_elems)])
                s = _collect_scales(plan, raw, range(u, u1))
                if s is not None:
                    scales.append(s)
        values = np.concatenate(vals) if vals else np.empty(0, np.float32)
        return values, (np.concatenate(scales) if scales else None), f"all {numel:,} elements", True
    k = _unit_group(ckpt, plan, max_elements)
    n_groups = plan.n_units // k
    per_group = k * plan.unit_elems
    m = max(1, min(n_groups, max_elements // per_group))
    idx = np.unique(np.linspace(0, n_groups - 1, m).round().astype(np.int64))
    raw = raw_picked(ckpt, plan, idx, k)
    index = (idx[:, None] * k + np.arange(k)).reshape(-1)
    values = decode_raw(plan, raw, index).reshape(-1)
    scales = _collect_scales(plan, raw, index)
    desc = f"{len(idx):,} of {n_groups:,} {_what(plan, k)}, evenly spaced"
    return values, scales, desc, False


# -- public ---------------------------------------------------------------------------------

def stats(ckpt: CheckpointRecord, name: str | TensorInfo, bins: int = 64, exact: bool = False,
          max_elements: int = 1_000_000) -> TensorStats:
    """Count, range, mean, std, zero fraction, NaN/Inf counts and a histogram of one tensor.

    By default on an evenly spaced sample of whole blocks (at most `max_elements` values);
    `exact=True` streams over every element in bounded chunks. Quantized tensors also get
    a histogram of their block scales. Raises ValueError when the data cannot be decoded.
    """
    info = tensor_info(ckpt, name)
    plan = checked_plan(ckpt, info)
    if plan.strided is None:
        check_range(ckpt, plan, 0, plan.numel)  # before any allocation sized by the header
    bins = max(1, int(bins))
    if exact and plan.strided is None and plan.numel > max_elements:
        if plan.unit_elems == 1 and plan.unit_bytes <= 2:
            return _exact_by_codes(ckpt, plan, bins)
        return _exact(ckpt, plan, bins)
    values, scales, desc, complete = _sample(ckpt, plan, max_elements)
    values = _as_real(values)
    mom = Moments()
    mom.add(values)
    hist = Histogram(mom.edges(bins))
    hist.add(values)
    return _result(plan, mom, hist, desc, complete, _scale_hist(scales, bins))


def _exact(ckpt: CheckpointRecord, plan: Plan, bins: int) -> TensorStats:
    mom, smom = Moments(), Moments()
    quant = plan.scales is not None

    def chunks():
        step = max(1, CHUNK_ELEMENTS // plan.unit_elems)
        for u in range(0, plan.n_units, step):
            u1 = min(plan.n_units, u + step)
            raw = raw_units(ckpt, plan, u, u1)
            vals = decode_raw(plan, raw, range(u, u1)).reshape(-1)
            vals = _as_real(vals[:max(0, plan.numel - u * plan.unit_elems)])
            sc = _collect_scales(plan, raw, range(u, u1)) if quant else None
            yield vals, sc

    for vals, sc in chunks():
        mom.add(vals)
        if sc is not None:
            smom.add(sc)
    hist, shist = Histogram(mom.edges(bins)), Histogram(smom.edges(bins))
    for vals, sc in chunks():
        hist.add(vals)
        if sc is not None:
            shist.add(sc)
    scales = None
    if quant and smom.count:
        scales = {**shist.to_dict(), "count": smom.count}
    return _result(plan, mom, hist, f"all {plan.numel:,} elements", True, scales)


def _exact_by_codes(ckpt: CheckpointRecord, plan: Plan, bins: int) -> TensorStats:
    """1- and 2-byte dtypes: count each of the 256 / 65,536 bit patterns in one pass, then
    derive every statistic from the table of pattern -> value. Exact, and no float work per
    element beyond the counting."""
    width = plan.unit_bytes
    # A pattern's number is its bytes read little-endian, whatever the file's byte order: the
    # table below lists the same byte pairs, and the plan decodes them with the right order.
    code_dt = np.dtype(np.uint8) if width == 1 else np.dtype("<u2")
    n_codes = 1 << (8 * width)
    counts = np.zeros(n_codes, dtype=np.int64)
    step = CHUNK_ELEMENTS * 4
    for u in range(0, plan.n_units, step):
        raw = raw_units(ckpt, plan, u, min(plan.n_units, u + step))
        counts += np.bincount(raw.reshape(-1).view(code_dt), minlength=n_codes)
    table = np.frombuffer(np.arange(n_codes, dtype=code_dt).tobytes(), np.uint8).reshape(n_codes, width)
    values = _as_real(decode_raw(plan, table, range(n_codes)).reshape(-1))
    mom = Moments()
    mom.count = plan.numel
    with np.errstate(invalid="ignore"):  # signalling NaN patterns are data too
        v64 = values.astype(np.float64)
    nan, finite = np.isnan(v64), np.isfinite(v64)
    mom.nan = int(counts[nan].sum())
    mom.inf = int(counts[~finite & ~nan].sum())
    mom.zeros = int(counts[v64 == 0].sum())
    seen = finite & (counts > 0)
    mom.finite = int(counts[seen].sum())
    if mom.finite:
        v, c = v64[seen], counts[seen].astype(np.float64)
        mom.lo, mom.hi = float(v.min()), float(v.max())
        mom.shift = float((v * c).sum() / mom.finite)
        mom.s1 = 0.0
        mom.s2 = float((c * (v - mom.shift) ** 2).sum())
    hist = Histogram(mom.edges(bins))
    hist.add_weighted(values, counts.astype(np.float64))
    return _result(plan, mom, hist, f"all {plan.numel:,} elements", True, None)


def _scale_hist(scales: np.ndarray | None, bins: int) -> dict | None:
    if scales is None or not scales.size:
        return None
    m = Moments()
    m.add(scales)
    h = Histogram(m.edges(bins))
    h.add(scales)
    return {**h.to_dict(), "count": int(scales.size)}


def _result(plan: Plan, mom: Moments, hist: Histogram, desc: str, complete: bool,
            scales: dict | None) -> TensorStats:
    info = plan.info
    return TensorStats(
        name=info.name, dtype=info.label, shape=list(info.shape), total=info.numel,
        count=mom.count, exact=complete, sample=desc,
        min=mom.lo if mom.finite else None, max=mom.hi if mom.finite else None,
        mean=mom.mean, std=mom.std, zeros=mom.zeros / mom.count if mom.count else 0.0,
        nan=mom.nan, inf=mom.inf, hist=hist.to_dict(), scales=scales)


def stats_table(ckpt: CheckpointRecord, names: list[str] | None = None, bins: int = 16,
                exact: bool = False, max_elements: int = 100_000, progress: bool | None = None):
    """A pandas DataFrame with one row per tensor; a tqdm progress bar on big checkpoints."""
    import pandas as pd

    names = list(ckpt.tensors) if names is None else list(names)
    if progress is None:
        progress = len(names) > 50
    it = names
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(names, desc="tensor stats", unit="tensor")
    rows = []
    for name in it:
        info = ckpt.tensors[name]
        row = {"name": name, "dtype": info.label, "shape": "x".join(map(str, info.shape)) or "scalar",
               "numel": info.numel}
        try:
            s = stats(ckpt, name, bins=bins, exact=exact, max_elements=max_elements)
        except (ValueError, KeyError) as e:
            row["error"] = str(e)
        else:
            row.update(min=s.min, max=s.max, mean=s.mean, std=s.std, zeros=s.zeros, nan=s.nan,
                       inf=s.inf, exact=s.exact, sample=s.sample, error=None)
        rows.append(row)
    cols = ["name", "dtype", "shape", "numel", "min", "max", "mean", "std", "zeros", "nan", "inf",
            "exact", "sample", "error"]
    return pd.DataFrame(escape_deep(rows), columns=cols)  # names a file gave, made writable
