"""The layer profile: per-tensor statistics pivoted to layers x tensor roles, with outliers.

A transformer repeats one block N times, so each role (q, k, v, o, gate, up, down, norms,
experts...) has one value per layer and those values follow a smooth trend with depth. A layer
that was zeroed, blew up, was copied over another or swapped with one breaks that trend. Each
cell is compared with a robust line fitted through its role's neighbouring layers (the layer
itself left out); the residual, in units of the role's median absolute residual, is a robust
z-score. Identical statistics in two layers of one role flag a duplicated layer.

Trained models are not smooth: the first and last layers, and some in between, legitimately sit
off the trend (SmolLM2's layer 0 norms are 2-4x below every other layer's, MiniLM's layer 0 o
has 3x the absmax of the others, Gemma 3's norm weights span 13x across layers). So an off-trend
cell is only `layer_unusual` (info, with the numbers); a `layer_outlier` warning needs evidence
of damage: a zeroed tensor, NaN/Inf, or a value beyond every other layer of its role by
DAMAGE_FACTOR (NORM_DAMAGE_FACTOR for norm weights, whose scale varies most in trained models;
twice either for absmax, one element's extreme). Calibrated on SmolLM2-135M, all-MiniLM-L6-v2
and Gemma 3 270M (tests/audit/test_layers_real.py): the largest healthy cell lies 2.9x
beyond the other layers (4.2x for a norm), against 8x (32x) for damage. Copies are
`layer_duplicate` warnings.

Input is any per-tensor table with a `name` column (`stats_table`, `mx.scan`, an audit's deep
table); the statistics used are `norm`, `std`, `absmax`, `mean_abs` or `mean`.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from typing import Any

import numpy as np

from ..spans import Finding

# Layer prefixes: Hugging Face (Llama, Mistral, Qwen, DeepSeek...), BERT/DistilBERT, GPT-2/Falcon, GGUF.
_LAYER = re.compile(r"^(?:.*\.)?(?:layers|layer|h|blocks|block|blk)\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"(?:^|\.)experts\.(\d+)\.")
# The tail of a tensor name after its layer prefix -> role. Order matters: first match wins.
_ROLES: list[tuple[str, re.Pattern]] = [(role, re.compile(p)) for role, p in [
    ("shared", r"shared_experts?\.|ffn_(?:gate|up|down)_shexp"),
    ("router", r"mlp\.gate\.weight$|ffn_gate_inp|router|block_sparse_moe\.gate\.weight$"),
    ("experts", r"experts\.|_exps\."),
    ("q_norm", r"q_norm|attn_q_norm|q_a_layernorm"),
    ("k_norm", r"k_norm|attn_k_norm|kv_a_layernorm"),
    ("post_attn_norm", r"post_attention_norm\b"),  # Gemma 2/3 GGUF (HF's post_attention_layernorm is ffn_norm)
    ("post_ffn_norm", r"post_ffw_norm|post_feedforward_layernorm"),
    ("attn_norm", r"input_layernorm|attn_norm|ln_1|ln_attn|norm1\b|attention\.output\.LayerNorm|sa_layer_norm"),
    ("ffn_norm", r"post_attention_layernorm|ffn_norm|ln_2|ln_mlp|norm2\b|pre_feedforward_layernorm"
                 r"|^output\.LayerNorm|output_layer_norm"),
    ("q_a", r"q_a_proj|attn_q_a\b"),
    ("q_b", r"q_b_proj|attn_q_b\b"),
    ("kv_a", r"kv_a_proj|attn_kv_a"),
    ("kv_b", r"kv_b_proj|attn_kv_b"),
    ("qkv", r"qkv_proj|attn_qkv|c_attn|query_key_value"),
    ("q", r"q_proj|attn_q\b|\.query\b|wq\b|q_lin\b"),
    ("k", r"k_proj|attn_k\b|\.key\b|wk\b|k_lin\b"),
    ("v", r"v_proj|attn_v\b|\.value\b|wv\b|v_lin\b"),
    ("o", r"o_proj|attn_output|out_proj|attn\.c_proj|attn\.dense|wo\b|attention\.output\.dense|out_lin\b"),
    ("gate_up", r"gate_up_proj"),
    ("gate", r"gate_proj|ffn_gate\b|w1\b"),
    ("up", r"up_proj|ffn_up\b|w3\b|c_fc|dense_h_to_4h|intermediate\.dense|ffn\.lin1\b"),
    ("down", r"down_proj|ffn_down\b|w2\b|dense_4h_to_h|mlp\.c_proj|^output\.dense|ffn\.lin2\b"),
]]
ROLE_ORDER = [r for r, _ in _ROLES]
# Statistics that scale multiplicatively with depth are compared in log space.
LOG_STATS = {"norm", "std", "absmax", "mean_abs", "rms"}
Z_LIMIT = 6.0  # |robust z| beyond this is an outlier
REL_FLOOR = 0.02  # a residual spread below 2% is treated as 2%, so a flat trend is not hair-trigger
WINDOW = 3  # neighbouring layers on each side the trend is fitted through
DAMAGE_FACTOR = 8.0  # beyond every other layer of the role by this: damage, not an unusual layer
NORM_DAMAGE_FACTOR = 32.0  # norm weights (RMSNorm/LayerNorm scales): layer 0's are often tiny
ABSMAX_ALLOWANCE = 2.0  # absmax is one element: outlier features make it heavy-tailed
NORM_ROLES = {"attn_norm", "ffn_norm", "q_norm", "k_norm", "post_attn_norm", "post_ffn_norm"}


# TensorFlow and Flax name a tensor by its path: the last part says weight or bias.
_PATH_LEAVES = {"kernel": "weight", "gamma": "weight", "scale": "weight", "embedding": "weight",
                "embeddings": "weight", "beta": "bias"}


def _dotted(name: str) -> str:
    """tf_model.h5's ".../layer_._3/attention/self/query/kernel:0" and Flax's
    ".../layer/3/attention/self/query/kernel" in PyTorch's dotted form (".layer.3...query.weight")."""
    parts = [p for p in name.replace(":0", "").replace("_._", "/").split("/") if p]
    if parts:
        parts[-1] = _PATH_LEAVES.get(parts[-1], parts[-1])
    return ".".join(parts)


