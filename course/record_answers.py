"""Run inside the notebook's kernel after its last cell: record what each live Explorer view
would answer a browser, so the static page can answer the same requests without a kernel.

For each checkpoint shown by a view it stores the Explorer's own offline-report data
(`model_explorer.widgets._static.report_data`: first pages of bytes with their spans, the
step-through, the header tree, the tensor table, the file map) plus sampled statistics of the
first tensors and exact statistics of each view's chosen tensor (when small enough), once per
checkpoint however many views show it.
"""

from __future__ import annotations

import json
import math
import sys

STATS_PER_CHECKPOINT = 24
# "Compute exact" on the page: the exact statistics of each view's chosen tensor are recorded
# when it holds at most this many values (a few hundred ms); any other answers that it needs a kernel.
EXACT_MAX_VALUES = 8_000_000


def _live_views():
    from ipywidgets.widgets.widget import _instances

    from model_explorer.widgets._base import BaseView

    return [(model_id, w) for model_id, w in list(_instances.items()) if isinstance(w, BaseView)]


def _stats(view, names: list[str], exact: bool = False) -> dict:
    out = {}
    for name in names:
        try:
            data, _ = view.answer("stats", {"name": name, "exact": exact})
        except Exception as e:  # a tensor that cannot be decoded shows its message, as live
            data = {"name": name, "error": f"{type(e).__name__}: {e}"}
        out[name] = data
    return out


def _values(view, name: str) -> int:
    info = view.checkpoint.tensors.get(name)
    return math.prod(info.shape) if info is not None else 0


def _finite(value):
    """JSON.parse rejects NaN and Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def record(path: str) -> dict:
    from model_explorer.widgets._static import report_data

    blobs: list[dict] = []
    by_checkpoint: dict[int, int] = {}
    models: dict[str, int] = {}
    for model_id, view in _live_views():
        key = id(view.checkpoint)
        if key not in by_checkpoint:
            by_checkpoint[key] = len(blobs)
            blob = report_data(view)
            first = list(view.checkpoint.tensors)[:STATS_PER_CHECKPOINT]
            blob["stats"] = _stats(view, first)
            blobs.append(blob)
        blob = blobs[by_checkpoint[key]]
        chosen = (view.selection or {}).get("tensor")
        if chosen and chosen not in blob["stats"]:
            blob["stats"].update(_stats(view, [chosen]))
        exact = blob.setdefault("exact_stats", {})
        if chosen and chosen not in exact and _values(view, chosen) <= EXACT_MAX_VALUES:
            exact.update(_stats(view, [chosen], exact=True))
        models[model_id] = by_checkpoint[key]
    data = {"models": models, "blobs": blobs}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_finite(data), f, default=str, allow_nan=False)
    return {"views": len(models), "checkpoints": len(blobs)}


if __name__ == "__main__":
    print(record(sys.argv[1]))
