"""A matplotlib histogram of one tensor, from `stats` (sampled by default)."""

from __future__ import annotations

import numpy as np

from ..records import CheckpointRecord
from .stats import stats


def plot(ckpt: CheckpointRecord, name: str, bins: int = 64, log: bool = False, exact: bool = False,
         scales: bool = False, ax=None, max_elements: int = 1_000_000):
    """Draw the value histogram (or, with `scales=True`, the block-scale histogram); returns the Axes.

    `log=True` puts the counts on a log scale, which shows outliers a linear scale hides.
    """
    import matplotlib.pyplot as plt

    s = stats(ckpt, name, bins=bins, exact=exact, max_elements=max_elements)
    hist = s.scales if scales else s.hist
    if hist is None:
        raise ValueError(f"Tensor {name!r} is {s.dtype}; it has no block scales to plot.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    edges, counts = np.asarray(hist["edges"]), np.asarray(hist["counts"])
    ax.stairs(counts, edges, fill=True, alpha=0.8)
    if log:
        ax.set_yscale("log")
    what = "block scales" if scales else "values"
    ax.set_title(f"{name} ({s.dtype}, {what})", fontsize=10)
    ax.set_xlabel("value")
    ax.set_ylabel("count (log)" if log else "count")
    note = s.sample + (f"; {s.nan} NaN, {s.inf} Inf" if s.nan or s.inf else "")
    ax.text(0.99, 0.97, note, transform=ax.transAxes, ha="right", va="top", fontsize=8, color="0.35")
    return ax