@functools.lru_cache(maxsize=1 << 18)  # a profile reads each name several times; 90,000-tensor files exist
def layer_role(name: str) -> tuple[int, str] | None:
    """(layer, role) of a weight tensor, or None for biases and tensors outside the blocks.
    TensorFlow and Flax path names are read as their PyTorch counterparts."""
    if "/" in name:
        name = _dotted(name)
    m = _LAYER.match(name)
    if not m or name.endswith(".bias") or ".bias." in name:
        return None
    tail = m[2]
    for role, pat in _ROLES:
        if pat.search(tail):
            return int(m[1]), role
    return None


def _as_table(source: Any, stat: str):
    """A per-tensor DataFrame from a table, or the sampled stats_table of an open checkpoint
    (paths are opened one floor up: `mx.layer_profile` & co. in opener.py)."""
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        table = source
    elif hasattr(source, "stats_table"):
        ckpt = source
        names = [n for n in ckpt.tensors if layer_role(n)]
        table = ckpt.stats_table(names, progress=False)
        table["file"] = [ckpt.tensors[n].file for n in names]
        table["offset"] = [ckpt.tensors[n].offset for n in names]
        table["length"] = [ckpt.tensors[n].length for n in names]
    else:
        raise TypeError(f"expected a per-tensor DataFrame or an open Checkpoint, not {type(source).__name__}")
    return with_derived(table)


