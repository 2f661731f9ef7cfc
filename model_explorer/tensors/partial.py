"""A tensor a cut file holds only part of: its values from the whole rows (or blocks) that are
there, said to be partial; never a value from bytes past the end of the file.

A download that stopped inside a tensor (a cut GGUF's last tensor has some of its blocks) still
shows what it has: `partial_stats` reads the units wholly before the end, as `stats` would.
"""

from __future__ import annotations

import dataclasses

from ..records import CheckpointRecord, TensorInfo
from .read import checked_plan, tensor_info
from .stats import TensorStats, stats


def present_part(ckpt: CheckpointRecord, name: str | TensorInfo) -> tuple[int, int, str] | None:
    """(units present, units in all, what they are) for a tensor the file ends inside: whole
    rows where a row is whole units, else blocks; None when every byte is there, none is, or the
    tensor is not stored as one run of units (a strided view, a gathered scheme)."""
    info = tensor_info(ckpt, name)
    plan = checked_plan(ckpt, info)
    if plan.strided is not None or plan.gather is not None or plan.unit_bytes <= 0:
        return None
    size = ckpt.byte_source(info.file).size
    if info.offset + plan.data_bytes <= size:
        return None
    have = max(0, min(plan.n_units, (size - info.offset) // plan.unit_bytes))
    cols = info.shape[-1] if len(info.shape) > 1 else 0
    if cols and cols % plan.unit_elems == 0:
        per_row = cols // plan.unit_elems
        rows = have // per_row
        if rows:
            return rows, info.numel // cols, "rows"
    noun = "values" if plan.unit_elems == 1 else "blocks"
    return (have, plan.n_units, noun) if have else None


def partial_stats(ckpt: CheckpointRecord, name: str | TensorInfo, bins: int = 64,
                  max_elements: int = 1_000_000) -> TensorStats | None:
    """Statistics of the present part of a tensor a cut file holds only part of, with
    `partial` saying which part; None when the tensor is whole or has nothing present."""
    info = tensor_info(ckpt, name)
    part = present_part(ckpt, info)
    if part is None:
        return None
    have, total, noun = part
    plan = checked_plan(ckpt, info)
    if noun == "rows":
        shape, units = (have, *info.shape[1:]), have * (info.shape[-1] // plan.unit_elems)
    else:
        shape, units = (have * plan.unit_elems,), have
    # The same bytes seen as a smaller tensor that ends where the file's whole units end.
    head = dataclasses.replace(info, shape=shape, length=units * plan.unit_bytes)
    st = stats(ckpt, head, bins=bins, exact=False, max_elements=max_elements)
    st.shape, st.total, st.exact = list(info.shape), info.numel, False
    st.partial = (f"partial: the file ends inside this tensor; the first {have:,} of {total:,} {noun} "
                  f"are there ({st.count:,} values read), the rest is not")
    return st
