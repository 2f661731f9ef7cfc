"""The Layers tab's requests: the layer profile (checks/layers.py) computed in steps the browser
asks for one after another (so it can show progress and the kernel stays free between them),
then sent as one compact summary: a layers x roles matrix, labels, and the marked cells.

Nothing is computed when the Explorer opens: only when the tab is opened. The profile's
layer_outlier / layer_duplicate warnings then go to the Explorer's `layer_findings` (synced: the
Findings tab lists and counts them); its layer_unusual notes (info: off the trend, not damage, as
the first layers of healthy trained models are) stay marked in the Layers tab, so a healthy model's
Findings count stays what the Overview says. Mixed into Explorer.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from ..safe_text import escape_deep

STATS = ("norm", "std", "absmax")
MAX_REPORT_CELLS = 4096  # layers x roles a saved report carries (three statistics of each)
STEP_SECONDS = 0.25  # each step request returns after about this long, with its progress
CHUNK_SECONDS = 0.05  # one stats_table call inside a step takes about this long
MAX_CHUNK = 512
NO_LAYERS = ("No repeated blocks: no tensor name carries a layer number (model.layers.N., blk.N., "
             "h.N. ...), so there is no layer profile to draw.")


def _num(v: Any) -> float | None:
    """JSON-safe float: NaN and infinities (which JSON lacks) as None."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def too_few(layers: set[int]) -> str:
    """Why a checkpoint with fewer than two numbered blocks has no profile."""
    if not layers:
        return NO_LAYERS
    return (f"Only one numbered block (layer {min(layers)}): a layer profile compares layers with "
            "each other, so there is nothing to compare.")


def _round(v: Any, digits: int, significant: bool = False) -> float | None:
    v = _num(v)
    if v is None:
        return None
    return float(f"{v:.{digits}g}") if significant else round(v, digits)


_NUMBER = re.compile(r"((?:^|\.)(?:layers|layer|h|blocks|block|blk)\.)(\d+)(\.)")


def name_templates(names: list[list[str | None]], layers: list[int]) -> dict[str, Any]:
    """The first tensor of each cell, compactly: per role a template with "{L}" where the layer
    number goes (model.layers.{L}.self_attn.q_proj.weight), and the cells it does not give.
    A cell without tensors has no name (its count is 0)."""
    templates: list[str | None] = []
    extra: dict[str, str] = {}
    for j in range(len(names[0]) if names else 0):
        first = next((names[i][j] for i in range(len(layers)) if names[i][j]), None)
        t = None if first is None or "{L}" in first else _NUMBER.sub(r"\1{L}\3", first, count=1)
        templates.append(t if t and "{L}" in t else None)
        for i, layer in enumerate(layers):
            name = names[i][j]
            if name is not None and (templates[j] is None or templates[j].replace("{L}", str(layer)) != name):
                extra[f"{i},{j}"] = name
    return {"templates": templates, "extra": extra}


class LayerOps:
    """`_op_layers_*` handlers answered by BaseView.answer; `self.checkpoint` is the open Checkpoint."""

    _layer_names: list[str] | None = None
    _layer_parts: dict | None = None  # exact -> list of stats_table pieces computed so far

    def layer_names(self) -> list[str]:
        """The weight tensors that sit in a numbered block, in checkpoint order."""
        if self._layer_names is None:
            from ..checks.layers import layer_role

            self._layer_names = [n for n in self.checkpoint.tensors if layer_role(n)]
        return self._layer_names

    def _parts(self, exact: bool) -> list:
        if self._layer_parts is None:
            self._layer_parts = {}
        return self._layer_parts.setdefault(bool(exact), [])

    def _done(self, exact: bool) -> int:
        return sum(len(p) for p in self._parts(exact))

    def _op_layers_start(self, exact: bool = False):
        """How much there is to compute, or why there is nothing (a file without layers)."""
        from ..checks.layers import layer_role

        names = self.layer_names()
        layers = {layer_role(n)[0] for n in names}
        if len(layers) < 2:
            return {"total": 0, "note": too_few(layers)}, None
        size = sum(self.checkpoint.tensors[n].length for n in names)
        return {"total": len(names), "done": self._done(exact), "layers": len(layers),
                "bytes": size, "stats": list(STATS)}, None

    def _op_layers_step(self, exact: bool = False, seconds: float = STEP_SECONDS):
        """Compute the statistics of the next tensors for about `seconds`; say how far it got."""
        names = self.layer_names()
        parts = self._parts(exact)
        t0 = time.perf_counter()
        budget = max(0.05, min(float(seconds), 60.0))
        chunk = 1
        while self._done(exact) < len(names) and time.perf_counter() - t0 < budget:
            start = self._done(exact)
            t1 = time.perf_counter()
            parts.append(self.checkpoint.stats_table(names[start:start + chunk], exact=bool(exact),
                                                     progress=False))
            # Chunks of about CHUNK_SECONDS: small tensors in bulk (a table per tensor costs
            # more than its sampling), a big exact one alone.
            per = (time.perf_counter() - t1) / chunk
            chunk = max(1, min(MAX_CHUNK, int(CHUNK_SECONDS / max(per, 1e-6))))
        return {"done": self._done(exact), "total": len(names)}, None

    def layer_table(self, exact: bool = False):
        """The per-tensor table the profile is pivoted from (every step done first)."""
        import pandas as pd

        while self._done(exact) < len(self.layer_names()):
            self._op_layers_step(exact, seconds=60.0)
        parts = self._parts(exact)
        table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"name": []})
        infos = [self.checkpoint.tensors[n] for n in table["name"]]
        table["file"] = [t.file for t in infos]
        table["offset"] = [t.offset for t in infos]
        table["length"] = [t.length for t in infos]
        return table

    def _op_layers_profile(self, stat: str = "norm", exact: bool = False):
        from ..checks.layers import layer_findings

        stat, exact = (stat if stat in STATS else "norm"), bool(exact)
        table = self.layer_table(exact)
        found = layer_findings(table, stat)
        # The Findings tab shows the warnings of the profile last drawn, saying from what; the
        # merely unusual cells (info) are the Layers tab's marks only.
        self.layer_findings = [finding_json(f, stat, exact) for f in found if f.severity != "info"]
        return layer_summary(table, stat, exact, found), None