def with_derived(table):
    """Add `norm`, `rms` and `absmax` where a table has only moments (stats_table's columns)."""
    table = table.copy()
    if {"mean", "std"} <= set(table.columns):
        mean = table["mean"].astype(float)
        std = table["std"].astype(float)
        count = table["numel"].astype(float) if "numel" in table else 1.0
        for c in ("nan", "inf"):
            if c in table:
                count = count - table[c].fillna(0).astype(float)
        rms = np.sqrt(std ** 2 + mean ** 2)
        if "rms" not in table:
            table["rms"] = rms
        if "norm" not in table:
            table["norm"] = rms * np.sqrt(count)
    if "absmax" not in table and {"min", "max"} <= set(table.columns):
        table["absmax"] = np.maximum(table["min"].astype(float).abs(), table["max"].astype(float).abs())
    return table


def _combine(stat: str, values: np.ndarray) -> float:
    """One cell from several tensors (the experts of a layer): norms add in quadrature."""
    values = values[np.isfinite(values)]
    if not values.size:
        return math.nan
    if stat == "norm":
        return float(np.sqrt(np.sum(values ** 2)))
    if stat == "absmax":
        return float(values.max())
    return float(values.mean())


def layer_profile(source: Any, stat: str = "norm"):
    """DataFrame layers x roles of `stat` (rows: layer numbers, columns: roles present)."""
    import pandas as pd

    table = _as_table(source, stat)
    if stat not in table:
        raise ValueError(f"The table has no {stat!r} column (it has {list(table.columns)}).")
    cells: dict[tuple[int, str], list[float]] = {}
    for name, value in zip(table["name"], table[stat]):
        lr = layer_role(str(name))
        if lr is not None:
            cells.setdefault(lr, []).append(float(value) if value is not None else math.nan)
    if not cells:
        return pd.DataFrame()
    layers = sorted({lr[0] for lr in cells})
    roles = [r for r in ROLE_ORDER if any(lr[1] == r for lr in cells)]
    row = {layer: i for i, layer in enumerate(layers)}
    col = {role: j for j, role in enumerate(roles)}
    values = np.full((len(layers), len(roles)), math.nan)
    for (layer, role), vals in cells.items():  # into numpy: a pandas .loc per cell costs ~0.2 ms
        values[row[layer], col[role]] = _combine(stat, np.asarray(vals, dtype=float))
    return pd.DataFrame(values, index=pd.Index(layers, name="layer"), columns=roles)


@functools.lru_cache(maxsize=16)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, 1)


