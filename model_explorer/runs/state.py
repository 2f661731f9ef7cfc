"""What the "Compare runs" view draws: a RunDiff or a Trace as a heatmap of layers x modules (js/src/runsview.js).

    d = mx.compare_runs("model/", "model-q8_0.gguf")
    d.show()                         # RunsView: cells coloured by log10 relative L2, the verdict
                                     # (agree / drift / jump) in its colour, the first divergence
                                     # or the start of a drift outlined and explained, the
                                     # configuration differences, KLD / top-1 / perplexity
    mx.trace("model.gguf").show()    # cells coloured by absmax / median |x|; massive activations
                                     # and the first NaN/Inf marked

`runs_state(result)` is the compact summary the browser gets (no activations, no logits: a few
numbers per layer and module), the same for the standalone RunsView and for the run cell
(RunDemo's "Compare with…" and "Trace" buttons, widgets/run_jobs.py). A click on a cell sends
{"type": "runs_select", "layer", "module"}; the kernel answers with the weight tensor feeding
that module in the run's own checkpoint (side a of a comparison) and hands it to `on_select`
(the Explorer sets its selection, so table, histogram and hexdump move to its bytes).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..tensors.stats import json_safe
from .verdict import DRIFT, NOISE_REL, tokens_text

TOKENS_SHOWN = 64  # token texts sent to the browser (hover says which token a massive one sits on)
MASSIVE_LISTED = 8  # the largest massive activations listed under the map


def _name(path: str) -> str:
    return os.path.basename(os.path.normpath(str(path))) or str(path)


def _log10(m: np.ndarray, lo: float, hi: float) -> list[list[float | None]]:
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.log10(np.clip(m, lo, hi))
    return [[None if not math.isfinite(x) else round(float(x), 4) for x in row] for row in v]


def _scale(values: list[list[float | None]]) -> dict[str, float]:
    seen = [x for row in values for x in row if x is not None]
    lo, hi = (min(seen), max(seen)) if seen else (0.0, 1.0)
    return {"min": lo, "max": hi if hi > lo else lo + 1.0}


def _noise_up(values: list[list[float | None]]) -> dict[str, float]:
    """A comparison's colour scale: clear at float noise (NOISE_REL) and below, opaque red at a
    relative L2 of 1 (or the largest, when above): runs that agree leave the map blank."""
    seen = [x for row in values for x in row if x is not None]
    return {"min": math.log10(NOISE_REL), "max": max([0.0] + seen)}


def _drawn(points: list[tuple[int | None, str]], layer: int, module: str, columns) -> tuple[str | None, str]:
    """The column a mark at (layer, module) goes in, and a note when it is not the point's own:
    a point with no column (llama.cpp's kqv_out, an MoE router) is marked at the next point of
    its layer that has one, in the order the run computed them."""
    if module in columns:
        return module, ""
    after = False
    for lay, mod in points:
        after = after or (lay, mod) == (layer, module)
        if after and lay == layer and mod in columns:
            return mod, f" (at {module}, which has no column: the next point computed)"
    return None, ""


def _diff_state(d) -> dict[str, Any]:
    j = d.to_json()
    first, verdict = j["first_divergence"], j["verdict"]
    marks = []
    if first is not None and first["layer"] is not None:
        drift = first["kind"] == DRIFT
        column, note = _drawn([(r["layer"], r["module"]) for r in d.rows], first["layer"], first["module"],
                              j["modules"])
        if column is not None:
            marks.append({"layer": first["layer"], "module": column, "kind": "drift" if drift else "divergence",
                          "text": ("the drift starts here" if drift else "first divergence") + note})
    values = _log10(d.matrix("rel_l2"), 1e-9, 1e3)
    figures = {"tokens": len(d.ids), "kld": j["kld"], "top1_agreement": j["top1_agreement"],
               "perplexity": j["perplexity"]}
    if first is None:
        figures["note"] = verdict["sentence"]
    return {"kind": "diff", "title": f"{_name(d.b)} against {_name(d.a)}", "a": d.a, "b": d.b,
            "layers": j["layers"], "modules": j["modules"], "tokens": j["tokens"][:TOKENS_SHOWN],
            "metrics": j["metrics"], "color": {"label": "relative L2 (log scale)", "values": values, **_noise_up(values)},
            "cell_tensors": j["tensors_a"], "tensors_b": j["tensors"], "places_b": j["places"],
            "outer": j["outer"], "first": first, "verdict": verdict, "marks": marks, "figures": figures,
            "config": j["config_rows"], "config_where": j["config_where"], "tokenizer_mismatch": _mismatch(j["tokenizer_mismatch"]), "jump": j["jump"],
            "engine_labels": {"a": j["engine_labels"].get("a") or j["engines"][0],
                              "b": j["engine_labels"].get("b") or j["engines"][1]},
            **_engines(j)}


def _engines(j: dict[str, Any]) -> dict[str, Any]:
    """Each side's engine, and per cell what stands for the point on each side ("module -> node
    (op)"), when another engine than our decoder ran one (the view's engine line and hover)."""
    if j["engines"] == ["decoder", "decoder"]:
        return {}
    cells: list[list[str | None]] = [[None] * len(j["modules"]) for _ in j["layers"]]
    for p in j["aligned"]:
        if p["layer"] is None or p["module"] not in j["modules"] or not (0 <= p["layer"] < len(cells)):
            continue
        how = f", by {p['how']}" if p.get("how") else ""
        cells[p["layer"]][j["modules"].index(p["module"])] = (f"a: {p['a'] or '-'} · b: {p['b'] or '-'} "
                                                              f"({p['op'] or '?'}{how})")
    return {"engines": j["engines"], "aligned": cells,
            "aligned_count": sum(1 for p in j["aligned"] if p["a"] and p["b"])}


def _mismatch(m: dict[str, Any] | None) -> dict[str, Any] | None:
    """The tokenizer mismatch with its tokens as text for people (the view prints them as given)."""
    if m is None:
        return None
    return {**m, "a_text": tokens_text(m["a_tokens"]), "b_text": tokens_text(m["b_tokens"])}


def _trace_state(tr) -> dict[str, Any]:
    j = tr.to_json()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = tr.matrix("absmax") / tr.matrix("median_abs")
    values = _log10(ratio, 1.0, 1e9)
    marks, seen = [], set()
    for m in j["massive"]:
        key = (m["layer"], m["module"])
        if m["layer"] is None or key in seen:
            continue
        seen.add(key)
        marks.append({"layer": m["layer"], "module": m["module"], "kind": "massive",
                      "text": f"massive: {m['value']:.4g} at token {m['position']} {tokens_text([m['token']])} channel "
                              f"{m['channel']}, {m['ratio']:,.0f}x the median |x|"})
    first = j["first_nonfinite"]
    if first is not None:
        where = f"layer {first['layer']} {first['module']}" if first["layer"] is not None else first["module"]
        first = {**first, "sentence": f"NaN/Inf first appear at {where} ({first['nan']} NaN, {first['inf']} Inf); "
                                      f"the weight feeding it: {first['tensor']}."}
        column, note = (None, "") if first["layer"] is None else \
            _drawn([(s.layer, s.module) for s in tr.stats], first["layer"], first["module"], j["modules"])
        if column is not None:
            marks.append({"layer": first["layer"], "module": column, "kind": "nonfinite",
                          "text": f"first NaN/Inf ({first['nan']} NaN, {first['inf']} Inf){note}"})
    figures = {"tokens": len(tr.ids), "massive": len(j["massive"]), "massive_ratio": j["massive_ratio"],
               "massive_top": j["massive"][:MASSIVE_LISTED]}
    engine = "" if j["engine"] == "decoder" else f", on {j['engine']}"
    return {"kind": "trace", "title": f"trace of {_name(tr.source)} ({tr.architecture}{engine})", "a": tr.source,
            "layers": j["layers"], "modules": j["modules"], "tokens": j["tokens"][:TOKENS_SHOWN],
            "metrics": j["metrics"], "color": {"label": "absmax / median |x| (log scale)", "values": values, **_scale(values)},
            "cell_tensors": j["tensors"], "outer": j["outer"], "first": first, "marks": marks, "figures": figures,
            "engine_labels": {"a": j["engine_label"] or j["engine"]}}


def runs_state(result) -> dict[str, Any]:
    """The view's JSON-safe state of a RunDiff or a Trace (see the module docstring)."""
    # Told apart by what they hold: compare_runs and trace import this module (their show()).
    if hasattr(result, "first_divergence") and hasattr(result, "matrix"):
        return json_safe(_diff_state(result))
    if hasattr(result, "first_nonfinite") and hasattr(result, "matrix"):
        return json_safe(_trace_state(result))
    raise TypeError(f"expected a RunDiff (mx.compare_runs) or a Trace (mx.trace), not {type(result).__name__}")


def cell_tensor(state: dict[str, Any], layer: int, module: str) -> str | None:
    """The weight feeding `module` of `layer` in the run's own checkpoint (a's, for a comparison)."""
    try:
        return state["cell_tensors"][state["layers"].index(int(layer))][state["modules"].index(module)]
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def pick(widget, state: dict[str, Any], content: dict[str, Any], on_select: Callable | None) -> None:
    """A cell was clicked: name its weight, hand it to on_select, tell the browser what happened."""
    layer, module = content.get("layer"), content.get("module")
    name = cell_tensor(state, layer, module)
    note = "" if name else f"No weight of this checkpoint feeds layer {layer} {module}."
    selected = False
    if name and on_select is not None:
        try:
            on_select(name)
            selected = True
        except Exception as e:  # noqa: BLE001 - said in the view, not raised into the comm
            note = f"{name} cannot be selected: {e}"
    widget.send({"type": "runs_selected", "layer": layer, "module": module, "tensor": name, "note": note,
                 "selected": selected})