def finding_json(finding, stat: str, exact: bool) -> dict[str, Any]:
    """A layer finding as the Findings tab shows it: Finding.to_dict() plus where it came from
    ("origin": "layers", "statistics": "sampled" or "exact", "stat")."""
    out = finding.to_dict()
    out.update(origin="layers", statistics="exact" if exact else "sampled", stat=stat)
    return out


def layer_summary(table, stat: str, exact: bool = False, found: list | None = None) -> dict[str, Any]:
    """The heatmap's data: values, colours (relative to each role) and z-scores as layers x roles
    matrices, the first tensor of each cell, and the outlying and duplicated cells with the
    findings' messages. Row i is `layers[i]`, column j is `roles[j]`. `found`: the table's
    layer_findings for `stat`, when the caller has them already."""
    from ..checks.layers import (
        LOG_STATS,
        layer_findings,
        layer_profile,
        layer_role,
        relative_grid,
        robust_z,
        with_derived,
    )

    table = with_derived(table)
    grid = layer_profile(table, stat)
    if grid.empty:
        return {"stat": stat, "exact": exact, "layers": [], "roles": [], "note": NO_LAYERS}
    layers = [int(x) for x in grid.index]
    roles = list(grid.columns)
    row_of = {layer: i for i, layer in enumerate(layers)}
    col_of = {role: j for j, role in enumerate(roles)}
    names: list[list[str | None]] = [[None] * len(roles) for _ in layers]
    counts = [[0] * len(roles) for _ in layers]
    for name in table["name"]:
        layer, role = layer_role(str(name))
        i, j = row_of.get(layer), col_of.get(role)
        if i is None or j is None:
            continue
        counts[i][j] += 1
        if names[i][j] is None:
            names[i][j] = str(name)
    z = [[None] * len(roles) for _ in layers]
    for j, role in enumerate(roles):
        zs, _ = robust_z(grid[role].to_numpy(dtype=float), stat in LOG_STATS)
        for i in range(len(layers)):
            z[i][j] = _num(zs[i])
    shown, label = relative_grid(grid, stat)
    marks = []
    for f in layer_findings(table, stat) if found is None else found:
        i, j = row_of.get(f.extra.get("layer")), col_of.get(f.extra.get("role"))
        if i is None or j is None:
            continue
        kind = f.extra.get("kind") if f.code in ("layer_outlier", "layer_unusual") else "duplicate"
        marks.append({"row": i, "col": j, "layer": layers[i], "role": roles[j], "kind": kind,
                      "code": f.code, "severity": f.severity, "message": f.message,
                      "tensor": f.tensor, "z": _num(f.extra.get("z"))})
    return {
        "stat": stat, "exact": exact, "label": label, "layers": layers, "roles": roles,
        "values": [[_round(v, 6, significant=True) for v in row] for row in grid.to_numpy(dtype=float)],
        "shown": [[_round(v, 3) for v in row] for row in shown],  # a colour: 3 decimals are plenty
        "z": [[_round(v, 2) for v in row] for row in z], "names": name_templates(names, layers),
        "counts": counts,
        "marks": marks,
        "tensor_count": int(len(table)),
        **unread(table),
    }


def unread(table) -> dict[str, Any]:
    """{"unread": n, "unread_note": why} for the tensors whose values could not be read (a file cut
    short before them): the heatmap has no value there, and that is not "nothing stands out"."""
    errors = [e for e in (table["error"] if "error" in table else []) if isinstance(e, str) and e]
    if not errors:
        return {"unread": 0, "unread_note": None}
    n = len(table)
    head = (f"None of the {n:,} tensors' values could be read" if len(errors) >= n else
            f"{len(errors):,} of {n:,} tensors' values could not be read (hatched)")
    return {"unread": len(errors), "unread_note": f"{head}: {errors[0]}"}


def report_profiles(rows: list[dict]) -> dict[str, Any]:
    """The Layers tab of a saved report: each statistic's summary from the report's sampled
    statistics (`rows`: name, numel, min, max, mean, std, nan, inf of the layer tensors), the
    tensor names shared between them; a note instead when there are too few layers or too many
    cells for a report."""
    import pandas as pd

    from ..checks.layers import layer_role

    where = [layer_role(r["name"]) for r in rows]
    layers, roles = {lr[0] for lr in where}, {lr[1] for lr in where}
    if len(layers) < 2:
        return {"total": 0, "note": too_few(layers)}
    if len(layers) * len(roles) > MAX_REPORT_CELLS:  # judged before any of it is computed
        return {"total": 0, "note": f"{len(layers)} layers x {len(roles)} roles is more than a saved "
                "report holds: in a notebook, mx.explore(path), Layers."}
    table = pd.DataFrame(escape_deep(rows))
    first = layer_summary(table, STATS[0])
    out = {"total": len(rows), "names": first.pop("names"), "counts": first.pop("counts"),
           "summaries": {STATS[0]: first}}
    for stat in STATS[1:]:
        summary = layer_summary(table, stat)
        del summary["names"], summary["counts"]
        out["summaries"][stat] = summary
    return out