def _line_at(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    """Theil-Sen line through (xs, ys) evaluated at x: robust to an odd point among them."""
    if len(xs) == 1:
        return float(ys[0])
    i, j = _pairs(len(xs))
    slope = float(np.median((ys[j] - ys[i]) / (xs[j] - xs[i])))
    intercept = float(np.median(ys - slope * xs))
    return intercept + slope * x


def robust_z(column: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray]:
    """(z-scores, kinds) of one role's values over layers; kind "zeroed" where a layer is 0 and
    the others are not (a log-space z-score cannot express it)."""
    v = np.asarray(column, dtype=float)
    n = len(v)
    z = np.zeros(n)
    kinds = np.array([""] * n, dtype=object)
    ok = np.isfinite(v)
    if log:
        zero = ok & (v <= 0)
        if zero.sum() < ok.sum() / 2:  # zeros are the exception, not the pattern
            kinds[zero] = "zeroed"
            z[zero] = -math.inf
        ok &= v > 0
        v = np.where(ok, np.log(np.where(ok, v, 1.0)), math.nan)
    idx = np.flatnonzero(ok)
    if len(idx) < 4:
        return z, kinds
    resid = np.zeros(n)
    for k, i in enumerate(idx):
        others = np.delete(idx, k)  # the 2*WINDOW nearest other layers (one-sided at the ends)
        nb = np.sort(others[np.argsort(np.abs(others - i), kind="stable")[:2 * WINDOW]])
        resid[i] = v[i] - _line_at(nb.astype(float), v[nb], float(i))
    med = np.median(resid[idx])
    mad = 1.4826 * np.median(np.abs(resid[idx] - med))
    floor = REL_FLOOR if log else REL_FLOOR * max(abs(float(np.median(v[idx]))), 1e-12)
    scale = max(mad, floor)
    z[idx] = (resid[idx] - med) / scale
    big = np.abs(z) > Z_LIMIT
    kinds[big & (z > 0) & (kinds == "")] = "high"
    kinds[big & (z < 0) & (kinds == "")] = "low"
    return z, kinds


def beyond(col: np.ndarray, i: int, factor: float = math.inf) -> float:
    """How many times cell i lies beyond the range of its role's other layers: above their max
    (value / max) or below their min (min / value); 1 or less inside it. Other layers more than
    `factor` from the role's median are left out of that range (two exploded layers must not
    hide each other). NaN with fewer than 3 other layers to compare with, inf for a zero."""
    v = np.asarray(col, dtype=float)
    ok = np.isfinite(v) & (v > 0)
    ref = ok.copy()
    ref[i] = False
    if ok.sum() >= 3:
        med = float(np.median(v[ok]))
        clean = ref & (v <= factor * med) & (v * factor >= med)
        if clean.sum() >= 3:
            ref = clean
    if ref.sum() < 3 or not np.isfinite(v[i]):
        return math.nan
    if v[i] <= 0:
        return math.inf
    return float(max(v[i] / v[ref].max(), v[ref].min() / v[i]))


def damage_factor(role: str, stat: str) -> float:
    """How far beyond every other layer of its role a cell must lie to be damage."""
    factor = NORM_DAMAGE_FACTOR if role in NORM_ROLES else DAMAGE_FACTOR
    return factor * (ABSMAX_ALLOWANCE if stat == "absmax" else 1.0)


def layer_outliers(source: Any, stat: str = "norm"):
    """DataFrame of the cells off their role's trend (|robust z| > Z_LIMIT) or far beyond its
    other layers: layer, role, value, z, kind (high, low, zeroed), `beyond` (times beyond the
    range of the role's other layers, 1 or less inside it) and `damage` (True: zeroed, or beyond
    the damage factor, a warning; False: merely unusual, info). Damage needs no z-score: with few
    layers, or a role whose layers spread widely, a 100x layer can sit within 6 MADs of the trend."""
    import pandas as pd

    grid = layer_profile(source, stat)
    rows = []
    log = stat in LOG_STATS
    for role in grid.columns:
        col = grid[role].to_numpy(dtype=float)
        z, kinds = robust_z(col, log)
        factor = damage_factor(role, stat)
        for i, layer in enumerate(grid.index):
            ratio = beyond(col, i, factor) if log else math.nan
            kind = kinds[i]
            if not kind and ratio > factor:
                kind = "high" if col[i] > np.nanmedian(col) else "low"
            if kind:
                rows.append({"layer": int(layer), "role": role, "value": col[i], "z": float(z[i]),
                             "kind": kind, "beyond": ratio,
                             "damage": bool(kind == "zeroed" or ratio > factor)})
    return pd.DataFrame(rows, columns=["layer", "role", "value", "z", "kind", "beyond", "damage"])


def _fingerprints(table) -> dict[tuple, list[tuple[int, str, str]]]:
    """Tensors of one role whose statistics agree exactly: candidates for a copied layer."""
    cols = [c for c in ("min", "max", "mean", "std", "mean_abs", "absmax") if c in table]
    groups: dict[tuple, list[tuple[int, str, str]]] = {}
    # Only rows whose statistics occur more than once can be copies: hashing finds them at once.
    twice = table[table.duplicated(subset=cols, keep=False)] if cols else table.iloc[:0]
    for rec in twice[["name", *cols]].itertuples(index=False):
        lr = layer_role(str(rec[0]))
        vals = tuple(rec[1:])
        if lr is None or any(v is None or not np.isfinite(v) for v in vals) or not any(vals):
            continue  # an all-zero tensor is not a copy of another all-zero one
        if "min" in cols and "max" in cols and vals[cols.index("min")] == vals[cols.index("max")]:
            continue  # nor is a constant one (norms still at their initial ones) a copy
        groups.setdefault((lr[1], *vals), []).append((lr[0], lr[1], str(rec[0])))
    return {k: v for k, v in groups.items() if len({x[0] for x in v}) > 1}


def _non_finite(table) -> list[tuple[str, int]]:
    """(name, count) of the layer tensors whose statistics counted NaN or Inf values."""
    cols = [c for c in ("nan", "inf") if c in table]
    if not cols:
        return []
    bad = table[cols].fillna(0).astype(float).sum(axis=1)
    return [(str(n), int(b)) for n, b in zip(table["name"], bad) if b > 0 and layer_role(str(n))]


def layer_findings(source: Any, stat: str = "norm") -> list[Finding]:
    """Findings for damaged, unusual and duplicated layers (layer_outlier, layer_unusual, layer_duplicate)."""
    table = _as_table(source, stat)
    where = {str(n): i for i, n in enumerate(table["name"])}  # the row of each name
    out: list[Finding] = []

    def loc(name: str) -> dict:
        i = where.get(name)
        r = {} if i is None else table.iloc[i]
        off, ln = r.get("offset"), r.get("length")
        return {"offset": None if off is None or off != off else int(off),
                "length": None if ln is None or ln != ln else int(ln),
                "file": r.get("file") if isinstance(r.get("file"), str) else None}

    tensors_of: dict[tuple[int, str], list[str]] = {}
    for name in where:
        lr = layer_role(name)
        if lr is not None:
            tensors_of.setdefault(lr, []).append(name)
    if stat in table:
        grid = layer_profile(table, stat)
        for o in layer_outliers(table, stat).to_dict("records"):
            names = tensors_of.get((o["layer"], o["role"]), [])
            first = names[0] if names else None
            col = grid[o["role"]].drop(o["layer"]).dropna()
            typical = float(col.median()) if len(col) else math.nan
            span = f"{col.min():.4g} to {col.max():.4g}" if len(col) else "none"
            what = {"zeroed": "is zero, against", "high": "is far above", "low": "is far below"}[o["kind"]]
            z = "" if o["kind"] == "zeroed" else f" (robust z = {o['z']:+.1f})"
            head = (f"Layer {o['layer']} {o['role']}: {stat} = {o['value']:.4g} {what} the trend of the "
                    f"other layers' {o['role']} (median {typical:.4g}, range {span}){z}")
            extra = {"layer": o["layer"], "role": o["role"], "stat": stat, "value": o["value"],
                     "z": o["z"], "kind": o["kind"], "beyond": o["beyond"]}
            at = loc(first) if first else {}
            factor = damage_factor(o["role"], stat)
            if o["damage"]:
                why = ("all zeros where the other layers are not" if o["kind"] == "zeroed" else
                       f"{o['beyond']:.3g}x beyond every other layer (damage: over {factor:g}x)")
                out.append(Finding.of("layer_outlier", f"{head}: {why}, a zeroed, exploded or "
                                      "damaged layer.", tensor=first, extra=extra, **at))
            else:
                inside = not o["beyond"] > 1  # NaN (a statistic that is not a scale) reads as inside
                why = ("inside the other layers' range" if inside else
                       f"{o['beyond']:.3g}x beyond the other layers' range (damage would be over {factor:g}x)")
                out.append(Finding.of("layer_unusual", f"{head}; {why}. Trained models show this "
                                      "(their first and last layers most): unusual, not evidence of damage.",
                                      tensor=first, extra=extra, **at))
    for name, bad in _non_finite(table):
        lr = layer_role(name)
        out.append(Finding.of("layer_outlier", f"Layer {lr[0]} {lr[1]}: {name!r} holds {bad} "
                              "NaN or infinite value(s) (sampled statistics can miss some): a damaged layer.",
                              tensor=name, extra={"layer": lr[0], "role": lr[1], "stat": stat,
                                               "value": math.nan, "z": math.nan, "kind": "nonfinite",
                                               "beyond": math.nan},
                              **loc(name)))
    for members in _fingerprints(table).values():
        members = sorted(members)
        a = members[0]
        for b in members[1:]:
            out.append(Finding.of(
                "layer_duplicate",
                f"{b[2]!r} (layer {b[0]}) has exactly the statistics of {a[2]!r} (layer {a[0]}): "
                "one layer looks copied over the other.", tensor=b[2],
                extra={"layer": b[0], "role": b[1], "same_as": a[2]}, **loc(b[2])))
    return out


def relative_grid(grid, stat: str) -> tuple[np.ndarray, str]:
    """What a heatmap colours: each cell relative to its role, clipped to [-4, 4] (NaN where the
    cell has no value). Log statistics as log2(value / role median), a zero as -4; the others as
    (value - role median) / role spread. Returns (matrix, a label saying which)."""
    vals = grid.to_numpy(dtype=float)
    log = stat in LOG_STATS
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is a column of NaN
        if log:
            med = np.nanmedian(np.where(vals > 0, vals, np.nan), axis=0)
            shown = np.log2(vals / med)
        else:
            spread = np.nanstd(vals, 0)
            shown = (vals - np.nanmedian(vals, 0)) / np.where(spread > 0, spread, 1.0)
    shown = np.where(np.isneginf(shown), -4.0, np.where(np.isposinf(shown), 4.0, shown))
    label = "log2 of value / role median" if log else "z within role"
    return np.clip(shown, -4, 4), label


def plot_layers(source: Any, stat: str = "norm", ax=None, mark: bool = True):
    """A heatmap of the layer profile: each role's column relative to its median (log2), outliers
    boxed in red and duplicates in blue. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    table = _as_table(source, stat)
    grid = layer_profile(table, stat)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 + 0.55 * max(1, grid.shape[1]), 1.2 + 0.22 * max(1, len(grid))))
    if grid.empty:
        ax.set_title(f"no layer tensors to profile by {stat}")
        return ax
    shown, label = relative_grid(grid, stat)
    shown = np.nan_to_num(shown, nan=0.0)
    im = ax.imshow(shown, aspect="auto", cmap="RdBu_r", vmin=-4, vmax=4, interpolation="nearest")
    ax.set_xticks(range(grid.shape[1]), list(grid.columns), rotation=60, ha="right")
    step = max(1, len(grid) // 40)
    ax.set_yticks(range(0, len(grid), step), [str(x) for x in grid.index[::step]])
    ax.set_ylabel("layer")
    ax.set_title(f"{stat} by layer and role ({label})")
    ax.figure.colorbar(im, ax=ax, fraction=0.04)
    if mark:
        rows = {layer: i for i, layer in enumerate(grid.index)}
        cols = {role: j for j, role in enumerate(grid.columns)}
        for o in layer_outliers(table, stat).to_dict("records"):  # damage red, unusual dotted
            ax.add_patch(plt.Rectangle((cols[o["role"]] - 0.5, rows[o["layer"]] - 0.5), 1, 1, fill=False,
                                       ec="red" if o["damage"] else "orange", lw=2 if o["damage"] else 1,
                                       ls="-" if o["damage"] else ":"))
        for f in layer_findings(table, stat):
            if f.code == "layer_duplicate" and f.extra["role"] in cols:
                ax.add_patch(plt.Rectangle((cols[f.extra["role"]] - 0.5, rows[f.extra["layer"]] - 0.5),
                                           1, 1, fill=False, ec="blue", lw=2, ls="--"))
    return ax
