"""One model across formats for `mx.diff`: a TensorFlow tf_model.h5 or a Flax flax_model.msgpack
against the PyTorch checkpoint it was converted from or to, through transformers' name and layout
conversion (model/crossformat_names.py)."""

from __future__ import annotations

import math

import numpy as np

from ..model.crossformat_names import Axes, flax_to_pt, match_names, pt_shape, tf_to_pt
from ..records import CheckpointRecord, TensorInfo
from ..tensors.read import read

# Checkpoint.format -> its names' mapping to PyTorch ones (Keras 3's layers/dense/vars/0 names
# have no PyTorch counterpart, so .keras files are compared by name as they are).
CONVERTED = ("hdf5", "flax")
MAX_WHOLE = 1 << 28  # elements of a transposed pair read whole (a 16k x 16k embedding)


def applies(a: CheckpointRecord, b: CheckpointRecord) -> bool:
    return a.format != b.format and (a.format in CONVERTED or b.format in CONVERTED)


def pt_view(ckpt: CheckpointRecord, others: set[str]) -> dict[str, tuple[str, Axes]]:
    """PyTorch name -> (the tensor's own name, the permutation to the PyTorch layout)."""
    out: dict[str, tuple[str, Axes]] = {}
    for name, t in ckpt.tensors.items():
        if ckpt.format == "hdf5":
            pt, axes = tf_to_pt(name, t.shape)
        elif ckpt.format == "flax":
            pt, axes = flax_to_pt(name, t.shape, others)
        else:
            pt, axes = name, None
        out.setdefault(pt, (name, axes))
    return out


def pairs(a: CheckpointRecord, b: CheckpointRecord) -> list[tuple[str | None, str | None, Axes, Axes]]:
    """(a's name, b's name, a's permutation, b's permutation) for every tensor of either side;
    None where one side has no counterpart."""
    view_a = pt_view(a, set(b.tensors) if b.format not in CONVERTED else set())
    view_b = pt_view(b, set(view_a))
    matched = match_names(list(view_a), view_b)
    out, used = [], set()
    for pt, (na, axes_a) in view_a.items():
        hit = matched.get(pt)
        if hit is None:
            out.append((na, None, axes_a, None))
            continue
        nb, axes_b = view_b[hit]
        used.add(hit)
        out.append((na, nb, axes_a, axes_b))
    out.extend((None, nb, None, axes_b) for pt, (nb, axes_b) in view_b.items() if pt not in used)
    return out


def shapes(ta: TensorInfo, axes_a: Axes, tb: TensorInfo, axes_b: Axes) -> tuple[list, list]:
    return list(pt_shape(ta.shape, axes_a)), list(pt_shape(tb.shape, axes_b))


def compare_permuted(ca: CheckpointRecord, ta: TensorInfo, axes_a: Axes, cb: CheckpointRecord,
                     tb: TensorInfo, axes_b: Axes) -> dict:
    """max |a - b|, relative L2 and cosine of a pair of which one side is stored transposed or
    permuted: both read whole (as diff.compare reads a flipped 2-D pair), in float64."""
    if max(ta.numel, tb.numel) > MAX_WHOLE:
        raise ValueError(f"{ta.name} has {ta.numel:,} elements, more than the {MAX_WHOLE:,} a "
                         "transposed comparison reads at once")
    xa = read(ca, ta).astype(np.float64)
    xb = read(cb, tb).astype(np.float64)
    if axes_a:
        xa = np.transpose(xa, axes_a)
    if axes_b:
        xb = np.transpose(xb, axes_b)
    xa, xb = xa.reshape(-1), xb.reshape(-1)
    d = xa - xb
    worst = float(np.max(np.abs(d))) if d.size else 0.0
    d2, a2, b2, ab = (float(np.dot(u, v)) for u, v in ((d, d), (xa, xa), (xb, xb), (xa, xb)))
    rel = math.sqrt(d2) / math.sqrt(a2) if a2 > 0 else (0.0 if d2 == 0 else math.inf)
    cos = ab / math.sqrt(a2 * b2) if a2 > 0 and b2 > 0 else (1.0 if a2 == b2 == 0 else 0.0)
    return {"max_abs_diff": worst, "rel_l2": rel, "cosine": cos}
